package client

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The catalog through the client: a schema put refuses the events that do
// not satisfy it, naming the value at fault.
func TestEventTypes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	schema := json.RawMessage(`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`)
	got, created, err := e.admin.PutEventType(ctx, "order.created", EventTypeChange{Description: "An order.", Example: json.RawMessage(`{"id":"o-1"}`), Schema: schema})
	require.NoError(t, err)
	require.True(t, created)
	require.JSONEq(t, string(schema), string(got.Schema))
	one, err := e.read.EventType(ctx, "order.created")
	require.NoError(t, err)
	require.Equal(t, "An order.", one.Description)
	all, err := e.read.EventTypes(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)

	_, err = e.publish.Publish(ctx, NewEvent{Type: "order.created", Data: map[string]any{"id": 1}})
	var apiErr *Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "data/id", apiErr.Field)
	_, err = e.publish.Publish(ctx, NewEvent{Type: "order.created", Data: map[string]any{"id": "o-2"}})
	require.NoError(t, err)

	require.NoError(t, e.admin.DeleteEventType(ctx, "order.created"))
	_, err = e.read.EventType(ctx, "order.created")
	require.True(t, IsNotFound(err))
	require.True(t, IsNotFound(e.admin.DeleteEventType(ctx, "order.created")))
}
