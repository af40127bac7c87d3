package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// signTestKey is a fixed 32-byte key and signTestSecret its whsec_ form.
var signTestKey = []byte("0123456789abcdef0123456789ABCDEF")

var signTestSecret = SecretPrefix + base64.StdEncoding.EncodeToString(signTestKey)

// signTestExpected computes a Standard Webhooks v1 signature independently of
// webhook.go.
func signTestExpected(key []byte, id string, ts int64, body []byte) string {
	content := id + "." + strconv.FormatInt(ts, 10) + "." + string(body)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(content))
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestSignMatchesIndependentHMAC(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		ts   int64
		body []byte
	}{
		{"json body", "evt_01hx", 1700000000, []byte(`{"order":42}`)},
		{"empty body", "msg_1", 1614265330, nil},
		{"zero timestamp", "id", 0, []byte("x")},
		{"dots in id and body", "a.b.c", 1, []byte("d.e.f")},
		{"unicode and newline body", "evt_ü", 2000000000, []byte("héllo\nwörld\x00")},
		{"long id and body", strings.Repeat("e", 200), 1614265330, bytes.Repeat([]byte("z"), 4096)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := signTestExpected(signTestKey, tc.id, tc.ts, tc.body)
			got, err := Sign(signTestSecret, tc.id, tc.ts, tc.body)
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.True(t, strings.HasPrefix(got, "v1,"))
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(got, "v1,"))
			require.NoError(t, err)
			require.Len(t, raw, sha256.Size)
			require.NoError(t, Verify(signTestSecret, tc.id, tc.ts, tc.body, got))
		})
	}
}

// TestSignStandardWebhooksVector checks the test vector published with the
// Standard Webhooks reference libraries (e.g. libraries/go/webhook_test.go
// TestWebhookSign in standard-webhooks/standard-webhooks, and Svix's). Its
// secret decodes to exactly 24 bytes, relay's lower bound.
func TestSignStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = int64(1614265330)
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	body := []byte(`{"test": 2432232314}`)

	key, err := decodeSecret(secret)
	require.NoError(t, err, "the spec's own secret must be accepted")
	require.Len(t, key, 24)

	got, err := Sign(secret, id, ts, body)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, want, signTestExpected(key, id, ts, body))

	require.NoError(t, Verify(secret, id, ts, body, want))
	require.NoError(t, Verify(secret, id, ts, body, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= "+want))
	require.Error(t, Verify(secret, id, ts+1, body, want))
	require.Error(t, Verify(secret, id, ts, []byte(`{"test": 2432232315}`), want))
}

func TestVerify(t *testing.T) {
	t.Parallel()
	const (
		id = "evt_0abc"
		ts = int64(1700000000)
	)
	body := []byte(`{"amount":100}`)
	good := signTestExpected(signTestKey, id, ts, body)
	otherSecret := SecretPrefix + base64.StdEncoding.EncodeToString([]byte("another-secret-key-of-32-bytes!!"))
	otherSig := signTestExpected([]byte("another-secret-key-of-32-bytes!!"), id, ts, body)

	tests := []struct {
		name   string
		secret string
		id     string
		ts     int64
		body   []byte
		header string
		ok     bool
	}{
		{"exact", signTestSecret, id, ts, body, good, true},
		{"first of several", signTestSecret, id, ts, body, good + " " + otherSig + " v1,AAAA", true},
		{"last of several", signTestSecret, id, ts, body, "v1,AAAA v2,xyz " + otherSig + " " + good, true},
		{"surrounded by extra spaces", signTestSecret, id, ts, body, "  " + otherSig + "   " + good + "  ", true},
		{"other secret's signature verifies with it", otherSecret, id, ts, body, otherSig, true},
		{"tampered body", signTestSecret, id, ts, []byte(`{"amount":1000}`), good, false},
		{"body with trailing newline", signTestSecret, id, ts, append(bytes.Clone(body), '\n'), good, false},
		{"tampered id", signTestSecret, "evt_0abd", ts, body, good, false},
		{"tampered timestamp", signTestSecret, id, ts + 1, body, good, false},
		{"wrong secret", otherSecret, id, ts, body, good, false},
		{"only other signatures", signTestSecret, id, ts, body, otherSig + " v1,AAAA", false},
		{"empty header", signTestSecret, id, ts, body, "", false},
		{"signature without version", signTestSecret, id, ts, body, strings.TrimPrefix(good, "v1,"), false},
		{"signature with another version", signTestSecret, id, ts, body, "v2," + strings.TrimPrefix(good, "v1,"), false},
		{"comma-joined signatures are not split", signTestSecret, id, ts, body, otherSig + "," + good, false},
		{"truncated signature", signTestSecret, id, ts, body, good[:len(good)-2], false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tc.secret, tc.id, tc.ts, tc.body, tc.header)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

func TestSecretValidation(t *testing.T) {
	t.Parallel()
	b64 := func(n int) string {
		return SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xA5}, n))
	}
	tests := []struct {
		name    string
		secret  string
		wantErr string // empty: accepted
	}{
		{"32 bytes", signTestSecret, ""},
		{"24 bytes", b64(24), ""},
		{"64 bytes", b64(64), ""},
		{"no prefix", base64.StdEncoding.EncodeToString(signTestKey), "whsec_"},
		{"spec secret without prefix", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"},
		{"upper-case prefix", "WHSEC_" + base64.StdEncoding.EncodeToString(signTestKey), "whsec_"},
		{"empty", "", "whsec_"},
		{"prefix only", SecretPrefix, "bytes"},
		{"bad base64", "whsec_not base64!", "base64"},
		{"url-safe base64", SecretPrefix + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xFB}, 32)), "base64"},
		{"missing padding", strings.TrimRight(b64(32), "="), "base64"},
		{"16 bytes", b64(16), "16 bytes"},
		{"23 bytes", b64(23), "23 bytes"},
		{"65 bytes", b64(65), "65 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, decErr := decodeSecret(tc.secret)
			sig, signErr := Sign(tc.secret, "id", 1, []byte("{}"))
			verErr := Verify(tc.secret, "id", 1, []byte("{}"), "v1,AAAA")
			if tc.wantErr == "" {
				require.NoError(t, decErr)
				require.NoError(t, signErr)
				require.NotEmpty(t, sig)
				require.NoError(t, Verify(tc.secret, "id", 1, []byte("{}"), sig))
				return
			}
			for _, err := range []error{decErr, signErr, verErr} {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.wantErr)
			}
			require.Empty(t, sig)
		})
	}
}

func TestGenerateSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 50 {
		s := GenerateSecret()
		require.True(t, strings.HasPrefix(s, SecretPrefix), s)
		key, err := decodeSecret(s)
		require.NoError(t, err)
		require.Len(t, key, 32)
		require.False(t, seen[s], "GenerateSecret repeated %s", s)
		seen[s] = true

		sig, err := Sign(s, "evt_1", 1700000000, []byte("{}"))
		require.NoError(t, err)
		require.Equal(t, signTestExpected(key, "evt_1", 1700000000, []byte("{}")), sig)
		require.NoError(t, Verify(s, "evt_1", 1700000000, []byte("{}"), sig))
	}
	a, b := GenerateSecret(), GenerateSecret()
	require.NotEqual(t, a, b)
	sig, err := Sign(a, "evt_1", 1, nil)
	require.NoError(t, err)
	require.Error(t, Verify(b, "evt_1", 1, nil, sig), "a signature must not verify with another generated secret")
}

// The cached, pooled signer gives the same signature as a fresh HMAC, for
// short and long ids, across many secrets (past the cache's size).
func TestCachedSignerMatchesFreshHMAC(t *testing.T) {
	body := []byte(`{"n":1}`)
	ids := []string{"evt_1", strings.Repeat("x", 300)}
	for i := range maxSigners + 10 {
		secret := GenerateSecret()
		key, err := decodeSecret(secret)
		require.NoError(t, err)
		for _, id := range ids {
			got, err := Sign(secret, id, int64(1764500000+i), body)
			require.NoError(t, err)
			require.Equal(t, signTestExpected(key, id, int64(1764500000+i), body), got)
		}
		if i%1000 == 0 {
			// The same secret again, from the cache.
			got, err := Sign(secret, "evt_2", 7, body)
			require.NoError(t, err)
			require.Equal(t, signTestExpected(key, "evt_2", 7, body), got)
		}
	}
	signersMu.RLock()
	defer signersMu.RUnlock()
	require.LessOrEqual(t, len(signers), maxSigners)
}

// TestCachedSignerIsSafeAcrossGoroutines: workers of many destinations sign
// at once, with secrets shared between them, so the cache and each signer's
// pool of HMAC states are used concurrently (the race detector watches in
// make test). Every signature must match one computed from scratch: a state
// handed to two goroutines at once, or returned dirty, would mix them up.
func TestCachedSignerIsSafeAcrossGoroutines(t *testing.T) {
	secrets := make([]string, 8)
	keys := make([][]byte, len(secrets))
	for i := range secrets {
		secrets[i] = GenerateSecret()
		var err error
		keys[i], err = decodeSecret(secrets[i])
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				k := (g + i) % len(secrets)
				id := fmt.Sprintf("evt_%d_%d", g, i)
				body := []byte(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))
				got, err := Sign(secrets[k], id, int64(i), body)
				if err != nil || got != signTestExpected(keys[k], id, int64(i), body) {
					errs <- fmt.Sprintf("goroutine %d event %d: %q, %v", g, i, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// BenchmarkSign is the cost of signing a 1 KiB body with a cached signer.
func BenchmarkSign(b *testing.B) {
	secret := GenerateSecret()
	body := make([]byte, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Sign(secret, "evt_06h2rcpt1p0j6zbfdgx7z5g334", 1764500000, body); err != nil {
			b.Fatal(err)
		}
	}
}

// A receiver's whole check: headers present, timestamp within the
// tolerance either way, and a signature of the body.
func TestVerifyRequest(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_900_000_000, 0)
	body := []byte(`{"order":42}`)
	headers := func(id string, ts int64, sig string) http.Header {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		h.Set(HeaderSignature, sig)
		return h
	}
	signed := func(ts int64) http.Header {
		sig, err := Sign(signTestSecret, "evt_1", ts, body)
		require.NoError(t, err)
		return headers("evt_1", ts, sig)
	}
	noTS := signed(now.Unix())
	noTS.Del(HeaderTimestamp)
	badTS := signed(now.Unix())
	badTS.Set(HeaderTimestamp, "2030-01-01")
	for _, tc := range []struct {
		name      string
		h         http.Header
		body      []byte
		tolerance time.Duration
		want      error
	}{
		{"genuine", signed(now.Unix()), body, 0, nil},
		{"4 minutes old", signed(now.Unix() - 240), body, 0, nil},
		{"4 minutes ahead", signed(now.Unix() + 240), body, 0, nil},
		{"6 minutes old", signed(now.Unix() - 360), body, 0, ErrTimestamp},
		{"6 minutes ahead", signed(now.Unix() + 360), body, 0, ErrTimestamp},
		{"6 minutes old, 10 allowed", signed(now.Unix() - 360), body, 10 * time.Minute, nil},
		{"tampered body", signed(now.Unix()), []byte(`{"order":43}`), 0, ErrNoMatchingSignature},
		{"no timestamp", noTS, body, 0, ErrMissingHeader},
		{"timestamp not in seconds", badTS, body, 0, ErrTimestamp},
		{"no headers", http.Header{}, body, 0, ErrMissingHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := VerifyRequest(signTestSecret, tc.h, tc.body, now, tc.tolerance)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
	require.ErrorIs(t, VerifyRequest("whsec_short", signed(now.Unix()), body, now, 0), ErrSecret)
}

// Receivers link this package alone: it must never import anything but
// the standard library.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "github.com/relaydev/relay/webhook", strings.TrimSpace(string(out)),
		"the webhook package imports a non-standard package")
}

func ExampleVerifyRequest() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	// What a request from relay carries.
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")

	now := time.Unix(1614265330, 0).Add(time.Minute)
	fmt.Println(VerifyRequest(secret, h, body, now, 0))
	fmt.Println(VerifyRequest(secret, h, []byte(`{"test": 1}`), now, 0))
	fmt.Println(VerifyRequest(secret, h, body, now.Add(time.Hour), 0))
	// Output:
	// <nil>
	// webhook: no matching signature: no v1 signature matches the secret
	// webhook: timestamp: 1614265330 is 1h1m0s from now, more than the tolerance of 5m0s
}

func ExampleSign() {
	sig, err := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	fmt.Println(sig, err)
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= <nil>
}
