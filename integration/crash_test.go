package integration

// kill -9 of the relay that hosts the embedded NATS server (the default
// deployment: 'relay run' without --nats-url), restarted on the same data
// directory. The server's consumers lose the acks of their last moments
// (their state reaches the file at most every 100ms), confirmed ones
// included, and hand those events out again; relay must not deliver a
// parked event twice, nor an ordered key's event after a later one.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// embeddedRelay is 'relay run' with its own embedded NATS server, on a data
// directory and port kept across its restarts, and an env on that server
// (dialEnv: it reconnects when the server comes back).
type embeddedRelay struct {
	*env
	t     *testing.T
	dir   string
	url   string
	flags []string
	p     *proc
}

func startEmbeddedRelay(t *testing.T, flags ...string) *embeddedRelay {
	t.Helper()
	port := streamtest.Port(t)
	r := &embeddedRelay{t: t, dir: t.TempDir(), url: fmt.Sprintf("nats://127.0.0.1:%d", port), flags: flags}
	r.start()
	r.env = dialEnv(t, r.url)
	return r
}

// start runs the relay process and waits until it consumes.
func (r *embeddedRelay) start() {
	r.t.Helper()
	args := append([]string{"run", "--data-dir", r.dir, "--listen", strings.TrimPrefix(r.url, "nats://")}, r.flags...)
	r.p = startProc(r.t, args...)
	eventually(r.t, 60*time.Second, func() bool { return r.p.logged("relay running") || !faultRunning(r.p) }, "relay up:\n%s", r.p.output())
	require.True(r.t, faultRunning(r.p), "relay exited:\n%s", r.p.output())
}

// crash kills the relay process, and its NATS server with it, with SIGKILL.
func (r *embeddedRelay) crash() {
	r.t.Helper()
	require.NoError(r.t, r.p.cmd.Process.Signal(syscall.SIGKILL))
	<-r.p.exited
}

// publish publishes ev, again after a failure (the server may be starting):
// ev.ID makes a repeat a duplicate.
func (r *embeddedRelay) publish(ev publish.Event) {
	r.t.Helper()
	var err error
	eventually(r.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = r.prod.Publish(ctx, ev)
		return err == nil
	}, "publish %s: %v", ev.ID, err)
}

// idle reports whether the named consumers have nothing pending and nothing
// waiting for an ack.
func (r *embeddedRelay) idle(consumers ...string) bool {
	for _, name := range consumers {
		c, err := r.js.Consumer(context.Background(), stream.EventsStream, name)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
			return false
		}
	}
	return true
}

// count is the number of lines p logged containing substr.
func (p *proc) count(substr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// Ten events fail once and are parked in Redis; the relay hosting the
// embedded server is killed right after it parked the last, and restarted.
// Each event is attempted exactly twice: the originals that come back
// because their acks were lost are acknowledged without an attempt, and
// only the copies from Redis are delivered.
func TestFaultCrashOfEmbeddedNATSDeliversNoParkedEventTwice(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t, redistest.Options{})
	er := startEmbeddedRelay(t, "--redis-url", rs.URL(), "--park-threshold", "500ms", "--ack-wait", "7s")
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		return faultOK(w)
	})
	// AckWait is 7s (--ack-wait); the first retry waits 1s: parked.
	_, err := er.store.Add(context.Background(), destination.Destination{Name: "crashpark", URL: s.URL, Timeout: destination.Duration(time.Second),
		Retry: destination.RetryPolicy{Base: destination.Duration(time.Second), Max: destination.Duration(2 * time.Second), NoJitter: true, MaxAttempts: 5}})
	require.NoError(t, err)
	const n = 10
	published := map[string]string{}
	for i := range n {
		id, body := fmt.Sprintf("park-%d", i), fmt.Sprintf(`{"n":%d}`, i)
		er.publish(publish.Event{Dest: "crashpark", ID: id, Data: []byte(body)})
		published[id] = body
	}
	eventually(t, 30*time.Second, func() bool { return er.p.count("parked=true") >= n }, "all %d events parked:\n%s", n, er.p.output())
	er.crash()
	er.start()

	st := schedule.NewStore(rs.Client())
	eventually(t, 60*time.Second, func() bool {
		ps, err := st.Stats(context.Background(), "crashpark")
		return len(s.delivered()) == n && err == nil && ps.Parked == 0 && er.idle(destination.ConsumerName("crashpark"))
	}, "every event delivered, nothing parked or pending")
	for id, times := range s.delivered() {
		require.Equal(t, 1, times, "event %s delivered %d times", id, times)
	}
	require.Equal(t, 2*n, s.received(), "each event attempted twice: once failing, once from Redis; relay's log after the restart:\n%s", er.p.output())
	require.Empty(t, deadLettersIn(t, er.js, "crashpark"))
}

// An ordered key's events 0-19 are delivered; the relay hosting the
// embedded server is killed right after it logged the last delivery, and
// restarted; events 20-39 follow. The receiver sees 0-39 once each, in
// order: no event the killed relay delivered comes again, although the
// server lost the acks of the last of them.
func TestFaultCrashOfEmbeddedNATSKeepsOrder(t *testing.T) {
	t.Parallel()
	er := startEmbeddedRelay(t, "--ack-wait", "7s") // a head in flight at the crash comes back within 7s
	var mu sync.Mutex
	var got []int
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(h.Body, `{"n":`), "}"))
		require.NoError(t, err)
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
		return faultOK(w)
	})
	_, err := er.store.Add(context.Background(), destination.Destination{Name: "crashord", URL: s.URL, Ordered: true, Partitions: 1, Timeout: destination.Duration(time.Second)})
	require.NoError(t, err)
	send := func(from, to int) {
		for i := from; i < to; i++ {
			er.publish(publish.Event{Dest: "crashord", Key: "k", ID: fmt.Sprintf("ord-%d", i), Data: fmt.Appendf(nil, `{"n":%d}`, i)})
		}
	}
	send(0, 20)
	eventually(t, 30*time.Second, func() bool { return er.p.count("outcome=delivered") >= 20 }, "events 0-19 delivered:\n%s", er.p.output())
	er.crash()
	er.start()
	send(20, 40)
	partition := destination.PartitionConsumerName("crashord", 0)
	eventually(t, 60*time.Second, func() bool { return s.len() >= 40 && er.idle(partition) }, "events 20-39 delivered, nothing pending")
	mu.Lock()
	defer mu.Unlock()
	want := make([]int, 40)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, got, "each event once, in order; relay's log after the restart:\n%s", er.p.output())
}

// The relay dies (failpoint park-after-redis, SIGKILL) right after Redis
// confirmed the park of an event's first failed attempt, before the park
// is recorded in the attempt log and before the message is acked. Restarted,
// it sees the original come back from JetStream (after AckWait) and the
// copy come back from Redis: the event is delivered once, not once per copy.
func TestFaultKilledBetweenParkAndItsRecordDeliversOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := redistest.Start(t, redistest.Options{AppendOnly: true})
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		return faultOK(w)
	})
	e.addDest(destination.Destination{Name: "parkrec", URL: s.URL, Timeout: destination.Duration(time.Second), Retry: destination.RetryPolicy{
		Base: destination.Duration(time.Second), Max: destination.Duration(2 * time.Second), NoJitter: true, MaxAttempts: 5}})
	// AckWait 7s: the original, never acked, comes back 7s after its delivery.
	args := []string{"--nats-url", e.url, "run", "--redis-url", r.URL(), "--park-threshold", "500ms", "--ack-wait", "7s"}

	p1 := startProcEnv(t, []string{"RELAY_FAILPOINT=park-after-redis"}, args...)
	res := e.publish("parkrec", "", `{"p":1}`)
	select {
	case <-p1.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the failpoint never fired:\n%s", p1.output())
	}
	ws, ok := p1.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "died of SIGKILL: %v\n%s", p1.cmd.ProcessState, p1.output())
	st := schedule.NewStore(r.Client())
	ps, err := st.Stats(context.Background(), "parkrec")
	require.NoError(t, err)
	require.EqualValues(t, 1, ps.Parked, "the park reached Redis before the kill")
	require.Equal(t, 1, s.received(), "one attempt before the kill")

	p2 := startProc(t, args...)
	eventually(t, 60*time.Second, func() bool {
		ps, err := st.Stats(context.Background(), "parkrec")
		return err == nil && ps.Parked == 0 && s.delivered()[res.ID] >= 1 && e.settled("parkrec")
	}, "delivered, nothing parked or pending:\n%s", p2.output())
	require.Equal(t, 1, s.delivered()[res.ID], "delivered once; relay's log after the restart:\n%s", p2.output())
	require.Equal(t, 2, s.received(), "attempted twice: once failing, once delivered")
	require.Empty(t, e.deadLetters("parkrec"))
}
