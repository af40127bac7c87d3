package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/api"
)

// Not parallel, as every test of Main: urfave/cli v2 mutates package-level
// help flags on each run.
func TestAPIKeyCreateListRevoke(t *testing.T) {
	b := setup(t)
	code, out, errs := b.cli(t, "", "api-key", "create", "--name", "ci", "--scope", "publish")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "created API key ci (scope publish, id ")
	key := regexp.MustCompile(`relay_[0-9a-f]{16}_\S+`).FindString(out)
	require.NotEmpty(t, key, out)

	keys, err := api.OpenKeys(context.Background(), b.js)
	require.NoError(t, err)
	got, err := keys.Verify(context.Background(), key)
	require.NoError(t, err, "the key printed is the key stored")
	require.Equal(t, api.ScopePublish, got.Scope)

	code, out, errs = b.cli(t, "", "api-key", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "NAME")
	require.Contains(t, out, "ci")
	require.Contains(t, out, got.ID)
	require.NotContains(t, out, key[len("relay_")+17:], "never the key")
	code, out, _ = b.cli(t, "", "api-key", "list", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"scope":"publish"`)
	require.NotContains(t, out, `"hash"`)

	code, _, errs = b.cli(t, "", "api-key", "create", "--name", "ci", "--scope", "admin")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "an API key with this name exists: ci")

	code, out, errs = b.cli(t, "", "api-key", "revoke", "ci")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "revoked API key ci")
	// A process that has not verified it since (a running replica
	// refuses it within a second: TestKeyRevokedElsewhereStopsWorkingWithinASecond).
	fresh, err := api.OpenKeys(context.Background(), b.js)
	require.NoError(t, err)
	_, err = fresh.Verify(context.Background(), key)
	require.ErrorIs(t, err, api.ErrBadKey)
	code, _, errs = b.cli(t, "", "api-key", "revoke", "ci")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "no API key with this name: ci")
}

func TestAPIKeyBadInputExits2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"api-key", "create", "--scope", "read"}, "--name is required"},
		{[]string{"api-key", "create", "--name", "x"}, "--scope is required"},
		{[]string{"api-key", "create", "--name", "x", "--scope", "root"}, `--scope: scope "root": use publish, read or admin`},
		{[]string{"api-key", "create", "--name", "a b", "--scope", "read"}, `--name: key name "a b"`},
		{[]string{"api-key", "create", "extra", "--name", "x", "--scope", "read"}, "api-key create takes no arguments"},
		{[]string{"api-key", "revoke"}, "expected exactly one argument, NAME"},
	} {
		var out, errb strings.Builder
		// No server: bad input is refused before connecting.
		code := Main(append([]string{"relay", "--nats-url", "nats://127.0.0.1:1"}, tc.args...), strings.NewReader(""), &out, &errb)
		require.Equal(t, 2, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.want, tc.args)
	}
}

func TestRunRefusesAnOpenAPIWithoutKeys(t *testing.T) {
	b := setup(t)
	code, _, errs := b.cli(t, "", "run", "--api-addr", "0.0.0.0:0", "--metrics-addr", "")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "is not a loopback address and no API key exists: create one first")
}

func TestRunAPITLSFlagsGoTogether(t *testing.T) {
	var out, errb strings.Builder
	code := Main([]string{"relay", "run", "--api-addr", "127.0.0.1:0", "--api-tls-cert", "c.pem", "--data-dir", t.TempDir()}, strings.NewReader(""), &out, &errb)
	require.Equal(t, 2, code, errb.String())
	require.Contains(t, errb.String(), "--api-tls-cert and --api-tls-key go together")
}
