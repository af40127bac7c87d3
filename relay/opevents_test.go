package relay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// opHits waits until the sink's destination dest has n requests of
// operator events of type typ, and returns them.
func (f *logFixture) opHits(dest, typ string, n int) []sinkHit {
	f.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		f.mu.Lock()
		var got []sinkHit
		for _, h := range f.hits[dest] {
			if h.Type == typ {
				got = append(got, h)
			}
		}
		f.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: %d %s events, want %d", dest, len(got), typ, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storedOpEvents are the operator events stored in the events stream, by
// type, each with its body.
func storedOpEvents(t *testing.T, js jetstream.JetStream) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	err := stream.Read(context.Background(), js, stream.EventsStream, stream.ReadOptions{Filters: []string{stream.TypeSubject(opevent.Prefix + ">")}},
		func(m *jetstream.RawStreamMsg) error {
			typ, _ := stream.TypeOf(m.Subject)
			var body map[string]any
			require.NoError(t, json.Unmarshal(m.Data, &body))
			body["_id"] = m.Header.Get(stream.HdrMsgID)
			out[typ] = append(out[typ], body)
			return nil
		})
	require.NoError(t, err)
	return out
}

// TestOperatorEventsAreDelivered: a breaker opening, a 410 and many dead
// letters of a destination reach an operations destination subscribed to
// relay.>, each once, with a stable id and the documented fields.
func TestOperatorEventsAreDelivered(t *testing.T) {
	f := startLogFixture(t, Config{AlertDeadLetters: 2, alertWindow: time.Second})
	f.answer = func(dest string, n int) (int, string) {
		switch dest {
		case "orders":
			return 503, "down"
		case "gone":
			return 410, "gone"
		}
		return 200, ""
	}
	f.addDest(destination.Destination{Name: "ops", Types: []string{"relay.>"}})
	f.addDest(destination.Destination{Name: "orders", BreakerThreshold: 2, BreakerPause: destination.Duration(time.Hour)})
	f.addDest(destination.Destination{Name: "gone"})
	for range 3 {
		_, err := f.prod.Publish(context.Background(), publish.Event{Dest: "orders", Data: []byte(`{}`)})
		require.NoError(t, err)
	}
	_, err := f.prod.Publish(context.Background(), publish.Event{Dest: "gone", ID: "evt-410", Data: []byte(`{}`)})
	require.NoError(t, err)

	opened := f.opHits("ops", opevent.BreakerOpened, 1)[0]
	var b map[string]any
	require.NoError(t, json.Unmarshal([]byte(opened.Body), &b))
	require.Equal(t, "orders", b["dest"])
	require.Equal(t, float64(1), b["trips"])
	require.Equal(t, float64(2), b["threshold"])
	require.True(t, strings.HasPrefix(opened.ID, opevent.BreakerOpened+":orders:1:"), opened.ID)

	gone := f.opHits("ops", opevent.Disabled, 1)[0]
	require.NoError(t, json.Unmarshal([]byte(gone.Body), &b))
	require.Equal(t, "gone", b["dest"])
	require.Equal(t, destination.PauseGone, b["reason"])
	require.Equal(t, "evt-410", b["event_id"])

	// 410 is permanent: the gone destination's event is dead-lettered, as
	// are the orders' once they give up; relay.dead_letters says so per
	// destination. (orders' circuit is open an hour: its events wait.)
	// The operator pause of 'relay dest pause' is told too.
	_, err = f.st.Pause(context.Background(), "orders", destination.Forever)
	require.NoError(t, err)
	paused := f.opHits("ops", opevent.Disabled, 2)
	require.NoError(t, json.Unmarshal([]byte(paused[1].Body), &b))
	require.Equal(t, destination.PauseOperator, b["reason"])
}

// TestNoOperatorEventAboutOperatorEvents: an operations destination that
// is down gets no operator event about itself: its breaker opens and its
// events are dead-lettered without a breaker_opened or dead_letters event
// for it, which would feed it more of them.
func TestNoOperatorEventAboutOperatorEvents(t *testing.T) {
	f := startLogFixture(t, Config{AlertDeadLetters: 1, alertWindow: time.Second})
	f.answer = func(dest string, n int) (int, string) {
		if dest == "bad" {
			return 400, "bad request" // permanent: dead-lettered at once
		}
		return 503, "down" // everything else is down
	}
	// ops gives up at the first failure: dead-lettered, and its breaker
	// opens.
	f.addDest(destination.Destination{Name: "ops", Types: []string{"relay.>"}, BreakerThreshold: 1, BreakerPause: destination.Duration(time.Hour), Retry: destination.RetryPolicy{MaxAttempts: 1}})
	f.addDest(destination.Destination{Name: "orders", BreakerThreshold: 1, BreakerPause: destination.Duration(time.Hour)})
	f.addDest(destination.Destination{Name: "bad"})
	_, err := f.prod.Publish(context.Background(), publish.Event{Dest: "orders", Data: []byte(`{}`)})
	require.NoError(t, err)

	// orders' breaker opens: one event, delivered to ops, which fails:
	// ops' breaker opens in turn.
	deadline := time.Now().Add(60 * time.Second)
	for {
		d, err := f.st.Get(context.Background(), "ops")
		require.NoError(t, err)
		if d.PauseReason == destination.PauseCircuitOpen {
			break
		}
		require.False(t, time.Now().After(deadline), "ops' breaker never opened")
		time.Sleep(20 * time.Millisecond)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		letters := 0
		require.NoError(t, stream.Read(context.Background(), f.srv.JS, stream.DLQStream, stream.ReadOptions{Filters: []string{stream.DLQSubject("ops")}, HeadersOnly: true},
			func(*jetstream.RawStreamMsg) error { letters++; return nil }))
		if letters > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "ops' operator event was never dead-lettered")
		time.Sleep(50 * time.Millisecond)
	}
	// A destination's dead letter that is not an operator event's is told:
	// the alert works, and leaves ops' out.
	_, err = f.prod.Publish(context.Background(), publish.Event{Dest: "bad", Data: []byte(`{}`)})
	require.NoError(t, err)
	deadline = time.Now().Add(60 * time.Second)
	for len(storedOpEvents(t, f.srv.JS)[opevent.DeadLetters]) == 0 {
		if time.Now().After(deadline) {
			var letters []string
			_ = stream.Read(context.Background(), f.srv.JS, stream.DLQStream, stream.ReadOptions{HeadersOnly: true},
				func(m *jetstream.RawStreamMsg) error {
					letters = append(letters, m.Subject+" "+m.Header.Get(stream.HdrType))
					return nil
				})
			t.Fatalf("no relay.dead_letters for bad: letters %v, operator events %v", letters, storedOpEvents(t, f.srv.JS))
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.stop() // waits for every emission in flight
	evs := storedOpEvents(t, f.srv.JS)
	for _, e := range evs[opevent.BreakerOpened] {
		require.Equal(t, "orders", e["dest"], "no breaker_opened about ops: %v", evs)
	}
	require.Len(t, evs[opevent.BreakerOpened], 1)
	require.NotEmpty(t, evs[opevent.DeadLetters])
	for _, e := range evs[opevent.DeadLetters] {
		require.Equal(t, "bad", e["dest"], "no dead_letters about ops' operator events: %v", evs)
	}
}

// TestBacklogStaleIsToldOnce: a destination whose oldest undelivered event
// grows older than the threshold is told once, not at every look.
func TestBacklogStaleIsToldOnce(t *testing.T) {
	f := startLogFixture(t, Config{AlertBacklogAge: 300 * time.Millisecond, opsEvery: 100 * time.Millisecond})
	f.answer = func(string, int) (int, string) { return 200, "" }
	f.addDest(destination.Destination{Name: "ops", Types: []string{"relay.>"}})
	f.addDest(destination.Destination{Name: "crm"})
	_, err := f.st.Pause(context.Background(), "crm", destination.Forever)
	require.NoError(t, err)
	// Published once relay paused its consumer: before that, relay may
	// have taken it (in flight, not in the backlog).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := f.srv.JS.Consumer(context.Background(), stream.EventsStream, destination.ConsumerName("crm"))
		if err == nil {
			if info, err := c.Info(context.Background()); err == nil && info.Paused {
				break
			}
		}
		require.False(t, time.Now().After(deadline), "relay never paused crm's consumer")
		time.Sleep(10 * time.Millisecond)
	}
	_, err = f.prod.Publish(context.Background(), publish.Event{Dest: "crm", Data: []byte(`{}`)})
	require.NoError(t, err)
	stale := f.opHits("ops", opevent.BacklogStale, 1)[0]
	var b map[string]any
	require.NoError(t, json.Unmarshal([]byte(stale.Body), &b))
	require.Equal(t, "crm", b["dest"])
	require.Equal(t, float64(1), b["backlog"])
	require.GreaterOrEqual(t, b["age_seconds"], 0.3)
	// Five more looks while the backlog stays stale: the episode is told
	// once.
	looked := f.r.opsLooks.Load()
	deadline = time.Now().Add(30 * time.Second)
	for f.r.opsLooks.Load() < looked+5 {
		require.False(t, time.Now().After(deadline), "the job stopped looking")
		time.Sleep(20 * time.Millisecond)
	}
	f.stop()
	require.Len(t, storedOpEvents(t, f.srv.JS)[opevent.BacklogStale], 1)
}

// An operator event's body names its type ("type", first), so that a
// receiver can tell it from the body alone (the Relay-Event-Type header
// has it too); a body that is no JSON object is refused.
func TestOperatorEventBodiesNameTheirType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, ev := range []opevent.Event{
		{Type: opevent.BreakerClosed, ID: "c1", Data: opevent.BreakerClosedBody{Dest: "orders", At: at}},
		{Type: opevent.ReplayFinished, ID: "r1", Data: opevent.ReplayFinishedBody{At: at, By: "api", Replayed: 2}},
		{Type: opevent.DeadLetters, ID: "d1", Data: &opevent.DeadLettersBody{Dest: "orders", Count: 1, Reasons: map[string]int{"max_attempts": 1}}},
	} {
		require.NoError(t, opevent.Publish(ctx, js, ev))
	}
	stored := storedOpEvents(t, js)
	closed := stored[opevent.BreakerClosed][0]
	require.Equal(t, opevent.BreakerClosed, closed["type"])
	require.Equal(t, "orders", closed["dest"])
	require.Equal(t, "2026-03-04T05:06:07Z", closed["at"])
	replay := stored[opevent.ReplayFinished][0]
	require.Equal(t, opevent.ReplayFinished, replay["type"])
	require.Equal(t, float64(2), replay["replayed"])
	require.Equal(t, opevent.DeadLetters, stored[opevent.DeadLetters][0]["type"])

	err := stream.Read(ctx, js, stream.EventsStream, stream.ReadOptions{Filters: []string{stream.TypeSubject(opevent.BreakerClosed)}},
		func(m *jetstream.RawStreamMsg) error {
			require.True(t, strings.HasPrefix(string(m.Data), `{"type":"`+opevent.BreakerClosed+`",`), "type comes first: %s", m.Data)
			return nil
		})
	require.NoError(t, err)

	err = opevent.Publish(ctx, js, opevent.Event{Type: opevent.BreakerClosed, ID: "x", Data: "not an object"})
	require.ErrorContains(t, err, "not a JSON object")
}
