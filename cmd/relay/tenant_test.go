package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/tenant"
)

// Not parallel, as every test of Main.
func TestTenantPutGetListDelete(t *testing.T) {
	b := setup(t)
	code, out, errs := b.cli(t, "", "tenant", "put", "acme", "--name", "Acme", "--metadata", "plan=pro", "--metadata", "region=eu,west")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "created tenant acme\n", out)

	s, err := tenant.Open(context.Background(), b.js, nil)
	require.NoError(t, err)
	got, err := s.Get(context.Background(), "acme")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"plan": "pro", "region": "eu,west"}, got.Metadata, "stored as given")

	code, out, errs = b.cli(t, "", "tenant", "put", "acme", "--name", "Acme Corp", "--json")
	require.Equal(t, 0, code, errs)
	var js map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &js), out)
	require.Equal(t, "Acme Corp", js["name"])
	require.Nil(t, js["metadata"], "put replaces the metadata")

	code, out, errs = b.cli(t, "", "tenant", "get", "acme")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "Acme Corp")

	code, _, errs = b.cli(t, "", "tenant", "put", "beta")
	require.Equal(t, 0, code, errs)
	code, out, errs = b.cli(t, "", "tenant", "list")
	require.Equal(t, 0, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.True(t, strings.HasPrefix(lines[1], "acme "), out)
	require.True(t, strings.HasPrefix(lines[2], "beta "), out)
	code, out, _ = b.cli(t, "", "tenant", "list", "--json")
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)

	// A destination and a key of the tenant's; the same name of no
	// tenant's is another destination.
	for _, args := range [][]string{
		{"dest", "add", "orders", "--tenant", "acme", "--url", "https://acme.example.com/h"},
		{"dest", "add", "orders", "--url", "https://example.com/h"},
		{"api-key", "create", "--name", "acme-pub", "--scope", "publish", "--tenant", "acme"},
	} {
		code, out, errs = b.cli(t, "", args...)
		require.Equal(t, 0, code, "%v: %s", args, errs)
	}
	require.Contains(t, out, "of tenant acme")
	code, out, errs = b.cli(t, "", "dest", "list", "--tenant", "acme")
	require.Equal(t, 0, code, errs)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)
	require.True(t, strings.HasPrefix(strings.Split(out, "\n")[1], "acme "), out)
	code, out, _ = b.cli(t, "", "api-key", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "acme-pub  publish  acme")
	code, _, errs = b.cli(t, "", "dest", "add", "orders", "--tenant", "nobody", "--url", "https://example.com/h")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "--tenant: no such tenant: nobody")

	code, out, errs = b.cli(t, "", "tenant", "delete", "acme")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "deleted tenant acme, its 1 API keys and its 1 destinations\n", out)
	code, out, _ = b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1, "the destination of no tenant is left: %s", out)
	code, out, _ = b.cli(t, "", "api-key", "list")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "acme-pub")
	code, _, errs = b.cli(t, "", "tenant", "get", "acme")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "no such tenant: acme")
	code, _, errs = b.cli(t, "", "tenant", "delete", "acme")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "no such tenant: acme")
}

func TestTenantBadInputExits2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenant", "put"}, "ID"},
		{[]string{"tenant", "put", "acme.corp"}, "invalid tenant id"},
		{[]string{"tenant", "put", "acme", "--name", strings.Repeat("n", 257)}, "--name"},
		{[]string{"tenant", "put", "acme", "--metadata", "plan"}, "KEY=VALUE"},
		{[]string{"tenant", "put", "acme", "--metadata", "a=1", "--metadata", "a=2"}, "given twice"},
		{[]string{"tenant", "put", "acme", "--metadata", "plan=" + strings.Repeat("v", 513)}, "--metadata plan"},
		{[]string{"tenant", "get"}, "ID"},
		{[]string{"tenant", "list", "extra"}, "no arguments"},
		{[]string{"dest", "add", "orders", "--tenant", "a.b", "--url", "https://example.com"}, "--tenant: invalid tenant id"},
		{[]string{"tenant", "put", "acme", "--default-timeout", "1h"}, "--default-timeout"},
		{[]string{"tenant", "put", "acme", "--publish-rate", "-1"}, "--publish-rate"},
		{[]string{"tenant", "put", "acme", "--portal-product-name", strings.Repeat("p", 101)}, "--portal-product-name: 101 bytes"},
		{[]string{"tenant", "put", "acme", "--portal-accent-color", "blue"}, "--portal-accent-color: \"blue\": give a color as #rrggbb"},
		{[]string{"tenant", "put", "acme", "--portal-frame-ancestor", "https://app.example.com/"}, "--portal-frame-ancestor: origin \"https://app.example.com/\""},
		{[]string{"tenant", "put", "acme", "--portal-frame-ancestor", "https://a.example", "--portal-frame-ancestor", "https://A.example:443"}, "given twice"},
		{[]string{"dest", "pause", "acme=orders"}, "is named with --tenant"},
		{[]string{"api-key", "create", "--name", "k", "--scope", "read", "--tenant", "a b"}, "--tenant: invalid tenant id"},
	} {
		var out, errb strings.Builder
		// No server: bad input is refused before connecting.
		code := Main(append([]string{"relay", "--nats-url", "nats://127.0.0.1:1"}, tc.args...), strings.NewReader(""), &out, &errb)
		require.Equal(t, 2, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.want, tc.args)
	}
}

// A tenant's defaults from the CLI: its destinations added without a
// setting take the tenant's, with one keep theirs; its destination limit
// refuses one more.
func TestTenantDefaultsFromTheCLI(t *testing.T) {
	b := setup(t)
	code, out, errs := b.cli(t, "", "tenant", "put", "acme", "--default-timeout", "5s", "--default-max-attempts", "3", "--max-destinations", "2", "--json")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"defaults":{"max_attempts":3,"timeout":"5s"}`)
	require.Contains(t, out, `"limits":{"max_destinations":2}`)
	for _, args := range [][]string{
		{"dest", "add", "a", "--tenant", "acme", "--url", "https://a.example.com/h"},
		{"dest", "add", "b", "--tenant", "acme", "--url", "https://b.example.com/h", "--timeout", "7s"},
	} {
		code, _, errs = b.cli(t, "", args...)
		require.Equal(t, 0, code, "%v: %s", args, errs)
	}
	code, _, errs = b.cli(t, "", "dest", "add", "c", "--tenant", "acme", "--url", "https://c.example.com/h")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "--max-destinations 2")
	st, err := destination.NewStore(context.Background(), b.js)
	require.NoError(t, err)
	a, err := st.Get(context.Background(), "acme=a")
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, time.Duration(a.Timeout))
	require.Equal(t, 3, a.Retry.MaxAttempts)
	bd, err := st.Get(context.Background(), "acme=b")
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, time.Duration(bd.Timeout))
	require.Equal(t, 3, bd.Retry.MaxAttempts)
}

// A tenant's portal settings from the CLI: stored normalized, shown by
// --json, and replaced (cleared) by a put without them.
func TestTenantPortalSettingsFromTheCLI(t *testing.T) {
	b := setup(t)
	code, out, errs := b.cli(t, "", "tenant", "put", "acme", "--portal-product-name", "Acme Hooks", "--portal-accent-color", "#1A73E8",
		"--portal-frame-ancestor", "HTTPS://App.Acme.example:443", "--portal-frame-ancestor", "https://*.acme.example", "--json")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"portal":{"product_name":"Acme Hooks","accent_color":"#1a73e8","frame_ancestors":["https://app.acme.example","https://*.acme.example"]}`)
	s, err := tenant.Open(context.Background(), b.js, nil)
	require.NoError(t, err)
	got, err := s.Get(context.Background(), "acme")
	require.NoError(t, err)
	require.Equal(t, tenant.Portal{ProductName: "Acme Hooks", AccentColor: "#1a73e8", FrameAncestors: []string{"https://app.acme.example", "https://*.acme.example"}}, got.Portal)

	code, out, errs = b.cli(t, "", "tenant", "put", "acme", "--json")
	require.Equal(t, 0, code, errs)
	require.NotContains(t, out, "portal", "put replaces the portal settings")
}
