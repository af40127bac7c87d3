package eventtype

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

const orderSchema = `{
  "type": "object",
  "required": ["id"],
  "properties": {
    "id": {"type": "string"},
    "items": {"type": "array", "items": {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}}}}
  }
}`

func TestCheckNamesTheValueAtFault(t *testing.T) {
	t.Parallel()
	s, err := Compile([]byte(orderSchema))
	require.NoError(t, err)
	require.NoError(t, s.Check([]byte(`{"id":"o-1","items":[{"qty":2}]}`)))
	for body, path := range map[string]string{
		`{"id":"o-1","items":[{"qty":2},{"qty":0}]}`: "/items/1/qty",
		`{"id":7}`:                       "/id",
		`{"items":[]}`:                   "",
		`[1,2]`:                          "",
		`{"id":"a/b","items":{"qty":1}}`: "/items",
	} {
		err := s.Check([]byte(body))
		var m *Mismatch
		require.True(t, errors.As(err, &m), "%s: %v", body, err)
		require.Equal(t, path, m.Path, "%s: %v", body, m)
		require.NotEmpty(t, m.Reason)
	}
	err = s.Check([]byte(`{"items":[]}`))
	require.Contains(t, err.Error(), "id", "the missing property is named")
	require.ErrorAs(t, s.Check([]byte(`{not json`)), new(*Mismatch))
}

// A schema is one document: a $ref to a file or a URL is refused, so
// compiling one reads neither the disk nor the network.
func TestCompileLoadsNothing(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{"file:///etc/passwd", "https://example.com/schema.json", "other.json", "#", "/etc/passwd"} {
		_, err := Compile([]byte(`{"$ref":"` + ref + `"}`))
		require.Error(t, err, ref)
	}
	_, err := Compile([]byte(`{"$defs":{"id":{"type":"string"}},"properties":{"id":{"$ref":"#/$defs/id"}}}`))
	require.NoError(t, err, "a reference within the document works")
	_, err = Compile([]byte(`{"type":"no-such-type"}`))
	require.Error(t, err)
	require.NotContains(t, err.Error(), schemaURL, "the error speaks of the schema, not of relay's name for it")
	_, err = Compile([]byte(`{`))
	require.ErrorContains(t, err, "not valid JSON")
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		t     EventType
		field string
	}{
		{EventType{Type: "Order Created"}, "type"},
		{EventType{Type: "order.created", Description: strings.Repeat("d", MaxDescriptionLen+1)}, "description"},
		{EventType{Type: "order.created", Example: json.RawMessage(`{`)}, "example"},
		{EventType{Type: "order.created", Schema: json.RawMessage(`{"type":1}`)}, "schema"},
		{EventType{Type: "order.created", Schema: json.RawMessage(orderSchema), Example: json.RawMessage(`{"id":1}`)}, "example"},
	} {
		var fe *FieldError
		require.True(t, errors.As(c.t.Validate(), &fe), "%+v", c.t)
		require.Equal(t, c.field, fe.Field, "%+v: %v", c.t, fe)
	}
	require.NoError(t, EventType{Type: "order.created", Schema: json.RawMessage(orderSchema), Example: json.RawMessage(`{"id":"o-1"}`)}.Validate())
}

func TestStore(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s, err := Open(ctx, srv.JS, func() time.Time { return now })
	require.NoError(t, err)

	got, created, err := s.Put(ctx, EventType{Type: "order.created", Description: "An order was placed.",
		Example: json.RawMessage("{\n  \"id\": \"o-1\"\n}"), Schema: json.RawMessage(orderSchema)})
	require.NoError(t, err)
	require.True(t, created)
	require.JSONEq(t, `{"id":"o-1"}`, string(got.Example))
	require.Equal(t, `{"id":"o-1"}`, string(got.Example), "kept compact")
	now = now.Add(time.Minute)
	got, created, err = s.Put(ctx, EventType{Type: "order.created", Description: "An order was placed by a customer."})
	require.NoError(t, err)
	require.False(t, created)
	require.Nil(t, got.Schema, "the update replaced the schema")
	require.Equal(t, now.Add(-time.Minute), got.CreatedAt)

	_, _, err = s.Put(ctx, EventType{Type: "invoice.paid"})
	require.NoError(t, err)
	all, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, "invoice.paid", all[0].Type)

	_, err = s.Delete(ctx, "invoice.paid")
	require.NoError(t, err)
	_, err = s.Get(ctx, "invoice.paid")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Delete(ctx, "invoice.paid")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Get(ctx, "Not A Type")
	require.ErrorIs(t, err, ErrNotFound)
}

// The catalog follows the bucket: a schema put is checked from its
// revision on, one removed no longer.
func TestCatalogFollowsTheBucket(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	_, _, err = s.Put(ctx, EventType{Type: "before.watch", Schema: json.RawMessage(`{"type":"object"}`)})
	require.NoError(t, err)
	c, err := WatchCatalog(ctx, srv.JS, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	require.Error(t, c.Check("before.watch", []byte(`[]`)), "loaded at start")

	require.NoError(t, c.Check("order.created", []byte(`{}`)), "not in the catalog: unchecked")
	put, _, err := s.Put(ctx, EventType{Type: "order.created", Schema: json.RawMessage(orderSchema)})
	require.NoError(t, err)
	require.NoError(t, c.WaitRev(ctx, put.Rev))
	var m *Mismatch
	require.ErrorAs(t, c.Check("order.created", []byte(`{}`)), &m)
	require.NoError(t, c.Check("order.created", []byte(`{"id":"o-1"}`)))

	rev, err := s.Delete(ctx, "order.created")
	require.NoError(t, err)
	require.NoError(t, c.WaitRev(ctx, rev))
	require.NoError(t, c.Check("order.created", []byte(`{}`)), "removed: unchecked again")

	var nilCatalog *Catalog
	require.NoError(t, nilCatalog.Check("order.created", []byte(`{}`)))
}
