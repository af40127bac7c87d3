package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// TestEventsShowAndAttemptsFromTheCLI: 'relay events show' tells an event
// delivered, retrying, dead and filtered out, with its attempts, and
// 'relay attempts' finds the attempts by destination and status class.
func TestEventsShowAndAttemptsFromTheCLI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		switch {
		case strings.Contains(h.Body, "down"):
			w.WriteHeader(503)
			_, _ = w.Write([]byte("upstream down"))
			return 503
		case strings.Contains(h.Body, "refuse"):
			w.WriteHeader(422)
			return 422
		}
		w.Header().Set("X-Request-Id", "rcv-"+h.ID)
		_, _ = w.Write([]byte(`{"thanks":true}`))
		return 200
	})
	e.addDest(destination.Destination{Name: "shop", URL: s.URL, Retry: fast(3), Filter: `data.skip != true`})
	// A long first wait: the event stays in retry while the test looks.
	e.addDest(destination.Destination{Name: "slow", URL: s.URL, Retry: destination.RetryPolicy{Base: destination.Duration(time.Hour), NoJitter: true, MaxAttempts: 5}})
	rec, _ := e.startRelay()

	pub := func(dest, id, body string) {
		t.Helper()
		_, err := e.prod.Publish(context.Background(), publish.Event{Dest: dest, ID: id, Data: []byte(body)})
		require.NoError(t, err)
	}
	pub("shop", "evt-ok", `{"n":1}`)
	pub("shop", "evt-dead", `{"refuse":1}`)
	pub("shop", "evt-skip", `{"skip":true}`)
	pub("slow", "evt-retry", `{"down":1}`)
	rec.wait(t, 4, anyOutcome, "four outcomes")

	show := func(id string) map[string]any {
		t.Helper()
		var v map[string]any
		e.waitIndexed(id)
		code, out := e.relayCLI("events", "show", id, "--json")
		require.Equal(t, 0, code, out)
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		require.NotEmpty(t, v["destinations"], "event %s in the delivery log", id)
		return v
	}
	state := func(v map[string]any) (string, []any) {
		d := v["destinations"].([]any)[0].(map[string]any)
		return d["state"].(string), d["attempts"].([]any)
	}

	v := show("evt-ok")
	st, atts := state(v)
	require.Equal(t, "delivered", st)
	require.Equal(t, map[string]any{"n": float64(1)}, v["body"])
	a := atts[0].(map[string]any)
	require.Equal(t, float64(200), a["status"])
	require.Equal(t, `{"thanks":true}`, a["response_body"])
	require.Equal(t, "rcv-evt-ok", a["response_headers"].(map[string]any)["X-Request-Id"])

	st, atts = state(show("evt-dead"))
	require.Equal(t, "dead", st)
	require.Equal(t, relay.ReasonPermanentStatus, atts[0].(map[string]any)["reason"])

	st, atts = state(show("evt-skip"))
	require.Equal(t, "filtered_out", st)
	require.Equal(t, float64(0), atts[0].(map[string]any)["attempt"])

	st, atts = state(show("evt-retry"))
	require.Equal(t, "retrying", st)
	require.Equal(t, "upstream down", atts[0].(map[string]any)["response_body"])

	// The table form names the state and the answer.
	code, out := e.relayCLI("events", "show", "evt-retry")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "slow: retrying")
	require.Contains(t, out, "upstream down")

	code, out = e.relayCLI("attempts", "--dest", "shop", "--status", "4xx", "--json")
	require.Equal(t, 0, code, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1, out)
	require.Contains(t, lines[0], `"event_id":"evt-dead"`)
	code, out = e.relayCLI("attempts", "--since", "1h")
	require.Equal(t, 0, code, out)
	for _, id := range []string{"evt-ok", "evt-dead", "evt-skip", "evt-retry"} {
		require.Contains(t, out, id)
	}

	code, out = e.relayCLI("events", "show", "evt-nobody")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "no record of the event in the delivery log")
	code, out = e.relayCLI("attempts", "--status", "6xx")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "--status")
}

// TestDeliveryLogKeepsWithinItsSize: a delivery log capped at 1 MiB drops
// its oldest records to take new ones, and relay keeps delivering.
func TestDeliveryLogKeepsWithinItsSize(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, stream.Ensure(context.Background(), e.js, stream.Config{LogMaxBytes: 1 << 20}))
	big := strings.Repeat("r", 4000)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		_, _ = w.Write([]byte(big))
		return 200
	})
	e.addDest(destination.Destination{Name: "chatty", URL: s.URL})
	rec, _ := e.startRelay(func(c *relay.Config) { c.LogResponseBytes = 4000 })
	const n = 600 // about 4.3 KB a record: 2.5 MB in all
	var last string
	for i := range n {
		last = fmt.Sprintf("evt-big-%d", i)
		_, err := e.prod.Publish(context.Background(), publish.Event{Dest: "chatty", ID: last, Data: []byte(`{}`)})
		require.NoError(t, err)
	}
	rec.wait(t, n, anyOutcome, "%d delivered", n)
	// The newest record is written: the one of the last event.
	e.waitIndexed(last)
	page, err := deliverylog.ReadAttempts(context.Background(), e.js, deliverylog.AttemptQuery{Limit: 1, EventID: last})
	require.NoError(t, err)
	require.Len(t, page.Attempts, 1, "the last event's record written")
	ls, err := e.js.Stream(context.Background(), stream.LogStream)
	require.NoError(t, err)
	info, err := ls.Info(context.Background())
	require.NoError(t, err)
	require.LessOrEqual(t, info.State.Bytes, uint64(1<<20), "within its cap")
	require.Greater(t, info.State.FirstSeq, uint64(1), "the oldest records went")
	page, err = deliverylog.ReadAttempts(context.Background(), e.js, deliverylog.AttemptQuery{Dest: "chatty", Limit: 1000})
	require.NoError(t, err)
	require.Less(t, len(page.Attempts), n, "not every record is kept")
	for i := 1; i < len(page.Attempts); i++ {
		require.Less(t, page.Attempts[i].Seq, page.Attempts[i-1].Seq, "newest first")
	}
	// The newest records are kept (deliveries run 16 at a time, so the
	// last event published is among the last recorded, not always last).
	var newest []string
	for _, a := range page.Attempts[:min(32, len(page.Attempts))] {
		newest = append(newest, a.EventID)
	}
	require.Contains(t, newest, last)
}
