package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
)

// A destination's filter decides before an attempt: an event it is true for
// is delivered, one it is false for (a missing field, a body that is not
// JSON) is acknowledged without an attempt and counted, and one it fails on
// is dead-lettered with reason filter_error and why.
func TestFilterDeliversDropsAndDeadLetters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "eu-big", URL: s.URL, Retry: fast(3),
		Filter: `data.amount > 100 && headers["X-Region"] == "eu"`})
	reg := prometheus.NewRegistry()
	rec, _ := e.startRelay(func(c *relay.Config) { c.Metrics = relay.NewMetrics(reg) })

	publish := func(body string, region string) string {
		t.Helper()
		res, err := e.prod.Publish(context.Background(), publish.Event{Dest: "eu-big", Data: []byte(body), Headers: map[string]string{"X-Region": region}})
		require.NoError(t, err)
		return res.ID
	}
	yes := publish(`{"amount":150}`, "eu")
	for _, no := range [][2]string{{`{"amount":50}`, "eu"}, {`{"amount":150}`, "us"}, {`{"other":1}`, "eu"}, {`not json`, "eu"}} {
		publish(no[0], no[1])
	}
	bad := publish(`{"amount":"lots"}`, "eu")

	eventually(t, 60*time.Second, func() bool { return rec.count(anyOutcome) == 6 && e.settled("eu-big") },
		"six outcomes and a settled consumer (have %d)", rec.count(anyOutcome))
	filtered := rec.count(func(o relay.Outcome) bool { return o.Decision.Action == relay.AckFiltered })
	require.Equal(t, 4, filtered)
	require.Equal(t, map[string]int{yes: 1}, s.delivered(), "the sink sees only the event the filter is true for")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP relay_filtered_total Events the destination's filter turned down, acknowledged without an attempt.
# TYPE relay_filtered_total counter
relay_filtered_total{dest="eu-big"} 4
`), "relay_filtered_total"))

	letters := e.deadLetters("eu-big")
	require.Len(t, letters, 1)
	require.Equal(t, bad, letters[0].EventID)
	require.Equal(t, relay.ReasonFilterError, letters[0].Reason)
	require.Contains(t, letters[0].Note, "invalid operation: string > int")
	require.Equal(t, 0, letters[0].Attempts, "no attempt was made")
}

func anyOutcome(relay.Outcome) bool { return true }

// A filter changed by 'relay dest update' applies to later deliveries of a
// running relay, and --filter ” removes it.
func TestFilterChangedByDestUpdateAppliesWithoutRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "live", URL: s.URL, Filter: `data.keep == true`})
	rec, _ := e.startRelay()

	n := 0
	// outcomeOf publishes body and waits for its outcome.
	outcomeOf := func(body string) relay.Action {
		t.Helper()
		n++
		res := e.publish("live", "", fmt.Sprintf(`{"n":%d,%s}`, n, body))
		return rec.first(t, func(o relay.Outcome) bool { return o.EventID == res.ID }, "the outcome of event %s", res.ID).Decision.Action
	}
	// untilDelivered publishes body until one is delivered: the relay
	// applies a change within moments, and every event before it is still
	// judged by the old filter.
	untilDelivered := func(body string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for outcomeOf(body) != relay.Ack {
			require.True(t, time.Now().Before(deadline), "no %s event delivered within 30s of the change", body)
		}
	}

	require.Equal(t, relay.AckFiltered, outcomeOf(`"keep":false`))
	require.Equal(t, relay.Ack, outcomeOf(`"keep":true`))

	code, out := e.relayCLI("dest", "update", "live", "--filter", "data.keep == false")
	require.Equal(t, 0, code, out)
	untilDelivered(`"keep":false`)
	require.Equal(t, relay.AckFiltered, outcomeOf(`"keep":true`), "the new filter holds")

	code, out = e.relayCLI("dest", "update", "live", "--filter", "")
	require.Equal(t, 0, code, out)
	untilDelivered(`"keep":true`)
	require.Equal(t, relay.Ack, outcomeOf(`"keep":false`), "without a filter every event is delivered")
	require.Equal(t, relay.Ack, outcomeOf(`"other":1`))
}

// On an ordered destination an event the filter turns down settles its
// key's head like a delivery: the key goes on, in order.
func TestFilterOnAnOrderedDestinationKeepsOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "ord", URL: s.URL, Ordered: true, Partitions: 1, Filter: `data.keep == true`})
	rec, _ := e.startRelay()
	var want []string
	for i := range 20 {
		res := e.publish("ord", "k", fmt.Sprintf(`{"n":%d,"keep":%v}`, i, i%3 != 1))
		if i%3 != 1 {
			want = append(want, res.ID)
		}
	}
	rec.wait(t, 20, anyOutcome, "20 outcomes")
	require.Equal(t, 20-len(want), rec.count(func(o relay.Outcome) bool { return o.Decision.Action == relay.AckFiltered }))
	var got []string
	for _, h := range s.all() {
		got = append(got, h.ID)
	}
	require.Equal(t, want, got, "the events kept, each once, in publish order")
	require.Empty(t, e.deadLetters("ord"))
}
