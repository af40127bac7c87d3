package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// watchCircuit counts the times dest's circuit opened, from the
// destinations bucket, until the test ends.
func (e *env) watchCircuit(dest string) *atomic.Int64 {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	kv, err := e.js.KeyValue(ctx, stream.DestBucket)
	require.NoError(e.t, err)
	w, err := kv.Watch(ctx, dest, jetstream.UpdatesOnly())
	require.NoError(e.t, err)
	var opened atomic.Int64
	go func() {
		for en := range w.Updates() {
			if en == nil || en.Operation() != jetstream.KeyValuePut {
				continue
			}
			var d destination.Destination
			if json.Unmarshal(en.Value(), &d) == nil && d.PauseReason == destination.PauseCircuitOpen {
				opened.Add(1)
			}
		}
	}()
	return &opened
}

// TestInvalidEventsAreDeadLetteredWithoutOpeningTheCircuit: a producer with
// a plain NATS client can store headers Go's HTTP client refuses to send.
// Such events were retried as network failures of the destination, opened
// its circuit, and held up the valid events behind them.
func TestInvalidEventsAreDeadLetteredWithoutOpeningTheCircuit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "poison", URL: s.URL, BreakerThreshold: 3})
	opened := e.watchCircuit("poison")
	ctx := context.Background()
	pub := func(id string, hdr map[string]string) {
		t.Helper()
		m := nats.NewMsg(stream.InSubject("poison", ""))
		m.Data = []byte(`{}`)
		m.Header.Set(stream.HdrMsgID, id)
		for k, v := range hdr {
			m.Header[k] = []string{v}
		}
		_, err := e.js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	const n = 21
	for i := range n {
		pub(fmt.Sprintf("poison-%d", i), map[string]string{"Content-Type": "application/json\x01"})
	}
	pub("poison-x", map[string]string{"X-Trace": "a\x01b"})
	pub("poison\x01id", nil)
	valid := e.publish("poison", "", `{"ok":true}`)

	rec, _ := e.startRelay()
	eventually(t, 30*time.Second, func() bool {
		return len(s.delivered()) == 1 && len(e.deadLetters("poison")) == n+2 && e.settled("poison")
	}, "the valid event delivered and every invalid one dead-lettered")

	require.Equal(t, map[string]int{valid.ID: 1}, s.delivered())
	require.Equal(t, 1, s.received(), "no request was made for an invalid event")
	want := map[string]string{"poison-x": "X-Trace", "poison\x01id": "webhook-id"}
	for i := range n {
		want[fmt.Sprintf("poison-%d", i)] = "Content-Type"
	}
	for _, l := range e.deadLetters("poison") {
		header, ok := want[l.EventID]
		require.True(t, ok, "unexpected dead letter %q", l.EventID)
		delete(want, l.EventID)
		require.Equal(t, relay.ReasonInvalidEvent, l.Reason, l.EventID)
		require.Contains(t, l.Note, `header "`+header+`"`, "the note names the header")
		require.Zero(t, l.Attempts, "no attempt was made")
		require.Empty(t, l.History)
	}
	require.Empty(t, want)
	require.Zero(t, rec.count(func(o relay.Outcome) bool { return o.Decision.Action == relay.Retry }), "nothing was retried")
	require.Zero(t, opened.Load(), "the circuit never opened")
	d, err := e.store.Get(ctx, "poison")
	require.NoError(t, err)
	require.Empty(t, d.PauseReason)
	require.Zero(t, d.BreakerTrips)
}

// TestFailedProbesUseUpAttempts: a probe of an open circuit is an attempt of
// its event. Uncounted, an event that always fails was probed for ever and
// never dead-lettered, and kept the circuit open.
func TestFailedProbesUseUpAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusInternalServerError)
		return http.StatusInternalServerError
	})
	// Every failure opens the circuit: attempts 2 and 3 are probes.
	e.addDest(destination.Destination{Name: "probed", URL: s.URL, BreakerThreshold: 1, BreakerPause: destination.Duration(time.Second),
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(time.Second), MaxAttempts: 3}})
	opened := e.watchCircuit("probed")
	ev := e.publish("probed", "", `{}`)
	rec, _ := e.startRelay()
	eventually(t, 60*time.Second, func() bool { return len(e.deadLetters("probed")) == 1 && e.settled("probed") },
		"the event dead-lettered after its attempts, probes included")

	l := e.deadLetters("probed")[0]
	require.Equal(t, ev.ID, l.EventID)
	require.Equal(t, relay.ReasonMaxAttempts, l.Reason)
	require.Equal(t, 3, l.Attempts)
	require.Len(t, l.History, 3)
	require.Equal(t, 3, s.received(), "three requests, two of them probes")
	require.GreaterOrEqual(t, opened.Load(), int64(2), "the circuit opened after the first attempt and again after the first probe")
	var attempts []int
	rec.mu.Lock()
	for _, o := range rec.all {
		attempts = append(attempts, o.Attempt)
	}
	rec.mu.Unlock()
	require.Equal(t, []int{1, 2, 3}, attempts)
}
