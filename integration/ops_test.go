package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
)

func TestMetricsCountWhatHappened(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		switch {
		case strings.Contains(h.Body, "missing"):
			w.WriteHeader(http.StatusNotFound)
			return http.StatusNotFound
		case strings.Contains(h.Body, "flaky") && h.N == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "m", URL: s.URL, Retry: fast(5)})
	reg := prometheus.NewRegistry()
	m := relay.NewMetrics(reg)
	reg.MustRegister(relay.NewStateCollector(e.js, nil))
	rec, _ := e.startRelay(func(c *relay.Config) { c.Metrics = m })
	e.publish("m", "", `{"ok":1}`)
	e.publish("m", "", `{"flaky":1}`)
	e.publish("m", "", `{"missing":1}`)
	eventually(t, 10*time.Second, func() bool {
		return rec.count(func(o relay.Outcome) bool { return o.Decision.Action != relay.Retry }) == 3 && e.settled("m")
	}, "all done")
	lagZero := `
# HELP relay_unknown_destination_check_lag Events published for a destination that the check for unknown destinations has not gone through yet (it grows while no replica runs the check, or while the check is stuck).
# TYPE relay_unknown_destination_check_lag gauge
relay_unknown_destination_check_lag 0
`
	eventually(t, 10*time.Second, func() bool {
		return testutil.GatherAndCompare(reg, strings.NewReader(lagZero), "relay_unknown_destination_check_lag") == nil
	}, "the unknown-destination check's lag exported, and 0 once it caught up")

	expect := `
# HELP relay_deliveries_total Attempts by outcome: delivered, retried, dead_lettered, or blocked (an ordered key's head retried).
# TYPE relay_deliveries_total counter
relay_deliveries_total{dest="m",outcome="dead_lettered"} 1
relay_deliveries_total{dest="m",outcome="delivered"} 2
relay_deliveries_total{dest="m",outcome="retried"} 1
# HELP relay_http_responses_total Attempts by HTTP status class (2xx..5xx), or error when no response came back, or blocked; url is the index of the URL in the destination's pool (0 without a pool).
# TYPE relay_http_responses_total counter
relay_http_responses_total{class="2xx",dest="m",url="0"} 2
relay_http_responses_total{class="4xx",dest="m",url="0"} 1
relay_http_responses_total{class="5xx",dest="m",url="0"} 1
# HELP relay_dead_letters Dead letters kept.
# TYPE relay_dead_letters gauge
relay_dead_letters{dest="m"} 1
# HELP relay_backlog Events not yet handed to a relay.
# TYPE relay_backlog gauge
relay_backlog{dest="m"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expect),
		"relay_deliveries_total", "relay_http_responses_total", "relay_dead_letters", "relay_backlog"))
	// Attempt numbers of the two deliveries: 1 and 2.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "relay_delivery_attempts" {
			h := mf.GetMetric()[0].GetHistogram()
			require.Equal(t, uint64(2), h.GetSampleCount())
			require.Equal(t, 3.0, h.GetSampleSum())
			require.Equal(t, uint64(1), h.GetBucket()[0].GetCumulativeCount(), "one first-attempt success")
		}
	}
}

func TestReadyzFollowsNATSAndRedis(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{AppendOnly: true})
	sched := schedule.NewStore(r.Client())
	srv := httptest.NewServer(relay.OpsHandler(prometheus.NewRegistry(), func(ctx context.Context) error {
		return relay.Ready(ctx, e.nc, e.js, sched)
	}, false))
	t.Cleanup(srv.Close)
	status := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, status("/readyz"))
	require.Equal(t, 200, status("/healthz"))
	r.Kill()
	require.Equal(t, 503, status("/readyz"), "Redis gone")
	require.Equal(t, 200, status("/healthz"), "the process is alive")
	r.Restart()
	eventually(t, 10*time.Second, func() bool { return status("/readyz") == 200 }, "ready again with Redis back")

	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	eventually(t, 10*time.Second, func() bool { return status("/readyz") == 503 }, "not ready without NATS")
	e.restartNATS()
	eventually(t, 20*time.Second, func() bool { return status("/readyz") == 200 }, "ready again once NATS is back and the client reconnected")
}

// A destination down for 60 seconds with 1,000 events queued: the circuit
// opens, attempts stop, nothing is dead-lettered for the outage, and all are
// delivered once it is back.
func TestCircuitBreakerRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var down atomic.Bool
	down.Store(true)
	var duringOutage atomic.Int64
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if down.Load() {
			duringOutage.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	// Without the breaker, 40 attempts 100ms-1s apart would dead-letter
	// every event within 45s. With it, an event uses up an attempt only when
	// it is a probe, once per 2s pause: 40 attempts outlast the 60s outage
	// even if one event were every probe.
	e.addDest(destination.Destination{Name: "down", URL: s.URL, BreakerThreshold: 10, BreakerPause: destination.Duration(2 * time.Second),
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(time.Second), MaxAttempts: 40}})
	const n = 1000
	for range n {
		e.publish("down", "", `{}`)
	}
	rec, _ := e.startRelay()
	e.waitOpEvent(opevent.BreakerOpened) // the circuit opens
	outage := time.NewTimer(60 * time.Second)
	<-outage.C
	down.Store(false)
	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) == n && e.settled("down") }, "all delivered after the outage")
	require.Empty(t, e.deadLetters("down"), "nothing dead-lettered because of the outage")
	require.Less(t, duringOutage.Load(), int64(300), "attempts stopped while the circuit was open (%d requests in 60s)", duringOutage.Load())
	require.Zero(t, rec.count(func(o relay.Outcome) bool { return o.Decision.Action == relay.DeadLetter }))
	d, err := e.store.Get(context.Background(), "down")
	require.NoError(t, err)
	require.Empty(t, d.PauseReason, "the circuit closed")
}

func TestRateLimitHoldsAndSparesOthers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	limited := newSink(t, nil)
	free := newSink(t, nil)
	e.addDest(destination.Destination{Name: "slow", URL: limited.URL, RateLimit: 50, Concurrency: 16})
	e.addDest(destination.Destination{Name: "fast", URL: free.URL, Concurrency: 16})
	// A backlog of 20 seconds at the limit: the other destination's 500
	// events, published after it, are delivered long before it drains.
	// Both are published before relay starts, so that a loaded machine's
	// slow publishing does not eat into the limited one's 20 seconds.
	const slow = 1000
	for range slow {
		e.publish("slow", "", `{}`)
	}
	for range 500 {
		e.publish("fast", "", `{}`)
	}
	e.startRelay()
	eventually(t, 20*time.Second, func() bool { return len(free.delivered()) == 500 }, "the other destination is not held back")
	require.Less(t, len(limited.delivered()), slow, "the limited one is still going when the other is done")
	eventually(t, time.Minute, func() bool { return len(limited.delivered()) == slow }, "limited deliveries done")
	var at []time.Time
	for _, h := range limited.all() {
		at = append(at, h.At)
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	most := 0
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	// The limiter allows one request every 20ms (a burst of one), so the
	// 1000 requests take at least 19.98s from the first to the last: on
	// average never over the limit, however the machine schedules them. A
	// request delayed on a busy machine arrives with the next ones, so the
	// busiest second seen by the receiver may hold a few more than 50, but
	// no burst.
	span := at[len(at)-1].Sub(at[0])
	require.GreaterOrEqual(t, span, 19*time.Second, "%d requests at 50/s: the limit holds on average", slow)
	require.LessOrEqual(t, most, 75, "no burst: at most 1.5 times the limit in any one-second window")
	require.GreaterOrEqual(t, most, 40, "and not far below the limit")
}

func TestPauseResumeAndStatsJSON(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "op", URL: s.URL})
	e.startRelay()
	cli := func(args ...string) string {
		p := startProc(t, append([]string{"--nats-url", e.url}, args...)...)
		<-p.exited
		require.NoError(t, p.err, p.output())
		return p.stdout()
	}
	stats := func() relay.DestStats {
		var st relay.DestStats
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(cli("stats", "--dest", "op", "--json"))), &st))
		return st
	}
	a := e.publish("op", "", `{}`)
	eventually(t, 10*time.Second, func() bool { return s.delivered()[a.ID] == 1 }, "delivered while active")
	require.Equal(t, destination.StateActive, stats().State)

	require.Contains(t, cli("dest", "pause", "op"), "paused destination op")
	for range 5 {
		e.publish("op", "", `{}`)
	}
	st := stats()
	require.Equal(t, destination.PauseOperator, st.State)
	require.Equal(t, uint64(5), st.Backlog, "nothing is handed out while paused")
	require.Equal(t, 1, len(s.delivered()))

	require.Contains(t, cli("dest", "resume", "op"), "resumed destination op")
	eventually(t, 10*time.Second, func() bool { return len(s.delivered()) == 6 }, "delivered after resume")
	require.Equal(t, destination.StateActive, stats().State)
}

func TestStatsWatchRepeatsUntilInterrupted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.addDest(destination.Destination{Name: "w", URL: "https://example.test/hook"})
	p := startProc(t, "--nats-url", e.url, "stats", "--watch", "200ms", "--json")
	// Let it print a few rounds (every 200ms), then interrupt it as an
	// operator would.
	eventually(t, time.Minute, func() bool { return strings.Count(p.out.String(), "\n") >= 3 }, "three rounds printed")
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	<-p.exited
	require.NoError(t, p.err, "exit 0 when interrupted")
	lines := strings.Split(strings.TrimSpace(p.stdout()), "\n")
	require.GreaterOrEqual(t, len(lines), 2, "printed again and again: %q", lines)
	for _, l := range lines {
		var st relay.DestStats
		require.NoError(t, json.Unmarshal([]byte(l), &st))
		require.Equal(t, "w", st.Dest)
	}
}

// One attempt in ten fails, spread out (never more than a few in a row),
// with 64 attempts in flight: the breaker, which opens after 20 failures
// without a success in between, must not open. (It did open, 2 times in 15
// runs of relay-bench -scenarios c, when failures were counted only after
// their history had been written; this test did not reproduce that: 10 of
// 10 passed with the old order. It checks the breaker's counting under
// concurrency, not that ordering.)
func TestSpreadFailuresDoNotOpenTheCircuit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 && fnv32(h.ID)%10 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "spread", URL: s.URL, Concurrency: 64, Retry: fast(5)})
	rec, _ := e.startRelay()
	const n = 5000
	for i := range n {
		e.publish("spread", "", fmt.Sprintf(`{"n":%d}`, i))
	}
	eventually(t, 120*time.Second, func() bool { return len(s.delivered()) == n }, "all %d delivered (%d so far)", n, len(s.delivered()))
	retried := rec.count(func(o relay.Outcome) bool { return o.Decision.Action == relay.Retry })
	require.Greater(t, retried, n/20, "some attempts failed")
	d, err := e.store.Get(context.Background(), "spread")
	require.NoError(t, err)
	require.Zero(t, d.BreakerTrips, "the circuit never opened")
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// TestRateLimitFarBelowConcurrencyDeliversOnce: with a rate limit so low
// that workers would wait for it longer than the events' AckWait (16
// workers at 2 per second: up to 8s; AckWait 2 × 1s + 5s), events are not
// handed out a second time while they wait: each is delivered once, at the
// limit.
func TestRateLimitFarBelowConcurrencyDeliversOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "trickle", URL: s.URL, RateLimit: 2, Concurrency: 16, Timeout: destination.Duration(time.Second)})
	// relay's answers to JetStream for each copy of an event it was
	// handed: an ack, a nak or a term settles the copy.
	settled := e.countAcks("trickle", func(kind string) bool { return kind != "+WPI" })
	e.startRelay()
	const n = 24
	for range n {
		e.publish("trickle", "", `{}`)
	}
	// relay makes the destination's consumer once it runs: wait for it.
	var cons jetstream.Consumer
	eventually(t, 10*time.Second, func() bool {
		var err error
		cons, err = e.js.Consumer(context.Background(), stream.EventsStream, destination.ConsumerName("trickle"))
		return err == nil
	}, "relay made the destination's consumer")
	// Until relay has settled every copy JetStream handed it: a second
	// copy of an event held past its AckWait would be attempted first.
	// (The consumer's ack pending count does not tell: the first copy's
	// ack settles the event, and relay may still hold the second.)
	var info *jetstream.ConsumerInfo
	var err error
	eventually(t, 60*time.Second, func() bool {
		info, err = cons.Info(context.Background())
		return err == nil && len(s.delivered()) == n && info.NumPending == 0 && info.NumAckPending == 0 &&
			settled.Load() == int64(info.Delivered.Consumer)
	}, "all delivered, and every copy settled (%d of %d delivered)", len(s.delivered()), n)
	for id, k := range s.delivered() {
		require.Equal(t, 1, k, "event %s delivered %d times", id, k)
	}
	require.Len(t, s.all(), n, "one request per event")
	t.Logf("JetStream handed out %d copies of %d events", info.Delivered.Consumer, n)
}

// TestRateLimitedBacklogComesBackInTurn: events handed back to JetStream
// because a destination's rate limit does not allow them yet come back in
// turn, about as fast as the limit lets them through, so each is handed
// back about once instead of again and again while it waits.
func TestRateLimitedBacklogComesBackInTurn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "slowlane", URL: s.URL, RateLimit: 5, Concurrency: 16, Timeout: destination.Duration(time.Second)})
	naks := e.countAcks("slowlane", func(kind string) bool { return strings.HasPrefix(kind, "-NAK") })
	const n = 150
	for range n {
		e.publish("slowlane", "", `{}`)
	}
	began := time.Now()
	e.startRelay()
	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) >= 50 }, "50 delivered")
	// Counted before the time is taken: deliveries made while this
	// goroutine waits for the CPU on a loaded machine are within took.
	delivered, handedBack := len(s.delivered()), naks.Load()
	took := time.Since(began)
	t.Logf("%d delivered in %s; %d events handed back", delivered, took, handedBack)
	// Handed back for the next free slot, all of them came back every few
	// seconds: 486 hand-backs by now. In turn, each about once (144).
	require.Less(t, handedBack, int64(2*n), "hand-backs for %d events", n)
	require.Greater(t, handedBack, int64(n/2), "the hand-backs were seen")
	// The limit holds.
	require.LessOrEqual(t, float64(delivered), 5*took.Seconds()+2, "deliveries in %s", took)

	// Without the limit, the rest goes out as their turns come (the last
	// about 30s after the start), each event once.
	_, err := e.store.Update(context.Background(), "slowlane", func(d *destination.Destination) error {
		d.RateLimit = 0
		return nil
	})
	require.NoError(t, err)
	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) == n }, "all %d delivered", n)
	for id, k := range s.delivered() {
		require.Equal(t, 1, k, "event %s", id)
	}
}
