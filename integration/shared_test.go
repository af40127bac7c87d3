package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// consumerInfo returns the named consumer of the events stream, or nil.
func (e *env) consumerInfo(name string) *jetstream.ConsumerInfo {
	e.t.Helper()
	c, err := e.js.Consumer(context.Background(), stream.EventsStream, name)
	if err != nil {
		return nil
	}
	info, err := c.Info(context.Background())
	require.NoError(e.t, err)
	return info
}

// consumerNames are the events stream's consumers, sorted.
func (e *env) consumerNames() []string {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), stream.EventsStream)
	require.NoError(e.t, err)
	var names []string
	l := s.ConsumerNames(context.Background())
	for n := range l.Name() {
		if strings.HasPrefix(n, "relay_") { // not relay's short-lived readers
			names = append(names, n)
		}
	}
	require.NoError(e.t, l.Err())
	slices.Sort(names)
	return names
}

// Shared destinations are served by one consumer; destinations with
// consumers of their own (unordered and ordered) beside them are served
// by those, each event once.
func TestSharedDestinationsDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	const dests, per = 20, 25
	var names []string
	for i := range dests {
		d := e.addDest(destination.Destination{Name: "s" + string(rune('a'+i)), URL: s.URL, Shared: true})
		names = append(names, d.Name)
	}
	e.addDest(destination.Destination{Name: "own", URL: s.URL})
	e.addDest(destination.Destination{Name: "ord", URL: s.URL, Ordered: true, Partitions: 2})
	e.startRelay()

	want := map[string]bool{}
	for range per {
		for _, n := range append(names, "own", "ord") {
			want[e.publish(n, "k1", `{}`).ID] = true
		}
	}
	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) == len(want) }, "every event delivered")
	for id, n := range s.delivered() {
		require.True(t, want[id], id)
		require.Equal(t, 1, n, "delivered once: %s", id)
	}
	eventually(t, 10*time.Second, func() bool { return e.settled("sa") && e.settled("own") }, "all acknowledged")
	require.Equal(t, []string{"relay_Shared", "relay_ord", "relay_ord_P0", "relay_ord_P1", "relay_own"}, e.consumerNames(),
		"no consumer per shared destination")
}

// A shared destination that hangs holds at most its queue of the shared
// consumer's events; the rest of its events go to its lane, and a healthy
// shared destination gets every event meanwhile.
func TestSharedHangingDestinationDoesNotHoldBackAHealthyOne(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := newSink(t, func(h hit, w http.ResponseWriter) int {
		<-release
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	t.Cleanup(func() { close(release) })
	healthy := newSink(t, nil)

	e := setup(t)
	// Its attempts outlast the test (the longest timeout): on a loaded
	// machine the healthy deliveries took over the default 30s, and the
	// hung attempts ended by timing out.
	e.addDest(destination.Destination{Name: "hung", URL: hung.URL, Concurrency: 4, Shared: true, Timeout: destination.Duration(10 * time.Minute)})
	e.addDest(destination.Destination{Name: "healthy", URL: healthy.URL, Concurrency: 8, Shared: true})
	rec, _ := e.startRelay()

	const stuck = 2000
	for range stuck {
		e.publish("hung", "", `{}`)
	}
	const n = 300
	for range n {
		e.publish("healthy", "", `{}`)
	}
	eventually(t, 30*time.Second, func() bool { return len(healthy.delivered()) == n }, "all healthy deliveries")
	require.Zero(t, rec.count(func(o relay.Outcome) bool { return o.Dest == "hung" }), "no attempt to the hanging destination ended")
	require.Equal(t, 4, hung.received(), "the hanging destination has exactly its concurrency in flight")
	// Its events leave the shared consumer for its lane (those handed
	// back before it counted as hanging too, once they come back): the
	// shared consumer ends up holding at most the hanging destination's
	// queue, pullRounds rounds of its concurrency.
	eventually(t, 30*time.Second, func() bool {
		lane := e.consumerInfo(destination.LaneConsumerName("hung"))
		shared := e.consumerInfo(destination.SharedConsumer)
		return lane != nil && shared != nil && shared.NumPending == 0 && shared.NumAckPending <= 4*4 &&
			lane.NumPending+uint64(lane.NumAckPending)+uint64(shared.NumAckPending) == stuck
	}, "the hanging destination's events are in its lane, but for its queue")
	require.Equal(t, 4, hung.received(), "and still exactly its concurrency in flight")
}

// A paused shared destination's events wait in its lane, whose consumer is
// paused, and are delivered once it is resumed.
func TestSharedPausedDestinationWaitsInItsLane(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "p", URL: s.URL, Shared: true})
	e.addDest(destination.Destination{Name: "q", URL: s.URL, Shared: true})
	e.startRelay()
	ctx := context.Background()
	_, err := e.store.Update(ctx, "p", func(d *destination.Destination) error {
		d.PausedUntil, d.PauseReason = time.Now().Add(time.Hour), destination.PauseOperator
		return nil
	})
	require.NoError(t, err)
	// The pause reaches relay through the destinations' watch: an event
	// published before that may still be delivered, so the test waits for
	// the lane, which only a paused or slow destination gets.
	var ids []string
	eventually(t, 20*time.Second, func() bool {
		ids = append(ids, e.publish("p", "", `{}`).ID)
		return e.consumerInfo(destination.LaneConsumerName("p")) != nil
	}, "p's lane opened")
	const n = 50
	for range n {
		ids = append(ids, e.publish("p", "", `{}`).ID)
	}
	idq := e.publish("q", "", `{}`).ID
	eventually(t, 20*time.Second, func() bool { return s.delivered()[idq] == 1 }, "q is not paused")
	eventually(t, 20*time.Second, func() bool {
		lane := e.consumerInfo(destination.LaneConsumerName("p"))
		return lane.NumPending >= n && lane.Paused
	}, "p's events wait in its paused lane")
	before := len(s.delivered())

	_, err = e.store.Update(ctx, "p", func(d *destination.Destination) error {
		d.PausedUntil, d.PauseReason = time.Time{}, ""
		return nil
	})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool {
		for _, id := range ids {
			if s.delivered()[id] != 1 {
				return false
			}
		}
		return true
	}, "every event of p delivered once resumed")
	require.Greater(t, len(s.delivered()), before)
	eventually(t, 30*time.Second, func() bool { return e.settled("p") }, "p settled")
}

// Events of an unknown destination reach the shared consumer too: it acks
// them, and the unknown-destination check dead-letters them.
func TestSharedConsumerLeavesUnknownDestinationsToTheCheck(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "known", URL: s.URL, Shared: true})
	e.startRelay()
	require.NoError(t, e.nc.PublishMsg(&nats.Msg{Subject: stream.InSubject("ghost", ""), Data: []byte(`{}`)}))
	id := e.publish("known", "", `{}`).ID
	eventually(t, 20*time.Second, func() bool {
		return len(e.deadLetters("ghost")) == 1 && s.delivered()[id] == 1 && e.settled("known")
	}, "ghost dead-lettered once, known delivered, the shared consumer settled")
}

// A relay killed (SIGKILL) while delivering to shared destinations loses
// no event: another relay delivers what it held once its AckWait is over,
// and what it had moved to a lane.
func TestFaultKilledRelayLosesNoSharedEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	slow := newSink(t, func(h hit, w http.ResponseWriter) int {
		time.Sleep(20 * time.Millisecond) // a destination that takes its time
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	fast := newSink(t, nil)
	e.addDest(destination.Destination{Name: "slow", URL: slow.URL, Concurrency: 2, Shared: true})
	e.addDest(destination.Destination{Name: "fast", URL: fast.URL, Shared: true})
	const n = 400
	want := map[string]bool{}
	for range n {
		want[e.publish("slow", "", `{}`).ID] = true
		want[e.publish("fast", "", `{}`).ID] = true
	}
	p1 := faultRun(t, e.url)
	eventually(t, 30*time.Second, func() bool { return slow.received() >= 20 }, "the first relay is delivering")
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	<-p1.exited
	faultRun(t, e.url)
	eventually(t, 2*time.Minute, func() bool {
		got := 0
		for id := range want {
			if slow.delivered()[id] > 0 || fast.delivered()[id] > 0 {
				got++
			}
		}
		return got == len(want) && e.settled("slow") && e.settled("fast")
	}, "every event delivered after the kill")
	for id, c := range slow.delivered() {
		require.True(t, want[id], id)
		require.LessOrEqual(t, c, 2, "at most once more than once: %s", id)
	}
	require.Empty(t, e.deadLetters("slow"))
	require.Empty(t, e.deadLetters("fast"))
}

// Retries and dead letters of shared destinations work as for the others:
// a first attempt answered 500 is retried (a nak with a delay in the
// shared consumer), and an event that always fails is dead-lettered with
// every attempt in its history. Two relays serve them together, each
// event once.
func TestSharedDestinationsRetryAndDeadLetterWithTwoReplicas(t *testing.T) {
	t.Parallel()
	e := setup(t)
	flaky := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return http.StatusInternalServerError
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	broken := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusInternalServerError)
		return http.StatusInternalServerError
	})
	// Every first attempt fails: no circuit breaker, which would
	// pause it.
	e.addDest(destination.Destination{Name: "flaky", URL: flaky.URL, Retry: fast(5), BreakerThreshold: -1, Shared: true})
	e.addDest(destination.Destination{Name: "broken", URL: broken.URL, Retry: fast(3), Shared: true})
	rec1, _ := e.startRelay()
	rec2, _ := e.startRelay()

	const n = 100
	want := map[string]bool{}
	for range n {
		want[e.publish("flaky", "", `{}`).ID] = true
	}
	const m = 5
	for range m {
		e.publish("broken", "", `{}`)
	}
	eventually(t, 60*time.Second, func() bool {
		return len(flaky.delivered()) == n && len(e.deadLetters("broken")) == m && e.settled("flaky")
	}, "flaky's events delivered after a retry, broken's dead-lettered")
	for id, c := range flaky.delivered() {
		require.True(t, want[id], id)
		require.Equal(t, 1, c, "delivered once: %s", id)
	}
	require.Equal(t, 2*n, flaky.received(), "each event: one 500, one 200")
	for _, l := range e.deadLetters("broken") {
		require.Equal(t, 3, l.Attempts)
		require.Len(t, l.History, 3)
	}
	both := func(rec *outcomes) int {
		return rec.count(func(o relay.Outcome) bool { return o.Dest == "flaky" && o.Decision.Action == relay.Ack })
	}
	require.Equal(t, n, both(rec1)+both(rec2), "each delivery acked by one replica")
	t.Logf("replica 1 delivered %d, replica 2 %d", both(rec1), both(rec2))
}

// subjectCount is how many messages the events stream holds on subject.
func (e *env) subjectCount(subject string) uint64 {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), stream.EventsStream)
	require.NoError(e.t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	require.NoError(e.t, err)
	return info.State.Subjects[subject]
}

// A typed event reaches shared subscribers through one fan-out message,
// not a copy each: those that take it are delivered from it, a failed
// attempt is split off to its destination with its wait and attempt count,
// and a paused subscriber's share is split off to wait in its lane. A
// subscriber with a consumer of its own still gets a copy. Each gets each
// event once, with the same webhook-id and type.
func TestFanOutToSharedSubscribers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sinks := map[string]*sink{}
	for _, n := range []string{"s1", "s2", "s3", "later", "own"} {
		sinks[n] = newSink(t, nil)
	}
	flaky := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	types := []string{"order.*"}
	for _, n := range []string{"s1", "s2", "s3"} {
		e.addDest(destination.Destination{Name: n, URL: sinks[n].URL, Types: types, Shared: true})
	}
	e.addDest(destination.Destination{Name: "flaky", URL: flaky.URL, Types: types, Retry: fast(5), BreakerThreshold: -1, Shared: true})
	e.addDest(destination.Destination{Name: "later", URL: sinks["later"].URL, Types: types, Shared: true,
		PausedUntil: time.Now().Add(time.Hour), PauseReason: destination.PauseOperator})
	e.addDest(destination.Destination{Name: "own", URL: sinks["own"].URL, Types: types})
	e.startRelay()

	const n = 50
	ids := map[string]bool{}
	for i := range n {
		ids[e.publishType("order.created", "", fmt.Sprintf(`{"i":%d}`, i)).ID] = true
	}
	perPath := func(name string) map[string]int { return sinks[strings.TrimPrefix(name, "/")].delivered() }
	eventually(t, 60*time.Second, func() bool {
		return len(perPath("/s1")) == n && len(perPath("/s2")) == n && len(perPath("/s3")) == n &&
			len(perPath("/own")) == n && len(flaky.delivered()) == n
	}, "every subscriber but the paused one has every event")
	for _, p := range []string{"/s1", "/s2", "/s3", "/own"} {
		for id, c := range perPath(p) {
			require.True(t, ids[id], id)
			require.Equal(t, 1, c, "%s got %s once", p, id)
		}
	}
	require.Equal(t, 2*n, flaky.received(), "one 503 and one 200 each")
	require.Empty(t, perPath("/later"), "paused")
	for _, h := range sinks["s1"].all() {
		require.Equal(t, "order.created", h.Header.Get("Relay-Event-Type"))
	}

	// The shared subscribers' events came in fan-out messages; only the
	// failed attempts and the paused destination's shares were split off.
	require.Zero(t, e.subjectCount(stream.InSubject("s1", "")))
	require.Equal(t, uint64(n), e.subjectCount(stream.InSubject("flaky", "")), "each retry split off")
	require.Equal(t, uint64(n), e.subjectCount(stream.InSubject("later", "")), "the paused destination's shares split off")
	require.Equal(t, uint64(n), e.subjectCount(stream.InSubject("own", "")), "a copy for the destination with its own consumer")
	require.Equal(t, uint64(n), e.subjectCount(stream.FanSubject), "one fan-out message per event")

	_, err := e.store.Update(context.Background(), "later", func(d *destination.Destination) error {
		d.PausedUntil, d.PauseReason = time.Time{}, ""
		return nil
	})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool { return len(perPath("/later")) == n }, "the paused subscriber gets every event once resumed")
	for id, c := range perPath("/later") {
		require.True(t, ids[id], id)
		require.Equal(t, 1, c)
	}
	eventually(t, 30*time.Second, func() bool { return e.settled("s1") && e.settled("later") }, "settled")
}
