package webhook

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Standard Webhooks test vector for v1a (the Svix server's): a 32-byte
// seed, and the signature it makes.
func TestSignEd25519MatchesTheStandardsVector(t *testing.T) {
	t.Parallel()
	key := SigningKeyPrefix + "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	sig, err := SignEd25519(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	require.NoError(t, err)
	require.Equal(t, "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==", sig)

	// The same key as 64 bytes (seed and public key) signs the same.
	seed, _ := base64.StdEncoding.DecodeString("VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=")
	full := SigningKeyPrefix + base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(seed))
	sig2, err := SignEd25519(full, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	require.NoError(t, err)
	require.Equal(t, sig, sig2)
	pk1, err := PublicKey(key)
	require.NoError(t, err)
	pk2, err := PublicKey(full)
	require.NoError(t, err)
	require.Equal(t, pk1, pk2)
}

// RFC 8037's example key (appendix A.2) and its RFC 7638 thumbprint
// (appendix A.3).
func TestJWKThumbprintIsRFC8037s(t *testing.T) {
	t.Parallel()
	x, err := base64.RawURLEncoding.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	require.NoError(t, err)
	k, err := JWKOf(PublicKeyPrefix + base64.StdEncoding.EncodeToString(x))
	require.NoError(t, err)
	require.Equal(t, JWK{Kty: "OKP", Crv: "Ed25519", X: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", Kid: "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k", Use: "sig", Alg: "EdDSA"}, k)
	pk, err := PublicKeyOfJWK(k)
	require.NoError(t, err)
	require.Equal(t, PublicKeyPrefix+base64.StdEncoding.EncodeToString(x), pk)
	_, err = PublicKeyOfJWK(JWK{Kty: "RSA", X: k.X})
	require.ErrorIs(t, err, ErrPublicKey)
}

func TestSigningKeysAreChecked(t *testing.T) {
	t.Parallel()
	k := GenerateSigningKey()
	require.NoError(t, ValidateSigningKey(k))
	raw, _ := base64.StdEncoding.DecodeString(k[len(SigningKeyPrefix):])
	require.Len(t, raw, 64)
	raw[40] ^= 1 // a public half that is not the seed's
	for _, bad := range []string{"", "whsec_" + k[5:], "whsk_!!", "whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 16)), "whsk_" + base64.StdEncoding.EncodeToString(raw)} {
		require.ErrorIs(t, ValidateSigningKey(bad), ErrSigningKey, bad)
	}
	pk, err := PublicKey(k)
	require.NoError(t, err)
	require.NoError(t, ValidatePublicKey(pk))
	for _, bad := range []string{"", "whpk_!!", "whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31)), k} {
		require.ErrorIs(t, ValidatePublicKey(bad), ErrPublicKey, bad)
	}
}

func BenchmarkSignEd25519(b *testing.B) {
	key := GenerateSigningKey()
	body := make([]byte, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SignEd25519(key, "evt_06h2rcpt1p0j6zbfdgx7z5g334", 1764500000, body); err != nil {
			b.Fatal(err)
		}
	}
}
func TestVerifyEd25519(t *testing.T) {
	t.Parallel()
	const (
		id = "evt_0abc"
		ts = int64(1700000000)
	)
	body := []byte(`{"amount":100}`)
	sk, oldSK, otherSK := GenerateSigningKey(), GenerateSigningKey(), GenerateSigningKey()
	pk, err := PublicKey(sk)
	require.NoError(t, err)
	oldPK, err := PublicKey(oldSK)
	require.NoError(t, err)
	sign := func(key, id string, ts int64, body []byte) string {
		sig, err := SignEd25519(key, id, ts, body)
		require.NoError(t, err)
		return sig
	}
	good, old, other := sign(sk, id, ts, body), sign(oldSK, id, ts, body), sign(otherSK, id, ts, body)
	hmacSig := signTestExpected(signTestKey, id, ts, body)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(good, "v1a,"))
	require.NoError(t, err)
	flipped := bytes.Clone(raw)
	flipped[10] ^= 1

	for _, tc := range []struct {
		name, key, id string
		ts            int64
		body          []byte
		header        string
		want          string // "" verifies; else the error's text after the sentinel's
	}{
		{"exact", pk, id, ts, body, good, ""},
		{"rotation: old and new, new key", pk, id, ts, body, old + " " + good, ""},
		{"rotation: old and new, old key", oldPK, id, ts, body, old + " " + good, ""},
		{"both schemes, public key", pk, id, ts, body, hmacSig + " " + good, ""},
		{"both schemes, secret", signTestSecret, id, ts, body, good + " " + hmacSig, ""},
		{"tampered body", pk, id, ts, []byte(`{"amount":1000}`), good, "no v1a signature verifies under the public key"},
		{"tampered id", pk, "evt_0abd", ts, body, good, "no v1a signature verifies under the public key"},
		{"tampered timestamp", pk, id, ts + 1, body, good, "no v1a signature verifies under the public key"},
		{"other keys' signatures", pk, id, ts, body, old + " " + other, "no v1a signature verifies under the public key"},
		{"a bit flipped", pk, id, ts, body, "v1a," + base64.StdEncoding.EncodeToString(flipped), "no v1a signature verifies under the public key"},
		{"truncated", pk, id, ts, body, "v1a," + base64.StdEncoding.EncodeToString(raw[:63]), "no v1a signature verifies under the public key"},
		{"not base64", pk, id, ts, body, "v1a,!!" + good[6:], "no v1a signature verifies under the public key"},
		{"as v1", pk, id, ts, body, "v1," + strings.TrimPrefix(good, "v1a,"), "the header has no v1a signature (v1 ones verify with a whsec_ secret)"},
		{"HMAC only, public key", pk, id, ts, body, hmacSig, "the header has no v1a signature (v1 ones verify with a whsec_ secret)"},
		{"Ed25519 only, secret", signTestSecret, id, ts, body, good, "the header has no v1 signature (v1a ones verify with a whpk_ public key)"},
		{"wrong secret", signTestSecret, id, ts, []byte("{}"), hmacSig, "no v1 signature matches the secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tc.key, tc.id, tc.ts, tc.body, tc.header)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrNoMatchingSignature)
			require.EqualError(t, err, "webhook: no matching signature: "+tc.want)
		})
	}
}

// A key that is neither a secret nor a public key says what is wanted.
func TestVerifyNamesTheKeyKinds(t *testing.T) {
	t.Parallel()
	sk := GenerateSigningKey()
	sig, err := SignEd25519(sk, "evt_1", 1, nil)
	require.NoError(t, err)
	for _, key := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", sk} {
		err := Verify(key, "evt_1", 1, nil, sig)
		require.ErrorIs(t, err, ErrSecret, key)
		require.ErrorIs(t, err, ErrPublicKey, key)
		require.ErrorContains(t, err, `"whsec_<base64>"`)
		require.ErrorContains(t, err, `"whpk_<base64>"`)
	}
	require.ErrorContains(t, Verify(sk, "evt_1", 1, nil, sig), "verify with its whpk_ public key")
	err = Verify("whpk_"+base64.StdEncoding.EncodeToString(make([]byte, 31)), "evt_1", 1, nil, sig)
	require.ErrorIs(t, err, ErrPublicKey)
	require.NotErrorIs(t, err, ErrSecret)
}

func TestVerifyRequestEd25519(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_900_000_000, 0)
	body := []byte(`{"order":42}`)
	sk := GenerateSigningKey()
	pk, err := PublicKey(sk)
	require.NoError(t, err)
	signed := func(ts int64) http.Header {
		sig, err := SignEd25519(sk, "evt_1", ts, body)
		require.NoError(t, err)
		h := http.Header{}
		h.Set(HeaderID, "evt_1")
		h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		h.Set(HeaderSignature, sig)
		return h
	}
	require.NoError(t, VerifyRequest(pk, signed(now.Unix()), body, now, 0))
	require.NoError(t, VerifyRequest(pk, signed(now.Unix()-240), body, now, 0))
	require.ErrorIs(t, VerifyRequest(pk, signed(now.Unix()-360), body, now, 0), ErrTimestamp)
	require.ErrorIs(t, VerifyRequest(pk, signed(now.Unix()), []byte(`{"order":43}`), now, 0), ErrNoMatchingSignature)
	h := signed(now.Unix())
	h.Del(HeaderSignature)
	require.ErrorIs(t, VerifyRequest(pk, h, body, now, 0), ErrMissingHeader)
}

func ExampleVerifyRequest_ed25519() {
	// The destination's signing key stays with relay; the receiver holds
	// its public key (relay dest show prints it). This one is of the
	// Standard Webhooks test vector's key.
	publicKey := "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="

	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==")

	now := time.Unix(1614265330, 0).Add(time.Minute)
	fmt.Println(VerifyRequest(publicKey, h, body, now, 0))
	fmt.Println(VerifyRequest(publicKey, h, []byte(`{"test": 1}`), now, 0))
	// Output:
	// <nil>
	// webhook: no matching signature: no v1a signature verifies under the public key
}
