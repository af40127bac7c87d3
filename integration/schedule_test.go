package integration

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
)

// withSchedule parks waits of 500ms or more in the Redis of r and runs a
// promoter next to the relay.
func (e *env) withSchedule(r *redistest.Server) (*schedule.Store, func(*relay.Config)) {
	st := schedule.NewStore(r.Client())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := schedule.Promoter{Store: st, JS: e.js, Interval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		_ = p.Run(ctx)
	}()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	return st, func(c *relay.Config) {
		c.Schedule = st
		c.ParkThreshold = 500 * time.Millisecond
	}
}

func failing(n int) func(h hit, w http.ResponseWriter) int {
	return func(h hit, w http.ResponseWriter) int {
		if h.N <= n {
			w.WriteHeader(http.StatusBadGateway)
			return http.StatusBadGateway
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	}
}

// Waits of at least the park threshold leave JetStream for Redis, come back
// when due, and keep counting attempts across the trip.
func TestLongWaitIsParkedInRedisAndComesBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{})
	st, withRedis := e.withSchedule(r)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			// Hold the second attempt back until the test has looked at Redis.
			w.WriteHeader(http.StatusBadGateway)
			return http.StatusBadGateway
		}
		if h.N == 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "park", URL: s.URL, Retry: destination.RetryPolicy{
		Base: destination.Duration(1500 * time.Millisecond), Max: destination.Duration(10 * time.Second), NoJitter: true, MaxAttempts: 5}})
	rec, _ := e.startRelay(withRedis)
	res := e.publish("park", "cust-1", `{"p":1}`)

	// After the first failure the event waits in Redis, not in JetStream.
	eventually(t, 10*time.Second, func() bool {
		ps, err := st.Stats(context.Background(), "park")
		return err == nil && ps.Parked == 1 && e.settled("park")
	}, "the event parked in Redis with nothing pending in JetStream")
	// The outcome is reported once the park is acked: moments after
	// JetStream shows it settled.
	rec.wait(t, 1, func(o relay.Outcome) bool { return o.Parked && o.Attempt == 1 }, "attempt 1's outcome: parked")

	eventually(t, 20*time.Second, func() bool { return s.delivered()[res.ID] == 1 }, "delivery after two parked waits")
	hits := s.all()
	require.Len(t, hits, 3)
	for _, h := range hits {
		require.Equal(t, res.ID, h.ID)
		require.Equal(t, `{"p":1}`, h.Body)
	}
	require.GreaterOrEqual(t, hits[1].At.Sub(hits[0].At), 1500*time.Millisecond)
	require.GreaterOrEqual(t, hits[2].At.Sub(hits[1].At), 3000*time.Millisecond)
	rec.wait(t, 1, func(o relay.Outcome) bool { return o.Attempt == 3 && o.Decision.Action == relay.Ack },
		"attempts keep counting across the trips through Redis: delivered on attempt 3")
	eventually(t, 5*time.Second, func() bool {
		ps, err := st.Stats(context.Background(), "park")
		return err == nil && ps.Parked == 0 && e.settled("park")
	}, "nothing left parked or pending")
}

func TestParkedEventsSurviveARedisRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{AppendOnly: true})
	st, withRedis := e.withSchedule(r)
	s := newSink(t, failing(1))
	e.addDest(destination.Destination{Name: "aof", URL: s.URL, BreakerThreshold: -1, Retry: destination.RetryPolicy{
		Base: destination.Duration(3 * time.Second), Max: destination.Duration(10 * time.Second), NoJitter: true, MaxAttempts: 5}})
	e.startRelay(withRedis)
	const n = 50
	for range n {
		e.publish("aof", "", `{}`)
	}
	eventually(t, 10*time.Second, func() bool {
		ps, err := st.Stats(context.Background(), "aof")
		return err == nil && ps.Parked == n
	}, "all parked")
	r.Kill() // SIGKILL: only what the append-only file has survives
	r.Restart()
	eventually(t, 30*time.Second, func() bool { return len(s.delivered()) == n && e.settled("aof") }, "all delivered after the restart")
	for id, c := range s.delivered() {
		require.Equal(t, 1, c, "event %s delivered %d times", id, c)
	}
}

func TestUnreachableRedisFallsBackToJetStream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	dead := schedule.NewStore(redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond}))

	s := newSink(t, failing(1))
	e.addDest(destination.Destination{Name: "noredis", URL: s.URL, Retry: destination.RetryPolicy{
		Base: destination.Duration(time.Second), Max: destination.Duration(10 * time.Second), NoJitter: true, MaxAttempts: 5}})
	rec, _ := e.startRelay(func(c *relay.Config) { c.Schedule = dead; c.ParkThreshold = 500 * time.Millisecond })
	res := e.publish("noredis", "", `{}`)
	eventually(t, 15*time.Second, func() bool { return s.delivered()[res.ID] == 1 && e.settled("noredis") }, "delivered without Redis")
	rec.wait(t, 1, func(o relay.Outcome) bool { return o.Decision.Action == relay.Retry && !o.Parked }, "the wait stayed in JetStream")
}

// Promoters killed with SIGKILL at the two dangerous points lose nothing and
// deliver nothing twice.
func TestPromoterKilledMidPromotion(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"promote-after-claim", "promote-after-publish"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			r := redistest.Start(t, redistest.Options{AppendOnly: true})
			// The first attempt fails and parks the event. Later attempts are
			// answered after 300ms, so one the killed relay may have started
			// right after its promoter's publish is never accepted.
			s := newSink(t, func(h hit, w http.ResponseWriter) int {
				if h.N == 1 {
					w.WriteHeader(http.StatusBadGateway)
					return http.StatusBadGateway
				}
				select {
				case <-h.Ctx.Done():
					return 0
				case <-time.After(300 * time.Millisecond):
				}
				w.WriteHeader(http.StatusOK)
				return http.StatusOK
			})
			// AckWait 7s (--ack-wait): what the killed relay had already
			// pulled comes back quickly.
			e.addDest(destination.Destination{Name: "fp", URL: s.URL, Timeout: destination.Duration(time.Second), Retry: destination.RetryPolicy{
				Base: destination.Duration(time.Second), Max: destination.Duration(10 * time.Second), NoJitter: true, MaxAttempts: 5}})
			args := []string{"--nats-url", e.url, "run", "--redis-url", r.URL(), "--park-threshold", "500ms", "--park-lease", "2s", "--ack-wait", "7s"}

			p1 := startProcEnv(t, []string{"RELAY_FAILPOINT=" + point}, args...)
			res := e.publish("fp", "", `{"fp":1}`)
			select {
			case <-p1.exited:
			case <-time.After(20 * time.Second):
				t.Fatal("the failpoint never fired")
			}
			require.Error(t, p1.err, "killed by the failpoint")
			ws, ok := p1.cmd.ProcessState.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "died of SIGKILL: %v", p1.cmd.ProcessState)
			require.True(t, p1.logged("parked=true"), p1.output())

			st := schedule.NewStore(r.Client())
			startProc(t, args...)
			eventually(t, 30*time.Second, func() bool {
				ps, err := st.Stats(context.Background(), "fp")
				return err == nil && ps.Parked == 0 && s.delivered()[res.ID] == 1 && e.settled("fp")
			}, "delivered, nothing left parked")
			// The log holds the original and one republished copy per park:
			// the second promoter's republish of the same park was dropped as
			// a duplicate, or was the only one. (On a loaded machine a later
			// attempt can time out and park the event again: another copy,
			// with another dedup id.)
			n := e.eventsStored()
			require.GreaterOrEqual(t, n, uint64(2))
			ids := map[string]bool{}
			for seq := uint64(1); seq <= n; seq++ {
				m, err := stream.GetMsg(context.Background(), e.js, stream.EventsStream, seq, "")
				require.NoError(t, err)
				id := m.Header.Get(stream.HdrMsgID)
				require.False(t, ids[id], "a republish of the same park stored twice: %s", id)
				ids[id] = true
			}
			require.Equal(t, 1, s.delivered()[res.ID], "delivered once")
		})
	}
}

func TestStatsShowBacklogParkedAndDeadLetters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{})
	st, withRedis := e.withSchedule(r)
	bad := newSink(t, func(h hit, w http.ResponseWriter) int { w.WriteHeader(http.StatusNotFound); return http.StatusNotFound })
	slow := newSink(t, failing(1))
	ok := newSink(t, nil)
	e.addDest(destination.Destination{Name: "dead", URL: bad.URL})
	e.addDest(destination.Destination{Name: "parked", URL: slow.URL, Retry: destination.RetryPolicy{Base: destination.Duration(time.Hour), MaxAttempts: 3}})
	e.addDest(destination.Destination{Name: "backlog", URL: ok.URL})
	_, stop := e.startRelay(withRedis)
	e.publish("dead", "", `{}`)
	e.publish("parked", "", `{}`)
	eventually(t, 10*time.Second, func() bool {
		ps, err := st.Stats(context.Background(), "parked")
		return err == nil && ps.Parked == 1 && len(e.deadLetters("dead")) == 1
	}, "one parked, one dead")
	stop()
	for range 5 {
		e.publish("backlog", "", `{}`)
	}
	all, err := relay.Stats(context.Background(), e.js, st)
	require.NoError(t, err)
	got := map[string]relay.DestStats{}
	for _, s := range all {
		got[s.Dest] = s
	}
	require.Equal(t, uint64(5), got["backlog"].Backlog)
	require.Equal(t, uint64(1), got["dead"].DeadLetters)
	require.Zero(t, got["dead"].Backlog+uint64(got["dead"].InFlight))
	require.Equal(t, int64(1), got["parked"].Parked)
	require.Zero(t, got["parked"].InFlight, "a parked event holds nothing in JetStream")
	require.WithinDuration(t, time.Now().Add(time.Hour), got["parked"].OldestDue, 15*time.Minute)
}

// Events of ordered keys never leave JetStream: a parked head would be
// acknowledged and the next event of its key would overtake it.
func TestOrderedKeysAreNotParked(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{})
	st, withRedis := e.withSchedule(r)
	s := newSink(t, failing(2))
	e.addDest(destination.Destination{Name: "ordpark", URL: s.URL, Ordered: true, Partitions: 1,
		Retry: destination.RetryPolicy{Base: destination.Duration(600 * time.Millisecond), Max: destination.Duration(time.Second), NoJitter: true, MaxAttempts: 5}})
	rec, _ := e.startRelay(withRedis) // parks waits of 500ms or more
	head := e.publish("ordpark", "k", `{"n":0}`)
	next := e.publish("ordpark", "k", `{"n":1}`)
	unkeyed := e.publish("ordpark", "", `{"n":2}`)
	eventually(t, 15*time.Second, func() bool {
		d := s.delivered()
		return d[head.ID] == 1 && d[next.ID] == 1 && d[unkeyed.ID] == 1
	}, "all delivered")
	require.Zero(t, rec.count(func(o relay.Outcome) bool { return o.Parked && o.EventID != unkeyed.ID }), "no keyed event was parked")
	require.Positive(t, rec.count(func(o relay.Outcome) bool { return o.Parked && o.EventID == unkeyed.ID }), "the unkeyed event of the same destination was")
	var order []string
	for _, h := range s.all() {
		if h.Status == http.StatusOK && h.ID != unkeyed.ID {
			order = append(order, h.ID)
		}
	}
	require.Equal(t, []string{head.ID, next.ID}, order)
	ps, err := st.Stats(context.Background(), "ordpark")
	require.NoError(t, err)
	require.Zero(t, ps.Parked)
}

// relay run with --redis-replicas more than the primary has starts, says
// that long waits stay in JetStream until replicas connect, and does so:
// an event whose retry wait is long is not parked while no replica
// confirms. A replica wait not shorter than the connection's read timeout
// is refused at start, with which settings to change.
func TestRunWithTooFewRedisReplicas(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{})
	s := newSink(t, failing(1))
	e.addDest(destination.Destination{Name: "fewrep", URL: s.URL, Retry: destination.RetryPolicy{
		Base: destination.Duration(time.Second), Max: destination.Duration(time.Second), NoJitter: true, MaxAttempts: 3}})

	code, out := e.relayCLI("run", "--redis-url", r.URL()+"?read_timeout=200ms", "--redis-replicas", "1", "--redis-replica-wait", "500ms")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "--redis-replica-wait, or read_timeout in --redis-url", out)

	p := faultRun(t, e.url, "--redis-url", r.URL(), "--redis-replicas", "1", "--park-threshold", "500ms")
	require.True(t, p.logged("the Redis primary has fewer replicas than --redis-replicas"), p.output())
	require.True(t, p.logged("connected=0"), p.output())
	res := e.publish("fewrep", "", `{}`)
	eventually(t, 20*time.Second, func() bool { return s.delivered()[res.ID] == 1 && e.settled("fewrep") },
		"delivered on its second attempt, after a wait in JetStream")
	require.Equal(t, 1, metricValue(t, p, `relay_park_failures_total{dest="fewrep"}`), "the park was refused:\n%s", p.output())
	ps, err := schedule.NewStore(r.Client()).Stats(context.Background(), "fewrep")
	require.NoError(t, err)
	require.Zero(t, ps.Parked)
}

// TestParkedTypedEventKeepsItsTypeAndKey: a typed event that waits in
// Redis comes back with its type and order key: its delivery carries
// Relay-Event-Type, and a filter on the type and key still takes it
// (without them it was acked as filtered out after the park, never sent).
func TestParkedTypedEventKeepsItsTypeAndKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{})
	_, withRedis := e.withSchedule(r)
	s := newSink(t, failing(1))
	e.addDest(destination.Destination{Name: "typed", URL: s.URL, Types: []string{"order.*"}, Filter: `type == "order.created" && key == "cust-1"`,
		Retry: destination.RetryPolicy{Base: destination.Duration(time.Second), Max: destination.Duration(time.Second), NoJitter: true, MaxAttempts: 5}})
	rec, _ := e.startRelay(withRedis)
	id := e.publishType("order.created", "cust-1", `{"n":1}`).ID
	eventually(t, 30*time.Second, func() bool { return s.delivered()[id] == 1 }, "delivered after its wait in Redis")
	require.Equal(t, 1, rec.count(func(o relay.Outcome) bool { return o.Parked && o.Attempt == 1 }), "the retry waited in Redis")
	hits := s.all()
	require.Len(t, hits, 2)
	for _, h := range hits {
		require.Equal(t, "order.created", h.Header.Get("Relay-Event-Type"))
	}
}
