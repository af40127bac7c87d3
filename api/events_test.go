package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
)

// send is do with a JSON body.
func (e *apiEnv) send(method, path, key, body string) (int, map[string]any) {
	e.t.Helper()
	return e.do(method, path, key, "application/json", []byte(body))
}

// lastSeq is the events stream's last sequence.
func (e *apiEnv) lastSeq() uint64 {
	e.t.Helper()
	s, err := e.srv.JS.Stream(context.Background(), stream.EventsStream)
	require.NoError(e.t, err)
	info, err := s.Info(context.Background())
	require.NoError(e.t, err)
	return info.State.LastSeq
}

func TestPublishBatchOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	_, err := mustStore(t, e).Add(ctx, destFor("orders"))
	require.NoError(t, err)

	code, m := e.send("POST", "/v1/events:batch", e.publish, `{"events":[
		{"dest":"orders","key":"c1","id":"e-1","data":{"n":1}},
		{"type":"order.created","key":"c1","data":{"n":2}},
		{"dest":"orders","key":"c1","id":"e-3","headers":{"X-Tenant":"t1"},"data":{"n":3}},
		{"dest":"orders","key":"c1","id":"e-1","data":{"n":1}}]}`)
	require.Equal(t, http.StatusAccepted, code, m)
	require.Equal(t, float64(4), m["stored"])
	require.Equal(t, float64(0), m["failed"])
	res := m["results"].([]any)
	require.Len(t, res, 4, "one result per event, in order")
	var seqs []uint64
	for i, r := range res {
		r := r.(map[string]any)
		require.NotEmpty(t, r["id"], i)
		require.Nil(t, r["error"], i)
		seqs = append(seqs, uint64(r["seq"].(float64)))
	}
	require.Equal(t, "e-1", res[0].(map[string]any)["id"])
	require.True(t, strings.HasPrefix(res[1].(map[string]any)["id"].(string), "evt_"), "an id is generated")
	require.Equal(t, false, res[2].(map[string]any)["duplicate"])
	require.Equal(t, true, res[3].(map[string]any)["duplicate"], "e-1 again: nothing new stored")
	require.Equal(t, seqs[0], seqs[3])
	require.Less(t, seqs[0], seqs[1], "stored in the batch's order")
	require.Less(t, seqs[1], seqs[2])

	s, err := e.srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	raw, err := s.GetMsg(ctx, seqs[2])
	require.NoError(t, err)
	require.JSONEq(t, `{"n":3}`, string(raw.Data))
	require.Equal(t, "t1", raw.Header.Get("X-Tenant"))

	// Admin may publish too.
	code, m = e.send("POST", "/v1/events:batch", e.admin, `{"events":[{"dest":"orders","data":1}]}`)
	require.Equal(t, http.StatusAccepted, code, m)
}

func TestPublishBatchRefusesBadRequestsWhole(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	_, err := mustStore(t, e).Add(context.Background(), destFor("orders"))
	require.NoError(t, err)
	ok := `{"dest":"orders","data":1}`
	batch := func(evs ...string) string { return `{"events":[` + strings.Join(evs, ",") + `]}` }
	many := make([]string, MaxBatch+1)
	for i := range many {
		many[i] = ok
	}
	big := batch(`{"dest":"orders","data":"` + strings.Repeat("x", 60<<10) + `"}`)
	before := e.lastSeq()
	for _, tc := range []struct {
		name, key, ct, body string
		status              int
		field, detail       string
	}{
		{"no key", "", "application/json", batch(ok), 401, "", "an API key is required"},
		{"read key", e.read, "application/json", batch(ok), 403, "", "this needs publish or admin"},
		{"not JSON", e.publish, "text/plain", batch(ok), 415, "", "application/json"},
		{"unknown field", e.publish, "application/json", `{"events":[],"more":1}`, 400, "more", "unknown field"},
		{"events not a list", e.publish, "application/json", `{"events":{}}`, 400, "events", "events must be an array, not a JSON object"},
		{"dest not a string", e.publish, "application/json", batch(ok, `{"dest":5,"data":1}`), 400, "events.dest", "events.dest must be a string, not a JSON number"},
		{"stray bracket", e.publish, "application/json", batch(ok) + `]`, 400, "", "more after its JSON value"},
		{"no events", e.publish, "application/json", `{"events":[]}`, 422, "events", "give 1 to 1000 events; got 0"},
		{"no events at all", e.publish, "application/json", `{}`, 422, "events", "got 0"},
		{"too many", e.publish, "application/json", batch(many...), 422, "events", "got 1001"},
		{"one without data", e.publish, "application/json", batch(ok, ok, `{"dest":"orders"}`), 422, "events[2].data", "event 2: data is required"},
		{"one with both", e.publish, "application/json", batch(ok, `{"dest":"orders","type":"a.b","data":1}`), 422, "events[1].type", "not both"},
		{"bad header", e.publish, "application/json", batch(`{"dest":"orders","headers":{"Host":"x"},"data":1}`), 422, "events[0].headers", "set by relay"},
		{"key with a newline", e.publish, "application/json", batch(`{"dest":"orders","key":"c\r\n42","data":1}`), 422, "events[0].key", "control character"},
		{"key too long", e.publish, "application/json", batch(`{"dest":"orders","key":"` + strings.Repeat("k", publish.MaxKeyLen+1) + `","data":1}`), 422, "events[0].key", "the order key is 257 bytes; at most 256"},
		{"id dot", e.publish, "application/json", batch(`{"dest":"orders","id":".","data":1}`), 422, "events[0].id", `"." and ".." cannot be`},
		{"id dot dot", e.publish, "application/json", batch(ok, `{"dest":"orders","id":"..","data":1}`), 422, "events[1].id", `"." and ".." cannot be`},
		{"type like relay's", e.publish, "application/json", batch(`{"type":"Relay.destination.disabled","data":1}`), 422, "events[0].type", "relay's own, in any case"},
		{"unknown dest", e.publish, "application/json", batch(ok, ok, ok, `{"dest":"nobody","data":1}`), 404, "events[3].dest", "unknown destination"},
		{"one too large", e.publish, "application/json", batch(ok, `{"dest":"orders","data":"`+strings.Repeat("x", 300<<10)+`"}`), 413, "", "larger than 262144 bytes"},
		{"big one", e.publish, "application/json", big, 202, "", ""},
	} {
		code, m := e.do("POST", "/v1/events:batch", tc.key, tc.ct, []byte(tc.body))
		require.Equal(t, tc.status, code, "%s: %v", tc.name, m)
		if code == 202 {
			continue
		}
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], tc.name)
		} else {
			require.NotContains(t, m, "field", tc.name)
		}
		require.Contains(t, m["detail"], tc.detail, tc.name)
	}
	require.Equal(t, before+1, e.lastSeq(), "a refused batch stores nothing, not even its good events")
}

// destFor is a destination for the tests, named name.
func destFor(name string) destination.Destination {
	return destination.Destination{Name: name, URL: fmt.Sprintf("https://%s.example.com/hooks", name)}
}

// TestPublishContinuesTheRequestsTrace: a request's traceparent is
// continued by the publish span of each event it publishes, alone or in
// a batch, and each stored event carries its publish's context.
func TestPublishContinuesTheRequestsTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	e := startTracedAPI(t, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	ctx := context.Background()
	_, err := mustStore(t, e).Add(ctx, destFor("orders"))
	require.NoError(t, err)
	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	code, m := e.do("POST", "/v1/events", e.publish, "application/json", []byte(`{"dest":"orders","data":{}}`), "Traceparent", incoming, "Tracestate", "vendor=1")
	require.Equal(t, http.StatusAccepted, code, m)
	seqs := []uint64{uint64(m["seq"].(float64))}
	code, m = e.do("POST", "/v1/events:batch", e.publish, "application/json", []byte(`{"events":[{"dest":"orders","data":1},{"type":"order.created","data":2}]}`), "Traceparent", incoming)
	require.Equal(t, http.StatusAccepted, code, m)
	for _, r := range m["results"].([]any) {
		seqs = append(seqs, uint64(r.(map[string]any)["seq"].(float64)))
	}

	got := rec.Ended()
	require.Len(t, got, 3, "a publish span per event")
	s, err := e.srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	for i, sp := range got {
		require.Equal(t, spans.Publish, sp.Name())
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sp.SpanContext().TraceID().String(), "span %d continues the request's trace", i)
		require.Equal(t, "00f067aa0ba902b7", sp.Parent().SpanID().String())
		raw, err := s.GetMsg(ctx, seqs[i])
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("00-%s-%s-01", sp.SpanContext().TraceID(), sp.SpanContext().SpanID()), raw.Header.Get(stream.HdrTraceParent), "event %d carries its publish's context", i)
	}
	require.Equal(t, "vendor=1", got[0].SpanContext().TraceState().String())
}

// An Idempotency-Key is scoped to the API key that sends it and to the
// event's destination or type: another key sending the same one stores an
// event of its own (and learns nothing of the first), as does the same key
// for another destination; the same key and destination with another body
// is answered 409, and with the same body is a duplicate of its own event.
func TestIdempotencyKeyIsScopedToTheAPIKeyAndTarget(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	for _, name := range []string{"orders", "billing"} {
		_, err := mustStore(t, e).Add(ctx, destFor(name))
		require.NoError(t, err)
	}
	keys, err := OpenKeys(ctx, e.srv.JS)
	require.NoError(t, err)
	other, _, err := keys.Create(ctx, "pub2", ScopePublish)
	require.NoError(t, err)
	publish := func(key, body string) (int, map[string]any) {
		return e.do("POST", "/v1/events", key, "application/json", []byte(body), "Idempotency-Key", "order-1")
	}

	code, first := publish(e.publish, `{"dest":"orders","data":{"n":1}}`)
	require.Equal(t, http.StatusAccepted, code, first)
	require.Equal(t, false, first["duplicate"])
	seqs := map[float64]bool{first["seq"].(float64): true}
	for _, tc := range []struct{ key, body, what string }{
		{other, `{"dest":"orders","data":{"n":2}}`, "another key, same destination"},
		{e.publish, `{"dest":"billing","data":{"n":1}}`, "same key, another destination"},
		{e.publish, `{"type":"order.created","data":{"n":1}}`, "same key, a type"},
	} {
		code, m := publish(tc.key, tc.body)
		require.Equal(t, http.StatusAccepted, code, "%s: %v", tc.what, m)
		require.Equal(t, false, m["duplicate"], tc.what)
		require.Equal(t, "order-1", m["id"], tc.what)
		require.False(t, seqs[m["seq"].(float64)], "%s: stored as an event of its own, not answered another's sequence", tc.what)
		seqs[m["seq"].(float64)] = true
	}

	code, m := publish(e.publish, `{"dest":"orders","data":{"n":1}}`)
	require.Equal(t, http.StatusAccepted, code, m)
	require.Equal(t, true, m["duplicate"])
	require.Equal(t, first["seq"], m["seq"], "a duplicate of the key's own event")

	before := e.lastSeq()
	code, m = publish(e.publish, `{"dest":"orders","data":{"n":99}}`)
	require.Equal(t, http.StatusConflict, code, m)
	require.Equal(t, "id", m["field"])
	require.Contains(t, m["detail"], `id "order-1" was published within the duplicate window with another body`)
	code, m = e.send("POST", "/v1/events:batch", e.publish, `{"events":[{"dest":"orders","id":"order-1","data":{"n":99}},{"dest":"orders","id":"order-2","data":1}]}`)
	require.Equal(t, http.StatusAccepted, code, m)
	res := m["results"].([]any)
	require.Equal(t, float64(409), res[0].(map[string]any)["error"].(map[string]any)["status"], m)
	require.Nil(t, res[1].(map[string]any)["error"], m)
	require.Equal(t, float64(1), m["stored"])
	require.Equal(t, before+1, e.lastSeq(), "a conflict stores nothing")
}
