package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/relay"
)

func TestKeyAnswersItsNameAndScope(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	for key, want := range map[string][2]string{e.publish: {"pub", "publish"}, e.read: {"reader", "read"}, e.admin: {"ops", "admin"}} {
		code, m := e.do("GET", "/v1/key", key, "", nil)
		require.Equal(t, 200, code, m)
		require.Equal(t, want[0], m["name"])
		require.Equal(t, want[1], m["scope"])
		require.NotContains(t, m, "hash")
	}
	code, _ := e.do("GET", "/v1/key", "", "", nil)
	require.Equal(t, 401, code)
}

// TestRetryingEventsListedAndSkipped: an event waiting for a retry is
// listed, skipped over the API, and dead-lettered (reason skipped) at its
// next delivery without another attempt.
func TestRetryingEventsListedAndSkipped(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	t.Cleanup(sink.Close)
	st := mustStore(t, e)
	ctx := context.Background()
	// The retry comes after 2s: long enough to list and skip it first.
	_, err := st.Add(ctx, destination.Destination{Name: "down", URL: sink.URL, Retry: destination.RetryPolicy{Base: destination.Duration(2 * time.Second), NoJitter: true, MaxAttempts: 10}})
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "keyed", URL: sink.URL, Ordered: true})
	require.NoError(t, err)
	runRelay(t, e)
	code, m := e.do("POST", "/v1/events", e.publish, "application/json", []byte(`{"dest":"down","data":1}`), "Idempotency-Key", "evt-stuck")
	require.Equal(t, 202, code, m)

	var evs []any
	deadline := time.Now().Add(30 * time.Second)
	for len(evs) == 0 {
		require.False(t, time.Now().After(deadline), "the event never showed in retry")
		code, m = e.do("GET", "/v1/destinations/down/retrying", e.read, "", nil)
		require.Equal(t, 200, code, m)
		evs = m["events"].([]any)
		time.Sleep(20 * time.Millisecond)
	}
	ev := evs[0].(map[string]any)
	require.Equal(t, "evt-stuck", ev["event_id"])
	require.Equal(t, float64(1), ev["attempts"])

	code, m = e.do("POST", "/v1/destinations/down/retrying/evt-stuck/skip", e.read, "application/json", []byte(`{}`))
	require.Equal(t, 403, code, "a read key cannot skip: %v", m)
	// The reason is one line of at most 200 characters (not bytes).
	for _, tc := range []struct{ reason, detail string }{
		{`two\nlines`, "one line of text: character 4 is a control character (U+000A)"},
		{`\u001b[2Jcleared`, "control character (U+001B)"},
		{strings.Repeat("é", 201), "a skip reason of 201 characters: give at most 200"},
	} {
		code, m = e.do("POST", "/v1/destinations/down/retrying/evt-stuck/skip", e.admin, "application/json", []byte(`{"reason":"`+tc.reason+`"}`))
		require.Equal(t, 422, code, "%q: %v", tc.reason, m)
		require.Equal(t, "reason", m["field"])
		require.Contains(t, m["detail"], tc.detail)
	}
	why := strings.Repeat("é", 200) // 400 bytes
	code, m = e.do("POST", "/v1/destinations/down/retrying/evt-stuck/skip", e.admin, "application/json", []byte(`{"reason":"  `+why+` "}`))
	require.Equal(t, 200, code, m)
	require.Equal(t, why, m["skip"], "trimmed")

	// At its next delivery it is dead-lettered, reason skipped, with no
	// second attempt.
	var letters []any
	deadline = time.Now().Add(30 * time.Second)
	for len(letters) == 0 {
		require.False(t, time.Now().After(deadline), "the skipped event was never dead-lettered")
		code, m = e.do("GET", "/v1/dead-letters?dest=down", e.read, "", nil)
		require.Equal(t, 200, code, m)
		letters = m["dead_letters"].([]any)
		time.Sleep(20 * time.Millisecond)
	}
	l := letters[0].(map[string]any)
	require.Equal(t, relay.ReasonSkipped, l["reason"])
	require.Equal(t, float64(1), l["attempts"])

	for _, tc := range []struct {
		method, path, key string
		status            int
		field             string
	}{
		{"GET", "/v1/destinations/nobody/retrying", e.read, 404, ""},
		{"GET", "/v1/destinations/down/retrying?limit=0", e.read, 400, "limit"},
		{"GET", "/v1/destinations/down/retrying?x=1", e.read, 400, "x"},
		{"GET", "/v1/destinations/down/retrying", e.publish, 403, ""},
		{"POST", "/v1/destinations/down/retrying/evt-none/skip", e.admin, 404, "id"},
		{"POST", "/v1/destinations/keyed/retrying/evt-stuck/skip", e.admin, 409, ""},
		{"POST", "/v1/destinations/nobody/retrying/evt-stuck/skip", e.admin, 404, ""},
	} {
		code, m := e.do(tc.method, tc.path, tc.key, "", nil)
		require.Equal(t, tc.status, code, "%s %s: %v", tc.method, tc.path, m)
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], tc.path)
		}
	}
	code, m = e.do("POST", "/v1/destinations/down/retrying/evt-stuck/skip", e.admin, "application/json", []byte(`{"reason":"`+strings.Repeat("x", 201)+`"}`))
	require.Equal(t, 422, code, m)
	require.Equal(t, "reason", m["field"])
	code, m = e.do("POST", "/v1/destinations/down/retrying/evt-stuck/skip", e.admin, "application/json", []byte(`{"why":"x"}`))
	require.Equal(t, 400, code, m)
}
