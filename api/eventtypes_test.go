package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const orderSchema = `{"type":"object","required":["id"],"properties":{"id":{"type":"string"},"items":{"type":"array","items":{"type":"object","properties":{"qty":{"type":"integer","minimum":1}}}}}}`

// The catalog over HTTP: a type put with a schema makes typed events that
// do not satisfy it refused with 422 naming the value at fault, in a
// single publish and in a batch; removed, they are accepted again.
func TestEventTypesOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	code, got := e.do(http.MethodPut, "/v1/event-types/order.created", e.admin, "application/json",
		[]byte(`{"description":"An order was placed.","example":{"id":"o-1","items":[{"qty":2}]},"schema":`+orderSchema+`}`))
	require.Equal(t, http.StatusCreated, code, "%v", got)
	require.Equal(t, "order.created", got["type"])
	require.Equal(t, map[string]any{"id": "o-1", "items": []any{map[string]any{"qty": float64(2)}}}, got["example"])

	code, got = e.do(http.MethodGet, "/v1/event-types", e.read, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, got["event_types"], 1)
	code, got = e.do(http.MethodGet, "/v1/event-types/order.created", e.read, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.NotNil(t, got["schema"])

	pub := func(body string) (int, map[string]any) {
		return e.do(http.MethodPost, "/v1/events", e.publish, "application/json", []byte(body))
	}
	code, got = pub(`{"type":"order.created","data":{"id":"o-1","items":[{"qty":1}]}}`)
	require.Equal(t, http.StatusAccepted, code, "%v", got)
	code, got = pub(`{"type":"order.created","data":{"id":"o-2","items":[{"qty":1},{"qty":0}]}}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, "%v", got)
	require.Equal(t, "data/items/1/qty", got["field"])
	require.Contains(t, got["detail"], "order.created")
	code, got = pub(`{"type":"order.created","data":{"items":[]}}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, "%v", got)
	require.Equal(t, "data", got["field"])
	code, got = pub(`{"type":"invoice.paid","data":{"anything":true}}`)
	require.Equal(t, http.StatusAccepted, code, "a type not in the catalog is not checked: %v", got)

	code, got = e.do(http.MethodPost, "/v1/events:batch", e.publish, "application/json",
		[]byte(`{"events":[{"type":"order.created","data":{"id":"o-3"}},{"type":"order.created","data":{"id":3}}]}`))
	require.Equal(t, http.StatusUnprocessableEntity, code, "%v", got)
	require.Equal(t, "events[1].data/id", got["field"])

	for _, c := range []struct{ typ, body, field string }{
		{"Order Created", `{}`, "type"},
		{"order.created", `{"schema":{"type":"nope"}}`, "schema"},
		{"order.created", `{"schema":{"$ref":"file:///etc/passwd"}}`, "schema"},
		{"order.created", `{"example":{"id":1},"schema":` + orderSchema + `}`, "example"},
	} {
		code, got := e.do(http.MethodPut, "/v1/event-types/"+c.typ, e.admin, "application/json", []byte(c.body))
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s %s: %v", c.typ, c.body, got)
		require.Equal(t, c.field, got["field"], "%s %s", c.typ, c.body)
	}
	code, _ = e.do(http.MethodPut, "/v1/event-types/order.created", e.read, "application/json", []byte(`{}`))
	require.Equal(t, http.StatusForbidden, code)

	code, _ = e.do(http.MethodDelete, "/v1/event-types/order.created", e.admin, "", nil)
	require.Equal(t, http.StatusNoContent, code)
	code, got = pub(`{"type":"order.created","data":{"items":[]}}`)
	require.Equal(t, http.StatusAccepted, code, "removed: not checked any more: %v", got)
	code, _ = e.do(http.MethodGet, "/v1/event-types/order.created", e.read, "", nil)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = e.do(http.MethodDelete, "/v1/event-types/order.created", e.admin, "", nil)
	require.Equal(t, http.StatusNotFound, code)
}
