package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/relay"
)

// runRelay runs a relay over e's server, delivering to loopback, until the
// test ends.
func runRelay(t *testing.T, e *apiEnv) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, err := relay.New(ctx, relay.Config{JS: e.srv.JS, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Policies: e.policies,
		HTTPClient: egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// waitAttempts waits until GET /v1/attempts?query answers n records.
func (e *apiEnv) waitAttempts(query string, n int) []any {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, m := e.do("GET", "/v1/attempts?"+query, e.read, "", nil)
		require.Equal(e.t, 200, code, m)
		got := m["attempts"].([]any)
		if len(got) >= n {
			require.Len(e.t, got, n, query)
			return got
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("GET /v1/attempts?%s: %d records, want %d", query, len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeliveryLogOverHTTP: events published over HTTP and delivered, one
// after a 503, are found in the delivery log by each filter, page by page,
// and by their id with each destination's state.
func TestDeliveryLogOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	var flakyCalls atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flaky" && flakyCalls.Add(1) == 1 {
			w.WriteHeader(503)
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(sink.Close)
	st := mustStore(t, e)
	ctx := context.Background()
	retry := destination.RetryPolicy{Base: destination.Duration(20 * time.Millisecond), Max: destination.Duration(50 * time.Millisecond)}
	_, err := st.Add(ctx, destination.Destination{Name: "flaky", URL: sink.URL + "/flaky", Retry: retry})
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "calm", URL: sink.URL + "/calm", Types: []string{"order.created"}})
	require.NoError(t, err)
	runRelay(t, e)

	since := time.Now().UTC().Format(time.RFC3339Nano)
	code, m := e.do("POST", "/v1/events", e.publish, "application/json", []byte(`{"dest":"flaky","data":{"n":1}}`), "Idempotency-Key", "evt-flaky")
	require.Equal(t, 202, code, m)
	code, m = e.do("POST", "/v1/events", e.publish, "application/json", []byte(`{"type":"order.created","key":"c1","headers":{"Authorization":"Bearer s3cret","X-Tenant":"t1"},"data":{"n":2}}`), "Idempotency-Key", "evt-typed")
	require.Equal(t, 202, code, m)

	flaky := e.waitAttempts("dest=flaky", 2)
	last := flaky[0].(map[string]any)
	require.Equal(t, "delivered", last["outcome"])
	require.Equal(t, float64(2), last["attempt"])
	require.Equal(t, `{"ok":true}`, last["response_body"])
	first := flaky[1].(map[string]any)
	require.Equal(t, float64(503), first["status"])
	require.Equal(t, "retry", first["outcome"])

	e.waitAttempts("status=5xx", 1)
	e.waitAttempts("status=503", 1)
	e.waitAttempts("status=2xx", 2)
	e.waitAttempts("event=evt-typed", 1)
	e.waitAttempts("since="+url.QueryEscape(since), 3)
	e.waitAttempts("until="+url.QueryEscape(since), 0)

	// Pages of one: each record once, then no cursor.
	var seqs []float64
	query := "limit=1"
	for {
		code, m := e.do("GET", "/v1/attempts?"+query, e.admin, "", nil)
		require.Equal(t, 200, code, m)
		for _, a := range m["attempts"].([]any) {
			seqs = append(seqs, a.(map[string]any)["seq"].(float64))
		}
		next, ok := m["next"].(string)
		if !ok {
			break
		}
		query = "limit=1&cursor=" + next
	}
	require.Len(t, seqs, 3)
	require.Greater(t, seqs[0], seqs[1])
	require.Greater(t, seqs[1], seqs[2])

	code, m = e.do("GET", "/v1/events/evt-typed", e.read, "", nil)
	require.Equal(t, 200, code, m)
	require.Equal(t, "order.created", m["type"])
	require.Equal(t, "c1", m["key"])
	require.Equal(t, map[string]any{"n": float64(2)}, m["body"])
	require.Equal(t, []any{"calm"}, m["routed_to"])
	require.Equal(t, map[string]any{"Authorization": []any{"xxxxx"}, "X-Tenant": []any{"t1"}}, m["headers"], "a credential is not shown")
	dests := m["destinations"].([]any)
	require.Len(t, dests, 1)
	require.Equal(t, "delivered", dests[0].(map[string]any)["state"])

	code, m = e.do("GET", "/v1/events/evt-flaky", e.read, "", nil)
	require.Equal(t, 200, code, m)
	require.Len(t, m["destinations"].([]any)[0].(map[string]any)["attempts"], 2)
}

func TestDeliveryLogOverHTTPRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	for _, tc := range []struct {
		path, key string
		status    int
		field     string
	}{
		{"/v1/attempts", "", 401, ""},
		{"/v1/attempts", e.publish, 403, ""},
		{"/v1/attempts?status=6xx", e.read, 400, "status"},
		{"/v1/attempts?status=abc", e.read, 400, "status"},
		{"/v1/attempts?dest=Bad!", e.read, 400, "dest"},
		{"/v1/attempts?limit=0", e.read, 400, "limit"},
		{"/v1/attempts?limit=1001", e.read, 400, "limit"},
		{"/v1/attempts?limit=x", e.read, 400, "limit"},
		{"/v1/attempts?cursor=x", e.read, 400, "cursor"},
		{"/v1/attempts?since=yesterday", e.read, 400, "since"},
		{"/v1/attempts?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", e.read, 400, "until"},
		{"/v1/attempts?destination=x", e.read, 400, "destination"},
		{"/v1/attempts?dest=a&dest=b", e.read, 400, "dest"},
		{"/v1/events/nobody", e.read, 404, "id"},
		{"/v1/events/nobody", e.publish, 403, ""},
	} {
		code, m := e.do("GET", tc.path, tc.key, "", nil)
		require.Equal(t, tc.status, code, "%s: %v", tc.path, m)
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], tc.path)
		}
	}
	code, m := e.do("GET", "/v1/attempts", e.read, "", nil)
	require.Equal(t, 200, code, m)
	require.Empty(t, m["attempts"], "an empty log answers an empty list")
	code, _ = e.do("POST", "/v1/attempts", e.admin, "", nil)
	require.Equal(t, 405, code)
}
