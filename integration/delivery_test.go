package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/webhook"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// fast is a retry policy for tests: short waits, no jitter unless asked.
func fast(attempts int) destination.RetryPolicy {
	return destination.RetryPolicy{Base: destination.Duration(50 * time.Millisecond), Max: destination.Duration(time.Second), NoJitter: true, MaxAttempts: attempts}
}

func TestHappyPathDeliversEachEventOnceAndAcksIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	secret := webhook.GenerateSecret()
	e.addDest(destination.Destination{Name: "happy", URL: s.URL + "/hook", Secret: secret, Concurrency: 32})
	e.startRelay()

	const n = 1000
	want := map[string]string{}
	for i := range n {
		body := fmt.Sprintf(`{"n":%d}`, i)
		res := e.publish("happy", fmt.Sprintf("k%d", i%10), body)
		want[res.ID] = body
	}
	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) == n && e.settled("happy") },
		"%d distinct deliveries and an empty consumer (have %d)", n, len(s.delivered()))

	hits := s.all()
	require.Len(t, hits, n, "every event is POSTed exactly once")
	for _, h := range hits {
		require.Equal(t, 1, h.N, "event %s delivered more than once", h.ID)
		require.Equal(t, want[h.ID], h.Body)
		require.Equal(t, "application/json", h.Header.Get("Content-Type"))
		require.True(t, strings.HasPrefix(h.Header.Get("User-Agent"), "relay/"))
		var ts int64
		_, err := fmt.Sscan(h.Header.Get("webhook-timestamp"), &ts)
		require.NoError(t, err)
		require.NoError(t, webhook.Verify(secret, h.ID, ts, []byte(h.Body), h.Header.Get("webhook-signature")))
	}
	require.Empty(t, e.deadLetters("happy"))
}

func TestFlakyDestinationIsRetriedWithGrowingWaits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	base := 300 * time.Millisecond
	const jitter = 0.2
	e.addDest(destination.Destination{Name: "flaky", URL: s.URL, Retry: destination.RetryPolicy{
		Base: destination.Duration(base), Max: destination.Duration(10 * time.Second), Jitter: jitter, MaxAttempts: 5}})
	rec, _ := e.startRelay()
	res := e.publish("flaky", "", `{"x":1}`)

	ackedThird := func(o relay.Outcome) bool { return o.Attempt == 3 && o.Decision.Action == relay.Ack }
	// The outcome is reported after the ack is confirmed and the history
	// deleted, so it can come a moment after the consumer looks settled.
	eventually(t, 15*time.Second, func() bool {
		return s.delivered()[res.ID] == 1 && e.settled("flaky") && rec.count(ackedThird) == 1
	}, "delivery on the third attempt")
	hits := s.all()
	require.Len(t, hits, 3)
	require.Equal(t, []int{503, 503, 200}, []int{hits[0].Status, hits[1].Status, hits[2].Status})
	for _, h := range hits {
		require.Equal(t, res.ID, h.Header.Get("webhook-id"), "the webhook-id is stable across retries")
	}
	// The waits are base*2^(n-1) within the jitter bounds; scheduling adds
	// on top, never takes away: up to 725 ms on a 300 ms wait was seen on a
	// machine running two suites at once. The upper bound only has to tell
	// the policy's wait from AckWait (15 s) or the policy's max (10 s).
	slack := time.Second
	for i, gap := range []time.Duration{hits[1].At.Sub(hits[0].At), hits[2].At.Sub(hits[1].At)} {
		nominal := base << i
		lo := time.Duration(float64(nominal) * (1 - jitter))
		hi := time.Duration(float64(nominal)*(1+jitter)) + slack
		require.GreaterOrEqual(t, gap, lo, "wait %d", i+1)
		require.LessOrEqual(t, gap, hi, "wait %d", i+1)
	}
	require.Empty(t, e.deadLetters("flaky"))
}

func TestAlways500IsDeadLetteredWithItsHistory(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "boom: database down")
		return http.StatusInternalServerError
	})
	e.addDest(destination.Destination{Name: "broken", URL: s.URL, Retry: fast(3)})
	e.startRelay()
	res, err := e.prod.Publish(context.Background(), publish.Event{Dest: "broken", Key: "cust-7", Data: []byte(`{"a":1}`), Headers: map[string]string{"X-Trace": "t1"}})
	require.NoError(t, err)

	eventually(t, 15*time.Second, func() bool { return len(e.deadLetters("broken")) == 1 && e.settled("broken") }, "one dead letter")
	require.Equal(t, 3, s.len(), "exactly max attempts were made")
	l := e.deadLetters("broken")[0]
	require.Equal(t, relay.ReasonMaxAttempts, l.Reason)
	require.Equal(t, res.ID, l.EventID)
	require.Equal(t, "broken", l.Dest)
	require.Equal(t, 3, l.Attempts)
	require.Equal(t, 500, l.LastStatus)
	require.Contains(t, l.LastError, "boom: database down")
	require.Equal(t, res.Seq, l.StreamSeq)
	require.Equal(t, stream.KeyedSubject("broken", "cust-7"), l.Subject, "stored in its key's bucket")
	require.Equal(t, "cust-7", l.Key, "the key, which the subject no longer carries")
	require.Equal(t, `{"a":1}`, string(l.Body))
	require.Equal(t, "t1", l.Headers.Get("X-Trace"))
	require.Len(t, l.History, 3)
	for i, a := range l.History {
		require.Equal(t, i+1, a.N)
		require.Equal(t, 500, a.Status)
	}
	require.Equal(t, l.History[0].At, l.First)
	require.Equal(t, l.History[2].At, l.Last)
	require.True(t, l.Last.After(l.First))
	// The attempt history bucket does not keep what it no longer needs.
	kv, err := e.js.KeyValue(context.Background(), stream.AttemptsBucket)
	require.NoError(t, err)
	keys, err := kv.ListKeys(context.Background())
	require.NoError(t, err)
	n := 0
	for range keys.Keys() {
		n++
	}
	require.Zero(t, n, "attempt history is removed once the event is dead-lettered")
}

func TestPermanentStatusIsDeadLetteredAfterOneAttempt(t *testing.T) {
	t.Parallel()
	for _, status := range []int{404, 400, 410, 302} { // 410 with on-gone dead-letter
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			s := newSink(t, func(h hit, w http.ResponseWriter) int {
				if status == 302 {
					w.Header().Set("Location", "http://169.254.169.254/latest/meta-data")
				}
				w.WriteHeader(status)
				return status
			})
			e.addDest(destination.Destination{Name: "perm", URL: s.URL, Retry: fast(5), OnGone: destination.OnGoneDeadLetter})
			e.startRelay()
			e.publish("perm", "", `{}`)
			eventually(t, 10*time.Second, func() bool { return len(e.deadLetters("perm")) == 1 && e.settled("perm") }, "one dead letter")
			require.Equal(t, 1, s.len(), "no retry of a permanent failure, no redirect followed")
			l := e.deadLetters("perm")[0]
			want := relay.ReasonPermanentStatus
			if status == 302 {
				want = relay.ReasonRedirect
			}
			require.Equal(t, want, l.Reason)
			require.Equal(t, 1, l.Attempts)
			require.Equal(t, status, l.LastStatus)
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return http.StatusTooManyRequests
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	// Without Retry-After the next attempt would come after 50ms.
	p := fast(5)
	p.Max = destination.Duration(10 * time.Second)
	e.addDest(destination.Destination{Name: "limited", URL: s.URL, Retry: p})
	rec, _ := e.startRelay()
	res := e.publish("limited", "", `{}`)
	eventually(t, time.Minute, func() bool { return s.delivered()[res.ID] == 1 }, "delivery after the 429")
	hits := s.all()
	require.Len(t, hits, 2)
	gap := hits[1].At.Sub(hits[0].At)
	require.GreaterOrEqual(t, gap, 2*time.Second, "waited as Retry-After said")
	// Not longer than it said: the wait decided is Retry-After's, not the
	// backoff's cap (10s). (How long it really took is up to the machine's
	// load.)
	require.Equal(t, 1, rec.count(func(o relay.Outcome) bool {
		return o.Decision.Action == relay.Retry && o.Decision.Delay == 2*time.Second
	}), "the retry waits Retry-After's 2s")
}

func TestUnreachableDestinationIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: take a free one and close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + ln.Addr().String() + "/hook"
	require.NoError(t, ln.Close())
	hang := newSink(t, func(h hit, w http.ResponseWriter) int {
		time.Sleep(time.Second) // far beyond the destination's 200ms timeout
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})

	e := setup(t)
	e.addDest(destination.Destination{Name: "refused", URL: refused, Retry: fast(3)})
	e.addDest(destination.Destination{Name: "slow", URL: hang.URL, Timeout: destination.Duration(200 * time.Millisecond), Retry: fast(2)})
	e.startRelay()
	e.publish("refused", "", `{}`)
	e.publish("slow", "", `{}`)

	eventually(t, 20*time.Second, func() bool {
		return len(e.deadLetters("refused")) == 1 && len(e.deadLetters("slow")) == 1
	}, "both dead-lettered")
	l := e.deadLetters("refused")[0]
	require.Equal(t, relay.ReasonMaxAttempts, l.Reason)
	require.Equal(t, 3, l.Attempts)
	require.Equal(t, 0, l.LastStatus)
	require.Contains(t, l.LastError, "connection refused")
	require.Len(t, l.History, 3)

	l = e.deadLetters("slow")[0]
	require.Equal(t, relay.ReasonMaxAttempts, l.Reason)
	require.Equal(t, 2, l.Attempts)
	require.Contains(t, l.LastError, "timeout")
	require.Equal(t, 2, hang.received(), "two attempts reached the hanging destination")
}

func TestHangingDestinationDoesNotHoldBackAHealthyOne(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := newSink(t, func(h hit, w http.ResponseWriter) int {
		<-release
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	t.Cleanup(func() { close(release) }) // runs before the sink's Close
	healthy := newSink(t, nil)

	e := setup(t)
	// The hanging destination's attempts can only end by its 30s timeout.
	e.addDest(destination.Destination{Name: "hung", URL: hung.URL, Concurrency: 4})
	e.addDest(destination.Destination{Name: "healthy", URL: healthy.URL, Concurrency: 8})
	rec, _ := e.startRelay()

	for range 50 {
		e.publish("hung", "", `{}`)
	}
	const n = 300
	for range n {
		e.publish("healthy", "", `{}`)
	}
	eventually(t, 20*time.Second, func() bool { return len(healthy.delivered()) == n && e.settled("healthy") }, "all healthy deliveries")
	// While the healthy destination got everything, not one attempt to the
	// hanging one has finished: it was held up, the healthy one was not.
	require.Zero(t, rec.count(func(o relay.Outcome) bool { return o.Dest == "hung" }))
	require.Equal(t, 4, hung.received(), "the hanging destination has exactly its concurrency in flight")
}

func TestEventForUnknownDestinationIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "known", URL: s.URL})
	e.startRelay()

	// A producer with a plain NATS client, not even JetStream publish.
	m := nats.NewMsg(stream.InSubject("ghost", "k1"))
	m.Data = []byte(`{"lost":false}`)
	m.Header.Set("Nats-Msg-Id", "evt-ghost-1")
	require.NoError(t, e.nc.PublishMsg(m))
	require.NoError(t, e.nc.PublishMsg(&nats.Msg{Subject: "relay.in.known", Data: []byte(`{}`)}))

	eventually(t, 10*time.Second, func() bool { return len(e.deadLetters("ghost")) == 1 && len(s.delivered()) == 1 }, "ghost dead-lettered, known delivered")
	l := e.deadLetters("ghost")[0]
	require.Equal(t, relay.ReasonUnknownDestination, l.Reason)
	require.Equal(t, "evt-ghost-1", l.EventID)
	require.Equal(t, 0, l.Attempts)
	require.Equal(t, `{"lost":false}`, string(l.Body))
	require.Empty(t, e.deadLetters("known"), "events of known destinations are not touched")
	// The event without Nats-Msg-Id got an id assigned, stable in the header.
	for id := range s.delivered() {
		require.True(t, strings.HasPrefix(id, "evt_"), id)
	}
}

func TestRetryAfterIsCappedByMaxBackoff(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "capped", URL: s.URL, Retry: fast(5)}) // max backoff 1s
	rec, _ := e.startRelay()
	res := e.publish("capped", "", `{}`)
	eventually(t, time.Minute, func() bool { return s.delivered()[res.ID] == 1 }, "delivery after the capped wait")
	require.Equal(t, 1, rec.count(func(o relay.Outcome) bool {
		return o.Decision.Action == relay.Retry && o.Decision.Delay == time.Second
	}), "an hour of Retry-After is capped at the destination's 1s maximum backoff")
}

// Destinations live in a JetStream bucket: a running relay picks up added,
// changed and removed destinations without a restart.
func TestRunningRelayFollowsDestinationChanges(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := newSink(t, nil)
	second := newSink(t, nil)
	e.startRelay()

	e.addDest(destination.Destination{Name: "live", URL: first.URL})
	a := e.publish("live", "", `{"n":1}`)
	eventually(t, 10*time.Second, func() bool { return first.delivered()[a.ID] == 1 }, "delivery to the first URL")

	_, err := e.store.Update(context.Background(), "live", func(d *destination.Destination) error {
		d.URL = second.URL
		d.Concurrency = 3 // a consumer setting: the worker restarts
		return nil
	})
	require.NoError(t, err)
	var b publish.Published
	eventually(t, 10*time.Second, func() bool {
		b = e.publish("live", "", `{"n":2}`)
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if second.delivered()[b.ID] == 1 || first.delivered()[b.ID] == 1 {
				return second.delivered()[b.ID] == 1
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}, "deliveries go to the new URL")

	// Events the unknown-destination check has not gone through when their
	// destination is removed are dead-lettered, delivered or not
	// (docs/operations.md, "Remove a destination"); these were all delivered.
	e.waitChecked(func(st routing.CheckState) bool { return st.Checked >= b.Seq }, "the check went through the delivered events")
	require.NoError(t, e.store.Remove(context.Background(), "live"))
	fresh, err := publish.NewProducer(context.Background(), e.js)
	require.NoError(t, err)
	_, err = fresh.Publish(context.Background(), publish.Event{Dest: "live", Data: []byte("{}")})
	require.ErrorIs(t, err, publish.ErrUnknownDestination, "publishing for a removed destination is refused")

	// A producer that still believes in it (it caches for a few seconds)
	// publishes; the event is dead-lettered, not lost.
	late := e.publish("live", "", `{"late":true}`)
	eventually(t, 10*time.Second, func() bool { return len(e.deadLetters("live")) == 1 }, "the late event is dead-lettered")
	l := e.deadLetters("live")[0]
	require.Equal(t, late.ID, l.EventID)
	require.Equal(t, relay.ReasonUnknownDestination, l.Reason)
}

// Two replicas share the unknown-destination check, and one of them stops
// while events keep coming: every event for a ghost destination is
// dead-lettered exactly once, every event for the known one delivered, and
// the stopping replica hands the check over at once.
func TestUnknownDestinationsAreDeadLetteredOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "known", URL: s.URL})
	ctx := context.Background()
	ghosts := map[string]bool{}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			m := nats.NewMsg("relay.in.known")
			if i%2 == 0 {
				m.Subject = "relay.in.ghost"
				ghosts[fmt.Sprintf("g%d", i)] = true
			}
			m.Data = []byte(`{}`)
			m.Header.Set("Nats-Msg-Id", fmt.Sprintf("g%d", i))
			_, err := e.js.PublishMsg(ctx, m)
			require.NoError(t, err)
		}
	}
	// No takeover by waiting: B can go on only if A hands the check over.
	noTakeover := func(c *relay.Config) { c.CheckTakeover = time.Hour }
	recA, stopA := e.startRelay(noTakeover)
	e.waitChecked(func(st routing.CheckState) bool { return st.Holder != "" }, "A holds the check")
	recB, _ := e.startRelay(noTakeover)
	publish(0, 2000)
	stopA() // mid-stream: the other replica goes on where it left off
	publish(2000, 4000)

	// As long as the check makes progress: under test-under-load, with
	// another suite beside it, it dead-lettered 800 ghosts in a minute
	// once and 929 in three another time (alone: 2,000 in about 4s).
	// Stuck a minute, or 10 minutes in all, is a failure.
	last, stalled, deadline := -1, time.Now(), time.Now().Add(10*time.Minute)
	for {
		n := len(e.deadLetters("ghost"))
		if n >= 2000 && len(s.delivered()) == 2000 {
			break
		}
		if n > last {
			last, stalled = n, time.Now()
		}
		require.False(t, time.Since(stalled) > time.Minute || time.Now().After(deadline),
			"2000 ghosts dead-lettered (%d so far, none more for %s), 2000 delivered (%d)", n, time.Since(stalled).Round(time.Second), len(s.delivered()))
		time.Sleep(100 * time.Millisecond)
	}
	letters := e.deadLetters("ghost")
	require.Len(t, letters, 2000, "each ghost event once")
	for _, l := range letters {
		require.True(t, ghosts[l.EventID], l.EventID)
		delete(ghosts, l.EventID)
	}
	require.Empty(t, ghosts)
	e.waitChecked(func(st routing.CheckState) bool { return st.Checked == 4000 }, "the check has read all 4000 events")
	// One replica checks at a time, and a stopping one hands over where it
	// got to: no ghost was dead-lettered by both.
	ghostLetters := func(x relay.Outcome) bool { return x.Dest == "ghost" && x.Decision.Action == relay.DeadLetter }
	require.Equal(t, 2000, recA.count(ghostLetters)+recB.count(ghostLetters), "dead-letter outcomes of the two replicas")
}

// A relay stopped while it starts returns without an error.
func TestRunStoppedWhileStartingReturnsNil(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		r, err := relay.New(ctx, relay.Config{JS: e.js, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		cancel()
		require.NoError(t, <-done)
	}
}

// relay's pull requests ask for idle heartbeats at most every 2s: a pull
// request the NATS client counts on but the server never got is noticed
// after two missed heartbeats (see docs/performance.md, "How relay pulls
// events"), so the interval bounds such a stall. (The unknown-destination check's, when it
// reads: TestCheckReadsWithShortHeartbeats in package relay.)
func TestPullRequestsAskForShortHeartbeats(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "hb", URL: s.URL})
	// The pull requests of the destination's consumer, as the server
	// receives them.
	reqs := streamtest.WatchPullRequests(t, e.nc, "$JS.API.CONSUMER.MSG.NEXT."+stream.EventsStream+"."+destination.ConsumerName("hb"))
	e.startRelay()
	streamtest.RequireShortHeartbeats(t, reqs, "the destination's consumer")
	e.publish("hb", "", `{}`)
	eventually(t, 10*time.Second, func() bool { return len(s.delivered()) == 1 }, "delivered")
}

// TestPullRequestsBoundTheirBytes: each of relay's pull requests carries
// max_bytes, 8 MiB or twice the server's maximum payload, so requests asked
// for while events were small cannot bring rounds of large ones.
func TestPullRequestsBoundTheirBytes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "mb", URL: s.URL})
	reqs := streamtest.WatchPullRequests(t, e.nc, "$JS.API.CONSUMER.MSG.NEXT."+stream.EventsStream+"."+destination.ConsumerName("mb"))
	e.startRelay()
	select {
	case r := <-reqs:
		require.Equal(t, max(8<<20, 2*e.nc.MaxPayload()), r.MaxBytes, "request %+v", r)
		require.Positive(t, r.Batch)
	case <-time.After(20 * time.Second):
		t.Fatal("no pull request sent")
	}
}

// TestEventsThatWaitedInRelaysQueueGetAnInProgressAck: relay asks
// JetStream for more events than it has workers. An event that waited in
// relay's queue for a third of AckWait gets an in-progress ack, which
// restarts its AckWait; so does one being attempted that long.
func TestEventsThatWaitedInRelaysQueueGetAnInProgressAck(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, arrived, release := gatedSink(t, 0)
	e.addDest(destination.Destination{Name: "buf", URL: s.URL, Concurrency: 2, Timeout: destination.Duration(10 * time.Second)})
	// AckWait 6s: events held over 2s are restarted.
	const restartAfter = 2 * time.Second

	// What relay says about each event, by stream sequence.
	acks := e.watchAcks("buf")

	e.startRelay(func(c *relay.Config) { c.AckWait = 3 * restartAfter })
	var seqs []uint64
	for range 4 {
		seqs = append(seqs, e.publish("buf", "", `{}`).Seq)
	}
	// Two attempts held by the sink, and all four events handed to relay,
	// two of them queued.
	eventually(t, 10*time.Second, func() bool { return e.ackPending("buf") == 4 && arrived.Load() == 2 },
		"two attempts in flight and four events handed out")
	// The condition under test is time spent waiting: more than
	// restartAfter. Nothing is acked meanwhile (an in-progress ack for the
	// first two is allowed: a loaded machine may take long to start).
	var early []*nats.Msg
	handedOut := time.Now()
	// The pull loop looks every 750ms (half its heartbeat): hold a second
	// past restartAfter.
	for hold := handedOut.Add(restartAfter + time.Second); time.Now().Before(hold); {
		select {
		case m := <-acks:
			require.Equal(t, "+WPI", string(m.Data), "relay acked before any attempt ended: %s", m.Subject)
			early = append(early, m)
		case <-time.After(time.Until(hold)):
		}
	}
	release()

	said := map[uint64][]string{}
	record := func(m *nats.Msg) {
		// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...,
		// or with a domain and account hash after ACK.
		tok := strings.Split(m.Subject, ".")
		i := 5
		if len(tok) > 9 {
			i = 7
		}
		seq, err := strconv.ParseUint(tok[i], 10, 64)
		require.NoError(t, err, m.Subject)
		said[seq] = append(said[seq], string(m.Data))
	}
	for _, m := range early {
		record(m)
	}
	eventually(t, 10*time.Second, func() bool {
		for {
			select {
			case m := <-acks:
				record(m)
			default:
				n := 0
				for _, s := range seqs {
					if l := said[s]; len(l) > 0 && l[len(l)-1] == "+ACK" {
						n++
					}
				}
				return n == 4
			}
		}
	}, "all four acked: %v", said)
	for _, seq := range seqs {
		// The first two were attempted, the others waited for a worker,
		// all for over restartAfter: one in-progress ack or more (one per
		// restartAfter), then its ack.
		l := said[seq]
		require.GreaterOrEqual(t, len(l), 2, "event at %d: %v", seq, l)
		require.Equal(t, "+ACK", l[len(l)-1], "event at %d: %v", seq, l)
		for _, k := range l[:len(l)-1] {
			require.Equal(t, "+WPI", k, "event at %d: %v", seq, l)
		}
	}
}

// TestQueuedEventsKeepTheirAckWait: an event queued in relay gets an
// in-progress ack each time it has waited a third of AckWait, not only
// once, so a queue of several slow rounds does not outlast its AckWait.
func TestQueuedEventsKeepTheirAckWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// A slow destination: 1.5s per request, within its 2s timeout.
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-h.Ctx.Done():
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	e.addDest(destination.Destination{Name: "slowq", URL: s.URL, Concurrency: 1, Timeout: destination.Duration(2 * time.Second)})
	acks := e.watchAcks("slowq")
	var last uint64
	for range 4 {
		last = e.publish("slowq", "", `{}`).Seq
	}
	// AckWait 3s: an in-progress ack every second.
	e.startRelay(func(c *relay.Config) { c.AckWait = 3 * time.Second })
	// The last event waits about three rounds (4.5s) in the queue.
	var said []string
	seqOf := func(m *nats.Msg) uint64 {
		meta, err := ackSubjectSeq(m.Subject)
		require.NoError(t, err)
		return meta
	}
	deadline := time.After(30 * time.Second)
	for len(said) == 0 || said[len(said)-1] != "+ACK" {
		select {
		case m := <-acks:
			if seqOf(m) == last {
				said = append(said, string(m.Data))
			}
		case <-deadline:
			t.Fatalf("the last event was not acked: %v", said)
		}
	}
	require.GreaterOrEqual(t, len(said), 3, "at least two in-progress acks before its ack: %v", said)
	for _, k := range said[:len(said)-1] {
		require.Equal(t, "+WPI", k, "%v", said)
	}
	for id, n := range s.delivered() {
		require.Equal(t, 1, n, "event %s", id)
	}
}

// TestLongAttemptsKeepTheirAckWait: an attempt that takes longer than
// AckWait (the destination's timeout allows it) gets in-progress acks while
// it runs, so JetStream does not hand the event out again meanwhile; and
// its failure counts as any other (a retry), not as an attempt that came
// too late.
func TestLongAttemptsKeepTheirAckWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const ackWait = 3 * time.Second
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N > 1 {
			w.WriteHeader(http.StatusNoContent)
			return http.StatusNoContent
		}
		// Past AckWait, well within the timeout.
		select {
		case <-time.After(2 * ackWait):
		case <-h.Ctx.Done():
			return 0
		}
		w.WriteHeader(http.StatusInternalServerError)
		return http.StatusInternalServerError
	})
	e.addDest(destination.Destination{Name: "long", URL: s.URL, Concurrency: 4, Timeout: destination.Duration(20 * time.Second),
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), NoJitter: true, MaxAttempts: 5}})
	acks := e.watchAcks("long")
	rec, _ := e.startRelay(func(c *relay.Config) { c.AckWait = ackWait })
	res := e.publish("long", "", `{}`)

	var said []string
	deadline := time.After(30 * time.Second)
	for len(said) == 0 || said[len(said)-1] != "+ACK" {
		select {
		case m := <-acks:
			seq, err := ackSubjectSeq(m.Subject)
			require.NoError(t, err)
			if seq == res.Seq {
				said = append(said, string(m.Data))
			}
		case <-deadline:
			t.Fatalf("the event was not acked: %v", said)
		}
	}
	// Two in-progress acks or more during the 6s attempt, then the nak of
	// its failure, then the retry's ack.
	require.GreaterOrEqual(t, len(said), 4, "%v", said)
	require.True(t, strings.HasPrefix(said[len(said)-2], "-NAK"), "the failure is nak'd for a retry: %v", said)
	for _, k := range said[:len(said)-2] {
		require.Equal(t, "+WPI", k, "%v", said)
	}
	require.Equal(t, 2, s.received(), "one long attempt and its retry, no copy handed out meanwhile")
	require.Equal(t, 1, s.delivered()[res.ID])
	require.Equal(t, 1, rec.count(func(o relay.Outcome) bool {
		return o.Attempt == 1 && o.Result.Status == http.StatusInternalServerError && o.Decision.Action == relay.Retry
	}),
		"the long attempt's failure was recorded and retried")
}

// TestStoppingReplicaKeepsItsAttemptsAckWait: a replica told to stop
// finishes its attempts in flight (its ShutdownGrace) and keeps restarting
// their AckWait until they end, so that JetStream does not hand their
// events to another replica meanwhile: the destination gets each event
// once. The same for a shared destination, whose consumer also works at an
// AckWait under 8s (the server refuses a pull request whose heartbeat is
// over half its expiry).
func TestStoppingReplicaKeepsItsAttemptsAckWait(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			const ackWait = 3 * time.Second
			arrived := make(chan struct{}, 1)
			s := newSink(t, func(h hit, w http.ResponseWriter) int {
				if h.N == 1 {
					arrived <- struct{}{}
					// Past AckWait, well within the timeout and the grace.
					select {
					case <-time.After(2 * ackWait):
					case <-h.Ctx.Done():
						return 0
					}
				}
				w.WriteHeader(http.StatusNoContent)
				return http.StatusNoContent
			})
			e.addDest(destination.Destination{Name: "slow", URL: s.URL, Concurrency: 4, Shared: shared,
				Timeout: destination.Duration(20 * time.Second)})
			mod := func(c *relay.Config) {
				c.AckWait = ackWait
				c.ShutdownGrace = 30 * time.Second
			}
			_, stopA := e.startRelay(mod)
			res := e.publish("slow", "", `{}`)
			select {
			case <-arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("the event was not attempted")
			}
			// A second replica, free to take the event should JetStream
			// hand it out again; then the first is told to stop mid-attempt.
			e.startRelay(mod)
			stopA()
			eventually(t, 20*time.Second, func() bool { return e.settled("slow") }, "the event settled")
			require.Equal(t, 1, s.received(), "one attempt: the event was not handed to the second replica while the first attempted it")
			require.Equal(t, 1, s.delivered()[res.ID])
		})
	}
}

// TestReplicaPingsByTheShortestLiveAckWait: a replica that learns of a
// live replica with a shorter AckWait (which would have set it on the
// consumers) warns and restarts the AckWait of the events it holds by that
// one, not its own: an attempt of 6s, with a replica of 3s live, gets
// in-progress acks every second or so, not none (a third of 30s).
func TestReplicaPingsByTheShortestLiveAckWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// The other replica, announced as relay announces itself, while the
	// test runs (the bucket forgets a record after 15s).
	kv, err := e.js.KeyValue(context.Background(), stream.ReplicasBucket)
	require.NoError(t, err)
	announce := func() error {
		_, err := kv.Put(context.Background(), "r-other", []byte(`{"at":"`+time.Now().UTC().Format(time.RFC3339Nano)+`","ack_wait":3000000000}`))
		return err
	}
	require.NoError(t, announce())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = announce()
			}
		}
	}()

	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		select {
		case <-time.After(6 * time.Second):
		case <-h.Ctx.Done():
			return 0
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	e.addDest(destination.Destination{Name: "mixed", URL: s.URL, Timeout: destination.Duration(20 * time.Second)})
	acks := e.watchAcks("mixed")
	var logs lockedBuffer
	e.startRelay(func(c *relay.Config) {
		c.AckWait = 30 * time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "another --ack-wait") },
		"the replica warns of the other's AckWait: %s", logs.String())
	require.Contains(t, logs.String(), "its_ack_wait=3s")
	res := e.publish("mixed", "", `{}`)

	var said []string
	deadline := time.After(30 * time.Second)
	for len(said) == 0 || said[len(said)-1] != "+ACK" {
		select {
		case m := <-acks:
			seq, err := ackSubjectSeq(m.Subject)
			require.NoError(t, err)
			if seq == res.Seq {
				said = append(said, string(m.Data))
			}
		case <-deadline:
			t.Fatalf("the event was not acked: %v", said)
		}
	}
	require.GreaterOrEqual(t, len(said), 3, "two in-progress acks or more during the 6s attempt: %v", said)
	for _, k := range said[:len(said)-1] {
		require.Equal(t, "+WPI", k, "%v", said)
	}
	require.Equal(t, 1, s.received())
}

// ackSubjectSeq reads the stream sequence from an ack subject:
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>..., or with a domain
// and account hash after ACK.
func ackSubjectSeq(subject string) (uint64, error) {
	tok := strings.Split(subject, ".")
	i := 5
	if len(tok) > 9 {
		i = 7
	}
	if i >= len(tok) {
		return 0, fmt.Errorf("not an ack subject: %s", subject)
	}
	return strconv.ParseUint(tok[i], 10, 64)
}

// TestStoppingRelayHandsItsBufferBack: the events relay was handed but had
// not begun to attempt when it stops go back to JetStream at once (a nak),
// not after their AckWait, so another replica delivers them without a
// wait; the attempts in flight finish.
func TestStoppingRelayHandsItsBufferBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, arrived, release := gatedSink(t, 2)
	// AckWait 30s: longer than the test waits.
	e.addDest(destination.Destination{Name: "hb", URL: s.URL, Concurrency: 2, Timeout: destination.Duration(30 * time.Second)})
	acks := e.watchAcks("hb")

	_, stopA := e.startRelay()
	for range 12 {
		e.publish("hb", "", `{}`)
	}
	// Two attempts held by the sink, and more events handed to relay.
	eventually(t, 10*time.Second, func() bool { return e.ackPending("hb") > 2 && arrived.Load() == 2 },
		"two attempts in flight and more events handed out")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stopA()
	}()
	// The stop hands events back while the two attempts are still held.
	select {
	case m := <-acks:
		require.True(t, strings.HasPrefix(string(m.Data), "-NAK"), "%s: %s", m.Subject, m.Data)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing handed back")
	}
	release()
	<-stopped

	// Well within AckWait, another relay delivers the rest.
	e.startRelay()
	eventually(t, 20*time.Second, func() bool { return len(s.delivered()) == 12 }, "12 delivered, %d so far", len(s.delivered()))
	for id, n := range s.delivered() {
		require.Equal(t, 1, n, "event %s", id)
	}
}

// TestBurstLargerThanTheConcurrencyIsTakenInAtOnce: relay holds four
// rounds of attempts of an unordered destination's events (the
// concurrency's worth being attempted and three queued), so a burst larger
// than its concurrency arrives at once rather than a round at a time; the
// queued ones are delivered once each when workers are free.
func TestBurstLargerThanTheConcurrencyIsTakenInAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, arrived, release := gatedSink(t, 0)
	e.addDest(destination.Destination{Name: "burst", URL: s.URL, Concurrency: 2})
	e.startRelay()
	for range 8 {
		e.publish("burst", "", `{}`)
	}
	eventually(t, 10*time.Second, func() bool { return e.ackPending("burst") == 8 && arrived.Load() == 2 },
		"two attempts held by the sink and all eight events handed to relay (ack pending %d)", e.ackPending("burst"))
	release()
	eventually(t, 20*time.Second, func() bool { return len(s.delivered()) == 8 && e.settled("burst") },
		"8 delivered, %d so far", len(s.delivered()))
	for id, n := range s.delivered() {
		require.Equal(t, 1, n, "event %s", id)
	}
}

// TestLargeEventsAreQueuedWithinAByteBudget: beyond a round of attempts,
// relay queues about 8 MiB of events, by their average size, not four
// rounds of whatever size they are.
func TestLargeEventsAreQueuedWithinAByteBudget(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, arrived, release := gatedSink(t, 0)
	e.addDest(destination.Destination{Name: "large", URL: s.URL, Concurrency: 4})
	e.startRelay()
	const size = 900 << 10
	body := `{"p":"` + strings.Repeat("x", size-8) + `"}`
	require.Len(t, body, size)
	for range 20 {
		e.publish("large", "", body)
	}
	// Four attempts held by the sink, and 9 more (8 MiB / 900 KiB) queued,
	// not the 12 of three more rounds.
	want := 4 + (8<<20)/size
	eventually(t, 20*time.Second, func() bool { return e.ackPending("large") == want && arrived.Load() == 4 },
		"four attempts held and %d events handed to relay (ack pending %d)", want, e.ackPending("large"))
	release()
	eventually(t, 30*time.Second, func() bool { return len(s.delivered()) == 20 && e.settled("large") },
		"20 delivered, %d so far", len(s.delivered()))
	for id, n := range s.delivered() {
		require.Equal(t, 1, n, "event %s", id)
	}
}

// TestEventWithAStatusHeaderAndNoBodyIsDelivered: an event published with
// an empty body and a header named Status looks like a status message of
// the pull protocol to nats.go (v1.55.0), which swallowed it, again after
// every AckWait. relay tells them apart by the ack subject.
func TestEventWithAStatusHeaderAndNoBodyIsDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "st", URL: s.URL})
	e.startRelay()
	m := nats.NewMsg(stream.DestFilters("st")[0])
	m.Header.Set("Status", "404")
	m.Header.Set("Description", "No Messages")
	m.Header.Set(stream.HdrEventID, "evt_status")
	_, err := e.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	// Well within its AckWait (30s).
	eventually(t, 10*time.Second, func() bool { return s.delivered()["evt_status"] == 1 && e.settled("st") },
		"the event delivered and acked")
	require.Empty(t, s.all()[0].Body)
}

// TestUnknownDestinationCheckReadsPastAnEventWithAStatusHeader: with more
// unknown destinations than it looks up from the list of subjects, the
// check reads every event. An event with an empty body and a header named
// Status, which nats.go's ordered consumer took for a pull status and never
// got past, is dead-lettered like the others, and so is the one after it.
func TestUnknownDestinationCheckReadsPastAnEventWithAStatusHeader(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "known", URL: s.URL})
	e.startRelay()
	publish := func(dest, id, body string, status bool) {
		m := nats.NewMsg(stream.DestFilters(dest)[0])
		if status {
			m.Header.Set("Status", "404")
			m.Header.Set("Description", "No Messages")
		}
		m.Header.Set(stream.HdrMsgID, id)
		m.Data = []byte(body)
		_, err := e.js.PublishMsg(context.Background(), m)
		require.NoError(t, err)
	}
	want := map[string]bool{}
	for i := range 10 {
		id := fmt.Sprintf("g%d", i)
		publish(fmt.Sprintf("ghost%d", i), id, "{}", false)
		want[id] = true
	}
	publish("ghost0", "odd", "", true)
	publish("ghost1", "after", "{}", false)
	publish("known", "k", "{}", false)
	want["odd"], want["after"] = true, true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	letters, err := dlq.Open(ctx, e.js)
	require.NoError(t, err)
	got := map[string]bool{}
	eventually(t, 20*time.Second, func() bool {
		ls, err := letters.List(ctx, dlq.Filter{}, 0)
		require.NoError(t, err)
		clear(got)
		for _, l := range ls {
			got[l.EventID] = true
		}
		return len(got) == len(want)
	}, "12 dead letters")
	require.Equal(t, want, got)
	require.Equal(t, map[string]int{"k": 1}, s.delivered())
}

// gatedSink is a sink that holds the first held requests (all when held is
// 0) until release is called (at the latest when the test ends), and
// counts the requests that arrived.
func gatedSink(t *testing.T, held int32) (s *sink, arrived *atomic.Int32, release func()) {
	t.Helper()
	gate := make(chan struct{})
	arrived = new(atomic.Int32)
	s = newSink(t, func(h hit, w http.ResponseWriter) int {
		if n := arrived.Add(1); held == 0 || n <= held {
			<-gate
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return s, arrived, release
}

// watchAcks returns what relay tells JetStream of dest's events (acks,
// naks, in-progress), as the server receives it.
func (e *env) watchAcks(dest string) <-chan *nats.Msg {
	e.t.Helper()
	acks := make(chan *nats.Msg, 256)
	sub, err := e.nc.ChanSubscribe("$JS.ACK."+stream.EventsStream+"."+destination.ConsumerName(dest)+".>", acks)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(e.t, e.nc.Flush())
	return acks
}

// ackPending returns how many of dest's events JetStream has handed out
// and not had settled, or -1 if it cannot tell.
func (e *env) ackPending(dest string) int {
	cons, err := e.js.Consumer(context.Background(), stream.EventsStream, destination.ConsumerName(dest))
	if err != nil {
		return -1
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		return -1
	}
	return info.NumAckPending
}

// countAcks counts what relay tells JetStream of dest's events (+ACK,
// -NAK..., +WPI, +TERM...) for which count says yes, as the server
// receives it.
func (e *env) countAcks(dest string, count func(kind string) bool) *atomic.Int64 {
	e.t.Helper()
	var n atomic.Int64
	sub, err := e.nc.Subscribe("$JS.ACK."+stream.EventsStream+"."+destination.ConsumerName(dest)+".>", func(m *nats.Msg) {
		if count(string(m.Data)) {
			n.Add(1)
		}
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(e.t, e.nc.Flush())
	return &n
}

// TestMaxInFlightBoundsAllDestinationsTogether: a replica makes at most
// MaxInFlight attempts at once, whatever the number of destinations and
// their concurrency, shared or with consumers of their own; when places
// free up, the waiting events are delivered, each once.
func TestMaxInFlightBoundsAllDestinationsTogether(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, arrived, release := gatedSink(t, 0)
	names := []string{"own1", "own2", "own3", "shared1"}
	for _, n := range names {
		e.addDest(destination.Destination{Name: n, URL: s.URL, Concurrency: 4, Shared: n == "shared1"})
	}
	e.startRelay(func(c *relay.Config) { c.MaxInFlight = 5 })
	const per = 6
	for range per {
		for _, n := range names {
			e.publish(n, "", `{}`)
		}
	}
	// 16 could be attempted by the destinations' concurrency; 5 are.
	eventually(t, 20*time.Second, func() bool { return arrived.Load() == 5 }, "five attempts held by the sink, %d so far", arrived.Load())
	// Every event has reached relay (queued behind the five), and none
	// more has reached the sink.
	eventually(t, 20*time.Second, func() bool {
		n := 0
		for _, d := range names[:3] {
			n += e.ackPending(d)
		}
		return n == 3*per
	}, "the events of the destinations with consumers of their own handed to relay")
	require.Equal(t, int32(5), arrived.Load(), "still five attempts in flight")
	release()
	eventually(t, 30*time.Second, func() bool { return len(s.delivered()) == len(names)*per }, "all delivered, %d so far", len(s.delivered()))
	for id, n := range s.delivered() {
		require.Equal(t, 1, n, "event %s", id)
	}
}

// TestQueuesShareTheReplicasRoom: beyond its first round of attempts, a
// destination's queue takes an equal share of 3 x MaxInFlight events, so
// what a replica holds stays bounded however many destinations it serves.
// Three destinations of concurrency 4 under MaxInFlight 4 hold 4 + 4 each
// (3 x 4 / 3 queued beyond the first round), not 4 + 12.
func TestQueuesShareTheReplicasRoom(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, arrived, release := gatedSink(t, 0)
	names := []string{"q1", "q2", "q3"}
	for _, n := range names {
		e.addDest(destination.Destination{Name: n, URL: s.URL, Concurrency: 4})
	}
	e.startRelay(func(c *relay.Config) { c.MaxInFlight = 4 })
	// Every destination's pull loop runs (it asks for events) before any
	// event comes: the first to come would otherwise take a larger share.
	eventually(t, 20*time.Second, func() bool {
		for _, n := range names {
			if c := e.consumerInfo(destination.ConsumerName(n)); c == nil || c.NumWaiting == 0 {
				return false
			}
		}
		return true
	}, "every destination asking for events")
	const per = 20
	for range per {
		for _, n := range names {
			e.publish(n, "", `{}`)
		}
	}
	held := func() []int {
		var out []int
		for _, n := range names {
			out = append(out, e.ackPending(n))
		}
		return out
	}
	eventually(t, 20*time.Second, func() bool {
		return arrived.Load() == 4 && slices.Equal(held(), []int{8, 8, 8})
	}, "8 events held per destination (%v), 4 attempts at the sink (%d)", held(), arrived.Load())
	release()
	eventually(t, 30*time.Second, func() bool { return len(s.delivered()) == len(names)*per }, "all delivered, %d so far", len(s.delivered()))
	for id, n := range s.delivered() {
		require.Equal(t, 1, n, "event %s", id)
	}
}
