package webhook

import (
	"crypto/ed25519"
	"encoding/base64"
	"testing"

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
