package destination

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/webhook"
)

// Every error of a destination's settings names the setting at fault, so
// that the CLI and the HTTP API can point at their flag or field.
func TestSettingErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	ptr := func(v any) Settings {
		var s Settings
		switch v := v.(type) {
		case time.Duration:
			s.Timeout = &v
		case int:
			s.MaxAttempts = &v
		case []string:
			s.Types = &v
		case string:
			s.Filter = &v
		}
		return s
	}
	flag := func(s string) string { return "--" + s }
	for _, tc := range []struct {
		name     string
		settings Settings
		setting  string
		flagText string
	}{
		{"timeout", ptr(time.Millisecond), "timeout", "timeout 1ms must be between 100ms and 10m"},
		{"max attempts", ptr(0), "max-attempts", "--max-attempts 0: give 1 or more (1: no retries)"},
		{"too many attempts", ptr(5000), "max-attempts", "max attempts 5000 must be between 1 and 1000"},
		{"type twice", ptr([]string{"a", "a"}), "type", "--type a given twice"},
		{"bad type", ptr([]string{"a b"}), "type", `--type: invalid event type pattern "a b"`},
		{"bad filter", ptr("data.amount >"), "filter", "--filter: filter does not compile"},
		{"bad url", Settings{URLs: []string{"ftp://x"}}, "url", `URL "ftp://x": scheme must be http or https`},
		{"bad secret", Settings{Secret: new("nope")}, "secret", "not a Standard Webhooks secret: it must be \"whsec_<base64>\" (omit it to have one generated)"},
		{"no partitions unordered", Settings{Partitions: new(4)}, "partitions", "partitions and on-failure apply to ordered destinations only"},
		{"backoff", Settings{BackoffBase: new(time.Minute), BackoffMax: new(time.Second)}, "backoff-max", "maximum backoff 1s must not be below the base"},
	} {
		s := tc.settings
		if s.URLs == nil {
			s.URLs = []string{"https://example.com/hook"}
		}
		_, _, err := s.NewDestination("orders")
		var se *SettingError
		require.True(t, errors.As(err, &se), "%s: %v", tc.name, err)
		require.Equal(t, tc.setting, se.Setting, tc.name)
		require.True(t, strings.HasPrefix(se.Text(flag), tc.flagText), "%s: %q", tc.name, se.Text(flag))
	}

	d, generated, err := Settings{URLs: []string{"https://a.example/h", "https://b.example/h"}, Types: &[]string{"", "order.*"}}.NewDestination("orders")
	require.NoError(t, err)
	require.True(t, generated, "no secret given: one is generated")
	require.NotEmpty(t, d.Secret)
	require.Equal(t, []string{"order.*"}, d.Types, "'' subscribes to none")
	require.Equal(t, "https://a.example/h", d.URL)
	_, generated, err = Settings{URLs: []string{"https://a.example/h"}, Secret: new("")}.NewDestination("orders")
	require.NoError(t, err)
	require.False(t, generated, "an empty secret: unsigned")
}

// Moving to ed25519 alone drops the HMAC secrets; moving back to v1
// generates a new one (never unsigned by surprise, never the old one).
func TestSignatureMovesKeepNoStaleSecret(t *testing.T) {
	t.Parallel()
	old := webhook.GenerateSecret()
	d := Destination{Name: "d", URL: "https://example.com/h", Secret: old, PrevSecret: webhook.GenerateSecret(), PrevSecretUntil: time.Now().Add(time.Hour)}
	before := d
	Settings{Signature: new(SignatureEd25519)}.Apply(&d)
	require.Empty(t, d.Secret)
	require.Empty(t, d.PrevSecret)
	require.NotEmpty(t, d.SigningKey, "a key generated")
	require.Empty(t, Settings{Signature: new(SignatureEd25519)}.GeneratedSecret(before, d))
	require.NoError(t, d.WithDefaults().Validate())
	key := d.SigningKey

	before = d
	Settings{Signature: new(SignatureHMAC)}.Apply(&d)
	require.NotEmpty(t, d.Secret)
	require.NotEqual(t, old, d.Secret)
	require.Equal(t, d.Secret, Settings{Signature: new(SignatureHMAC)}.GeneratedSecret(before, d), "shown once")
	require.Equal(t, key, d.SigningKey, "the key is kept, unused")
	require.Empty(t, d.PublicKeys(time.Now()), "hmac publishes no key")

	// Both, from ed25519, with a secret given: that one.
	d = Destination{Name: "d", URL: "https://example.com/h", Signature: SignatureEd25519, SigningKey: key}
	before = d
	given := webhook.GenerateSecret()
	Settings{Signature: new(SignatureBoth), Secret: &given}.Apply(&d)
	require.Equal(t, given, d.Secret)
	require.Empty(t, Settings{Signature: new(SignatureBoth), Secret: &given}.GeneratedSecret(before, d), "given, not generated")

	s := Settings{Signature: new(SignatureEd25519), Secret: &given}
	require.ErrorContains(t, s.Validate(), "signature ed25519 signs with a key, not a secret")
}
