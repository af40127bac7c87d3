package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/eventtype"
)

// Not parallel, as every test of Main.
func TestEventTypePutGetListDelete(t *testing.T) {
	b := setup(t)
	schema := filepath.Join(t.TempDir(), "order.json")
	require.NoError(t, os.WriteFile(schema, []byte(`{"type":"object","required":["id"]}`), 0o600))
	code, out, errs := b.cli(t, "", "event-type", "put", "order.created", "--description", "An order was placed.",
		"--example", `{"id":"o-1"}`, "--schema", "@"+schema)
	require.Equal(t, 0, code, errs)
	require.Equal(t, "created event type order.created: its events are checked against its schema\n", out)

	s, err := eventtype.Open(context.Background(), b.js, nil)
	require.NoError(t, err)
	got, err := s.Get(context.Background(), "order.created")
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"object","required":["id"]}`, string(got.Schema))

	code, out, errs = b.cli(t, "", "event-type", "get", "order.created")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"description": "An order was placed."`)
	code, out, errs = b.cli(t, "", "event-type", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "order.created  yes")

	code, out, errs = b.cli(t, "", "event-type", "put", "order.created", "--description", "No schema now.")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replaced event type order.created: its events are not checked")

	code, out, errs = b.cli(t, "", "event-type", "delete", "order.created")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "deleted event type order.created")
	code, _, errs = b.cli(t, "", "event-type", "get", "order.created")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "no such event type: order.created")
}

func TestEventTypeBadInputExits2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"event-type", "put"}, "TYPE"},
		{[]string{"event-type", "put", "Order Created"}, "event type"},
		{[]string{"event-type", "put", "order.created", "--example", "{"}, "--example: not valid JSON"},
		{[]string{"event-type", "put", "order.created", "--schema", "@/no/such/file"}, "--schema"},
		{[]string{"event-type", "put", "order.created", "--schema", `{"type":"nope"}`}, "--schema"},
		{[]string{"event-type", "put", "order.created", "--schema", `{"$ref":"file:///etc/passwd"}`}, "--schema"},
		{[]string{"event-type", "put", "order.created", "--schema", `{"required":["id"]}`, "--example", `{}`}, "--example: does not satisfy the schema"},
		{[]string{"event-type", "list", "x"}, "no arguments"},
	} {
		var out, errb strings.Builder
		code := Main(append([]string{"relay", "--nats-url", "nats://127.0.0.1:1"}, tc.args...), strings.NewReader(""), &out, &errb)
		require.Equal(t, 2, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.want, tc.args)
	}
}
