package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/webhook"
)

func TestRotateSecretAndEncryptionKey(t *testing.T) {
	b := setup(t)
	const key = "a-long-enough-operator-key-123456"
	code, out, errs := b.cli(t, "", "--secret-key", key, "dest", "add", "rot", "--url", "https://example.test/h")
	require.Equal(t, 0, code, errs)
	first := strings.TrimSpace(out[strings.Index(out, "whsec_"):])

	code, out, errs = b.cli(t, "", "--secret-key", key, "dest", "rotate-secret", "rot", "--overlap", "2h")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "the old one also signs until")
	second := strings.TrimSpace(out[strings.Index(out, "whsec_"):])
	require.NotEqual(t, first, second)

	st, err := destination.NewStore(context.Background(), b.js, destination.WithSecretKey([]byte(key)))
	require.NoError(t, err)
	d, err := st.Get(context.Background(), "rot")
	require.NoError(t, err)
	require.Equal(t, second, d.Secret)
	require.Equal(t, first, d.PrevSecret)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), d.PrevSecretUntil, time.Minute)

	// Without the key the secret cannot be touched, and nothing leaks.
	code, _, errs = b.cli(t, "", "dest", "rotate-secret", "rot")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "encrypted")
	code, out, _ = b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code)
	require.NotContains(t, out, strings.TrimPrefix(first, "whsec_"))
	require.NotContains(t, out, strings.TrimPrefix(second, "whsec_"))

	code, out, errs = b.cli(t, "", "--secret-key", key, "dest", "rotate-secret", "rot", "--overlap", "0")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "no longer signs")
	d, err = st.Get(context.Background(), "rot")
	require.NoError(t, err)
	require.Empty(t, d.PrevSecret)

	code, _, errs = b.cli(t, "", "--secret-key", "short", "dest", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "at least 16")
}

// A rotation of the key that seals destination secrets: with the new key
// and the old one as previous, 'dest rekey' seals every secret with the new
// key, after which the old key is no longer needed.
func TestRekeyAfterAKeyRotation(t *testing.T) {
	b := setup(t)
	const oldKey, newKey = "the-old-operator-key-123456789", "the-new-operator-key-987654321"
	code, out, errs := b.cli(t, "", "--secret-key", oldKey, "dest", "add", "sealed", "--url", "https://example.test/a")
	require.Equal(t, 0, code, errs)
	secret := strings.TrimSpace(out[strings.Index(out, "whsec_"):])
	// Beside a sealed one, a clear secret takes the operator's say-so.
	code, out, errs = b.cli(t, "", "dest", "add", "clear", "--url", "https://example.test/b", "--allow-unencrypted")
	require.Equal(t, 0, code, errs)
	clearSecret := strings.TrimSpace(out[strings.Index(out, "whsec_"):])
	code, _, errs = b.cli(t, "", "dest", "add", "unsigned", "--url", "https://example.test/c", "--no-secret")
	require.Equal(t, 0, code, errs)

	// The new key alone cannot open what the old one sealed.
	code, _, errs = b.cli(t, "", "--secret-key", newKey, "dest", "rotate-secret", "sealed")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "encrypted")
	// Without the old key, rekey seals what was stored in the clear and
	// says which it could not open.
	code, out, errs = b.cli(t, "", "--secret-key", newKey, "dest", "rekey")
	require.Equal(t, 1, code)
	require.Contains(t, out, "resealed with the current key: 1 destination; already sealed with it or without a secret: 1")
	require.Contains(t, errs, "1 destination not resealed (sealed)")
	require.Contains(t, errs, "give the key a secret is sealed with as --previous-secret-key")

	code, out, errs = b.cli(t, "", "--secret-key", newKey, "--previous-secret-key", oldKey, "dest", "rekey")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "resealed with the current key: 1 destination; already sealed with it or without a secret: 2")
	code, out, errs = b.cli(t, "", "--secret-key", newKey, "dest", "rekey")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "resealed with the current key: 0 destinations; already sealed with it or without a secret: 3")

	st, err := destination.NewStore(context.Background(), b.js, destination.WithSecretKey([]byte(newKey)))
	require.NoError(t, err)
	for name, want := range map[string]string{"sealed": secret, "clear": clearSecret} {
		d, err := st.Get(context.Background(), name)
		require.NoError(t, err)
		require.Equal(t, want, d.Secret, "%s keeps its signing secret", name)
		require.NoError(t, d.Validate(), name)
	}
	kv, err := b.js.KeyValue(context.Background(), stream.DestBucket)
	require.NoError(t, err)
	raw, err := kv.Get(context.Background(), "clear")
	require.NoError(t, err)
	require.NotContains(t, string(raw.Value()), strings.TrimPrefix(clearSecret, "whsec_"), "the secret stored in the clear is sealed now")
	old, err := destination.NewStore(context.Background(), b.js, destination.WithSecretKey([]byte(oldKey)))
	require.NoError(t, err)
	d, err := old.Get(context.Background(), "sealed")
	require.NoError(t, err)
	require.ErrorIs(t, d.Validate(), destination.ErrSealed, "the old key no longer opens it")

	code, _, errs = b.cli(t, "", "dest", "rekey")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "dest rekey seals with the secret key")
	code, _, errs = b.cli(t, "", "--previous-secret-key", oldKey, "dest", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "give the new one too")
	code, _, errs = b.cli(t, "", "--secret-key", newKey, "--previous-secret-key", "short", "dest", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "the previous secret key is 5 bytes")
}

// With a secret key, configured header values are encrypted at rest like the
// signing secret; no listing prints them, nor a URL's query values; and
// 'dest add' without the key is refused beside encrypted destinations.
func TestHeaderValuesAreEncryptedAndNeverPrinted(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	const key = "a-long-enough-operator-key-123456"
	values := []string{"Bearer tok-123", "session=c00kie", "wh-secret-456", "Basic pa-789", "s3cr3t-query"}
	code, out, errs := b.cli(t, "", "--secret-key", key, "dest", "add", "enc",
		"--url", "https://example.test/h?token=s3cr3t-query&v=2",
		"-H", "Authorization="+values[0], "-H", "Cookie="+values[1], "-H", "X-Webhook-Secret="+values[2], "-H", "Proxy-Authorization="+values[3])
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "https://example.test/h?token=xxxxx&v=xxxxx")

	kv, err := b.js.KeyValue(ctx, stream.DestBucket)
	require.NoError(t, err)
	raw, err := kv.Get(ctx, "enc")
	require.NoError(t, err)
	for _, v := range values[:4] {
		require.NotContains(t, string(raw.Value()), v, "a header value is stored in the clear")
	}
	st, err := destination.NewStore(ctx, b.js, destination.WithSecretKey([]byte(key)))
	require.NoError(t, err)
	d, err := st.Get(ctx, "enc")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"Authorization": values[0], "Cookie": values[1], "X-Webhook-Secret": values[2], "Proxy-Authorization": values[3]}, d.Headers)

	for _, args := range [][]string{
		{"--secret-key", key, "dest", "list", "--json"},
		{"dest", "list", "--json"},
		{"--secret-key", key, "dest", "list"},
	} {
		code, out, errs = b.cli(t, "", args...)
		require.Equal(t, 0, code, errs)
		for _, v := range values {
			require.NotContains(t, out, v, "%v printed a secret", args)
		}
		require.Contains(t, out, "token=xxxxx", "%v", args)
		if slices.Contains(args, "--json") {
			for _, h := range []string{"Authorization", "Cookie", "X-Webhook-Secret", "Proxy-Authorization"} {
				require.Contains(t, out, `"`+h+`":"(set)"`, "%v shows the header's name", args)
			}
		}
	}

	// Without the key, beside an encrypted destination: refused, nothing stored.
	code, _, errs = b.cli(t, "", "dest", "add", "plain", "--url", "https://example.test/p")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "encrypted")
	require.Contains(t, errs, "--allow-unencrypted")
	_, err = st.Get(ctx, "plain")
	require.ErrorIs(t, err, destination.ErrNotFound)
	code, _, errs = b.cli(t, "", "dest", "add", "plain", "--url", "https://example.test/p", "--allow-unencrypted")
	require.Equal(t, 0, code, errs)
	// Without secrets there is nothing to encrypt.
	code, _, errs = b.cli(t, "", "dest", "add", "nosecret", "--url", "https://example.test/n", "--no-secret")
	require.Equal(t, 0, code, errs)
}

// A --header value may hold commas: each -H is one header, as given, on
// dest add as on publish (a StringSliceFlag split them at the commas).
func TestHeaderValuesMayHoldCommas(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	code, _, errs := b.cli(t, "", "dest", "add", "commas", "--url", "https://example.test/h", "--no-secret",
		"-H", "Accept=text/html, application/json", "-H", "Cookie=a=1,b=2")
	require.Equal(t, 0, code, errs)
	st, err := destination.NewStore(ctx, b.js)
	require.NoError(t, err)
	d, err := st.Get(ctx, "commas")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"Accept": "text/html, application/json", "Cookie": "a=1,b=2"}, d.Headers)

	start := b.lastSeq(t)
	code, _, errs = b.cli(t, "", "publish", "--dest", "commas", "--data", "{}", "-H", "X-List=a, b,c")
	require.Equal(t, 0, code, errs)
	m := dlqtEvents(t, b, start+1)
	require.Equal(t, "a, b,c", m.Header.Get("X-List"))
}

// A destination that signs v1a: its signing key sealed at rest like a
// secret and never printed, its public key shown by add, show and
// rotate-secret, kept across a move to both and rotated with an overlap.
func TestEd25519SigningKeysOnTheCommandLine(t *testing.T) {
	b := setup(t)
	const key = "an-operator-key-of-enough-bytes"
	code, out, errs := b.cli(t, "", "--secret-key", key, "dest", "add", "edge", "--url", "https://example.test/a", "--signature", "ed25519")
	require.Equal(t, 0, code, errs)
	require.NotContains(t, out, "whsec_", "ed25519 alone: no HMAC secret")
	require.Regexp(t, `public key \(kid [A-Za-z0-9_-]{43}; receivers verify v1a with it, it is also in the JWKS\): whpk_`, out)
	first := out[strings.Index(out, "whpk_"):]
	first = strings.TrimSpace(first)

	st, err := destination.NewStore(context.Background(), b.js, destination.WithSecretKey([]byte(key)))
	require.NoError(t, err)
	d, err := st.Get(context.Background(), "edge")
	require.NoError(t, err)
	require.Empty(t, d.Secret)
	pk, err := webhook.PublicKey(d.SigningKey)
	require.NoError(t, err)
	require.Equal(t, first, pk)

	// Sealed at rest: the stored value does not hold the key.
	kv, err := b.js.KeyValue(context.Background(), stream.DestBucket)
	require.NoError(t, err)
	raw, err := kv.Get(context.Background(), "edge")
	require.NoError(t, err)
	require.NotContains(t, string(raw.Value()), strings.TrimPrefix(d.SigningKey, webhook.SigningKeyPrefix))

	code, out, errs = b.cli(t, "", "--secret-key", key, "dest", "show", "edge")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "signature:")
	require.Contains(t, out, "ed25519")
	require.Contains(t, out, "public key:")
	require.Contains(t, out, first)
	require.NotContains(t, out, strings.TrimPrefix(d.SigningKey, webhook.SigningKeyPrefix))
	code, out, errs = b.cli(t, "", "--secret-key", key, "dest", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "SIGNATURE")
	require.Contains(t, out, "ed25519")

	code, out, errs = b.cli(t, "", "--secret-key", key, "dest", "rotate-secret", "edge", "--overlap", "2h")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "rotated the Ed25519 signing key of edge; the old one also signs, and stays in the JWKS, until")
	require.NotContains(t, out, "whsec_")
	code, out, errs = b.cli(t, "", "--secret-key", key, "dest", "show", "edge", "--json")
	require.Equal(t, 0, code, errs)
	var shown struct {
		SigningKey string `json:"signing_key"`
		PublicKeys []struct {
			Key   string    `json:"key"`
			Until time.Time `json:"until"`
		} `json:"public_keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "(set)", shown.SigningKey)
	require.Len(t, shown.PublicKeys, 2)
	require.Equal(t, first, shown.PublicKeys[1].Key, "the old key second, until the overlap ends")
	require.WithinDuration(t, time.Now().Add(2*time.Hour), shown.PublicKeys[1].Until, time.Minute)

	code, _, errs = b.cli(t, "", "--secret-key", key, "dest", "add", "bad", "--url", "https://example.test/a", "--signature", "rsa")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `signature "rsa": use "hmac", "ed25519" or "both"`)
}
