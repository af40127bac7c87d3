package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/relay"
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

	st, err := relay.NewStore(context.Background(), b.js, relay.WithSecretKey([]byte(key)))
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
