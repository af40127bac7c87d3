package integration

// Fault injection against real relay processes: kills, stops, timeouts,
// hostile peers, a NATS restart and a network cut. Each test ends with a
// ledger check: every published event is delivered or dead-lettered with a
// reason, and duplicates are counted and allowed only where at-least-once
// makes them unavoidable.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/stream"
)

// faultLedger checks the end state of dest: every request the sink saw
// (answered or not) carries the webhook-id of a published event and that
// event's body; every published event is either delivered (the sink answered
// 2xx) or in the dead-letter stream with a reason, never both, never
// neither; and no event was delivered more than maxDeliveries times. s may be
// nil for a destination that never answers. It returns the number of
// duplicate deliveries (deliveries beyond the first of each event).
func faultLedger(t *testing.T, e *env, s *sink, dest string, published map[string]string, maxDeliveries int) int {
	t.Helper()
	delivered := map[string]int{}
	if s != nil {
		s.mu.Lock()
		for id := range s.perID {
			_, ok := published[id]
			require.True(t, ok, "%s: the sink got a request with webhook-id %q, which was never published", dest, id)
		}
		s.mu.Unlock()
		for _, h := range s.all() {
			body, ok := published[h.ID]
			require.True(t, ok, "%s: request with unknown webhook-id %q", dest, h.ID)
			require.Equal(t, body, h.Body, "%s: request %d of %s carries another event's body", dest, h.N, h.ID)
		}
		delivered = s.delivered()
	}
	dead := map[string]int{}
	for _, l := range e.deadLetters(dest) {
		_, ok := published[l.EventID]
		require.True(t, ok, "%s: dead letter for unknown event %q", dest, l.EventID)
		require.NotEmpty(t, l.Reason, "%s: dead letter of %s without a reason", dest, l.EventID)
		dead[l.EventID]++
	}
	dups := 0
	for id := range published {
		d, l := delivered[id], dead[id]
		require.LessOrEqual(t, l, 1, "%s: event %s dead-lettered %d times", dest, id, l)
		switch {
		case d == 0 && l == 0:
			t.Fatalf("%s: event %s lost: neither delivered nor dead-lettered", dest, id)
		case d > 0 && l > 0:
			t.Fatalf("%s: event %s both delivered (%d times) and dead-lettered", dest, id, d)
		}
		require.LessOrEqual(t, d, maxDeliveries, "%s: event %s delivered %d times", dest, id, d)
		if d > 1 {
			dups += d - 1
		}
	}
	return dups
}

// faultRun starts 'relay run' against natsURL (plus extra flags) and waits
// until it is up.
func faultRun(t *testing.T, natsURL string, flags ...string) *proc {
	t.Helper()
	p := startProc(t, append([]string{"--nats-url", natsURL, "run"}, flags...)...)
	eventually(t, 20*time.Second, func() bool { return p.logged("relay running") }, "relay up:\n%s", p.output())
	return p
}

// faultRunning reports whether p has not exited.
func faultRunning(p *proc) bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

var faultOpsAddrRE = regexp.MustCompile(`msg="serving /metrics, /healthz and /readyz" addr=(\S+)`)

// opsGet GETs path from relay process p's metrics address, which it logged.
func opsGet(t *testing.T, p *proc, path string) (*http.Response, error) {
	t.Helper()
	m := faultOpsAddrRE.FindStringSubmatch(p.output())
	require.NotNil(t, m, "relay did not log its metrics address:\n%s", p.output())
	c := http.Client{Timeout: 5 * time.Second}
	return c.Get("http://" + m[1] + path)
}

// faultReadyz returns the status of p's /readyz (0 if it does not answer).
func faultReadyz(t *testing.T, p *proc) int {
	t.Helper()
	resp, err := opsGet(t, p, "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func faultOK(w http.ResponseWriter) int {
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// faultKillAfter2xx adds d (its URL set to a sink that answers 200 and
// flushes), runs a relay, publishes one event for d with key, SIGKILLs the
// relay right after the sink answered, and starts a second relay. It
// reports whether the first relay had logged the delivery.
func faultKillAfter2xx(t *testing.T, e *env, d destination.Destination, key string) (*sink, publish.Published, bool) {
	t.Helper()
	answered := make(chan struct{})
	var once sync.Once
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // the whole response has left
		once.Do(func() { close(answered) })
		return http.StatusOK
	})
	d.URL = s.URL
	e.addDest(d)
	// AckWait 7s: an event whose ack the kill took comes back well within
	// the callers' waits.
	p1 := faultRun(t, e.url, "--ack-wait", "7s")
	res := e.publish(d.Name, key, `{"order":1}`)
	select {
	case <-answered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first relay never sent the event")
	}
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	<-p1.exited
	logged := p1.logged("outcome=delivered") // its log is complete now
	faultRun(t, e.url, "--ack-wait", "7s")
	return s, res, logged
}

// A relay is SIGKILLed right after the sink answered 200 and flushed it,
// racing its ack. Whichever won, a second relay finishes the job: the event
// is delivered once or twice, always with the same webhook-id, and the
// consumer settles.
func TestFaultKillAfter2xxBeforeAck(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// AckWait is 7s (faultKillAfter2xx).
	s, res, loggedFirst := faultKillAfter2xx(t, e, destination.Destination{Name: "kill2xx", Timeout: destination.Duration(time.Second)}, "")
	// A logged delivery means the ack was handed to the NATS client, not
	// that it reached the server (acks of unordered first attempts are not
	// confirmed): either way the event is delivered once or twice.
	eventually(t, 30*time.Second, func() bool {
		return s.delivered()[res.ID] >= 1 && e.settled("kill2xx") && s.len() == s.received()
	}, "the event is delivered and acked, and every request answered")
	n := s.delivered()[res.ID]
	t.Logf("delivery logged before the kill: %v; deliveries: %d", loggedFirst, n)
	require.LessOrEqual(t, n, 2, "one redelivery at most")
	require.Equal(t, n, s.received(), "every request was answered 200")
	for _, h := range s.all() {
		require.Equal(t, res.ID, h.ID, "same webhook-id on every request")
	}
	require.Empty(t, e.deadLetters("kill2xx"))
	faultLedger(t, e, s, "kill2xx", map[string]string{res.ID: `{"order":1}`}, 2)
}

// A relay is stopped (SIGSTOP) mid-attempt for longer than AckWait. Another
// relay gets the redelivery and delivers it; then the stopped one resumes and
// finishes its stale attempt late. Nothing is lost, the duplicate carries the
// same webhook-id, the late ack or nak changes nothing, and the consumer
// settles.
func TestFaultSigstopLongerThanAckWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	arrived := make(chan time.Time, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseA := func() { releaseOnce.Do(func() { close(release) }) }
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N > 1 {
			return faultOK(w)
		}
		arrived <- time.Now()
		select {
		case <-release:
		case <-h.Ctx.Done():
			return 0
		}
		if h.Ctx.Err() != nil {
			return 0 // relay A gave up on it already
		}
		return faultOK(w)
	})
	t.Cleanup(releaseA) // before the sink's Close, which waits for the handler
	e.addDest(destination.Destination{Name: "stalled", URL: s.URL, Timeout: destination.Duration(time.Second),
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), MaxAttempts: 5}})
	const ackWait = 7 * time.Second // --ack-wait, for a shorter test than the default 30s

	a := faultRun(t, e.url, "--ack-wait", ackWait.String())
	res := e.publish("stalled", "", `{"stalled":true}`)
	var firstAt time.Time
	select {
	case firstAt = <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("relay A never sent the event")
	}
	pid := a.cmd.Process.Pid
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) // runs before startProc's kill

	b := faultRun(t, e.url, "--ack-wait", ackWait.String())
	eventually(t, 3*ackWait, func() bool { return s.delivered()[res.ID] >= 1 && e.settled("stalled") },
		"relay B delivers the redelivery")
	var secondAt time.Time
	for _, h := range s.all() {
		if h.N == 2 {
			secondAt = h.At
		}
	}
	require.False(t, secondAt.IsZero(), "the second request was answered")
	// AckWait runs from JetStream's delivery to A, before firstAt (the sink's
	// reading of the request), so the gap can be shorter than AckWait; an
	// early redelivery (timeout and backoff, no AckWait) would come after
	// about 1.1s.
	require.GreaterOrEqual(t, secondAt.Sub(firstAt), ackWait/2, "redelivered only after AckWait")
	// The first redelivery must reach B. If it took two AckWaits, the first
	// went into the stopped A's still-open pull request, and A will send
	// that stale copy once resumed: a third delivery.
	require.Less(t, secondAt.Sub(firstAt), 2*ackWait-time.Second,
		"relay B got the event only after two AckWaits: the first redelivery went to the stopped relay A")
	require.True(t, b.logged("outcome=delivered"), "relay B delivered it:\n%s", b.output())
	require.False(t, a.logged("msg=attempt"), "relay A is stopped")

	// Resume A and let its stale attempt finish: its late ack or nak must not
	// bring the event back.
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	releaseA()
	eventually(t, 20*time.Second, func() bool {
		return a.logged("msg=attempt") || a.logged("finished after AckWait")
	}, "relay A finishes its stale attempt:\n%s", a.output())
	eventually(t, 20*time.Second, func() bool { return s.len() == s.received() }, "every request answered")
	eventually(t, 10*time.Second, func() bool { return e.settled("stalled") }, "the consumer settles after A's late ack or nak")
	require.True(t, faultRunning(a), "relay A keeps running:\n%s", a.output())
	t.Logf("requests: %d, deliveries: %d", s.received(), s.delivered()[res.ID])
	for _, h := range s.all() {
		require.Equal(t, res.ID, h.ID)
	}
	require.Empty(t, e.deadLetters("stalled"))
	faultLedger(t, e, s, "stalled", map[string]string{res.ID: `{"stalled":true}`}, 2)
}

// The sink answers 200 only after the destination's timeout: relay counts the
// attempt as failed and retries, so the receiver sees the event twice, with
// the same webhook-id.
func TestFaultTwoHundredAfterTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			// Past relay's 1s timeout: relay hangs up then.
			select {
			case <-h.Ctx.Done():
			case <-time.After(5 * time.Second):
			}
		}
		return faultOK(w)
	})
	e.addDest(destination.Destination{Name: "late", URL: s.URL, Timeout: destination.Duration(time.Second),
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), NoJitter: true, MaxAttempts: 5}})
	p := faultRun(t, e.url)
	res := e.publish("late", "", `{"late":true}`)
	eventually(t, 20*time.Second, func() bool { return s.delivered()[res.ID] == 2 && e.settled("late") },
		"the late 200 and the retry's 200")
	eventually(t, 10*time.Second, func() bool { return p.logged("attempt=2 outcome=delivered") }, "relay delivers on attempt 2:\n%s", p.output())
	require.Regexp(t, `attempt=1 outcome=retry error="timeout after 1s`, p.output())
	hs := s.all()
	require.Len(t, hs, 2)
	require.Equal(t, 2, s.received())
	for _, h := range hs {
		require.Equal(t, res.ID, h.ID, "same webhook-id on the retry")
	}
	require.Empty(t, e.deadLetters("late"))
	require.Equal(t, 1, faultLedger(t, e, s, "late", map[string]string{res.ID: `{"late":true}`}, 2))
}

// faultStallListener accepts TCP connections and never sends a byte: a TLS
// handshake against it stalls.
func faultStallListener(t *testing.T) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted = &atomic.Int32{}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }() // read the ClientHello, answer nothing
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), accepted
}

// Hostile peers: (a) connections reset or closed without a response, then a
// 200; (b) a TLS handshake that never completes; (c) a 200 whose body drips
// one byte per 100ms. (a) is delivered, (b) and (c) are dead-lettered after
// their attempts with a timeout error.
func TestFaultHostileConnections(t *testing.T) {
	t.Parallel()
	e := setup(t)
	fast := destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(200 * time.Millisecond), NoJitter: true}

	// (a) The first request's connection is reset (RST), the second's closed
	// (EOF), both without a response.
	reset := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N > 2 {
			return faultOK(w)
		}
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		if tc, ok := c.(*net.TCPConn); ok && h.N == 1 {
			_ = tc.SetLinger(0)
		}
		c.Close()
		return 0
	})
	pa := fast
	pa.MaxAttempts = 5
	e.addDest(destination.Destination{Name: "reset", URL: reset.URL, Timeout: destination.Duration(time.Second), Retry: pa})

	// (b) TLS that never shakes hands. The destination's own timeout is
	// longer than the handshake timeout, so the handshake timeout is what
	// fires.
	stall, accepted := faultStallListener(t)
	pb := fast
	pb.MaxAttempts = 2
	e.addDest(destination.Destination{Name: "tlsstall", URL: "https://" + stall + "/hook", Timeout: destination.Duration(3 * time.Second), Retry: pb})

	// (c) A slow drip: 200 at once, then one byte per 100ms.
	drip := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		f.Flush()
		for range 100 {
			select {
			case <-h.Ctx.Done():
				return 0 // relay hung up before the body was complete
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := w.Write([]byte("x")); err != nil {
				return 0
			}
			f.Flush()
		}
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "drip", URL: drip.URL, Timeout: destination.Duration(time.Second), Retry: pb})

	p := faultRun(t, e.url, "--tls-handshake-timeout", "1s")
	body := func(dest string) string { return fmt.Sprintf(`{"dest":%q}`, dest) }
	ids := map[string]string{}
	for _, dest := range []string{"reset", "tlsstall", "drip"} {
		ids[dest] = e.publish(dest, "", body(dest)).ID
	}

	eventually(t, 20*time.Second, func() bool { return reset.delivered()[ids["reset"]] == 1 && e.settled("reset") },
		"(a) delivered after two broken connections")
	require.Equal(t, 3, reset.received(), "(a) two broken connections, one delivery")

	for _, dest := range []string{"tlsstall", "drip"} {
		eventually(t, 30*time.Second, func() bool { return len(e.deadLetters(dest)) == 1 && e.settled(dest) },
			"(%s) dead-lettered:\n%s", dest, p.output())
		l := e.deadLetters(dest)[0]
		require.Equal(t, ids[dest], l.EventID)
		require.Equal(t, relay.ReasonMaxAttempts, l.Reason)
		require.Equal(t, 2, l.Attempts)
		require.Len(t, l.History, 2)
		require.Zero(t, l.LastStatus, "(%s) no complete response", dest)
		for _, a := range l.History {
			require.Contains(t, a.Error, "timeout", "(%s) attempt %d", dest, a.N)
		}
		t.Logf("%s: last error %q", dest, l.LastError)
	}
	require.Contains(t, e.deadLetters("tlsstall")[0].LastError, "TLS handshake timeout")
	require.GreaterOrEqual(t, accepted.Load(), int32(2), "(b) one connection per attempt")
	require.Equal(t, 2, drip.received(), "(c) two attempts")
	require.Empty(t, drip.delivered(), "(c) no body was ever complete")

	faultLedger(t, e, reset, "reset", map[string]string{ids["reset"]: body("reset")}, 1)
	faultLedger(t, e, nil, "tlsstall", map[string]string{ids["tlsstall"]: body("tlsstall")}, 0)
	faultLedger(t, e, drip, "drip", map[string]string{ids["drip"]: body("drip")}, 0)
	require.Empty(t, e.deadLetters("reset"))
}

// NATS restarts (same port, same store) while a relay works through 500
// events: the relay reconnects by itself and delivers every event; an ack
// lost in the restart makes a duplicate with the same webhook-id.
func TestFaultNATSRestartMidRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n, restartAt = 500, 100
	reached := make(chan struct{})
	var answered atomic.Int32
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		time.Sleep(5 * time.Millisecond)
		if answered.Add(1) == restartAt {
			close(reached)
		}
		return faultOK(w)
	})
	// Concurrency 2 keeps the run long enough (about 1.3s of deliveries) to
	// restart NATS in the middle of it.
	e.addDest(destination.Destination{Name: "restart", URL: s.URL, Timeout: destination.Duration(time.Second), Concurrency: 2})
	published := map[string]string{}
	for i := range n {
		b := fmt.Sprintf(`{"n":%d}`, i)
		published[e.publish("restart", "", b).ID] = b
	}
	p := faultRun(t, e.url)
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatal("deliveries never got going")
	}
	e.restartNATS()
	before := len(s.delivered())
	require.Less(t, before, n, "the restart came before the work was done")

	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) == n && e.settled("restart") },
		"all %d delivered after the restart (%d so far)", n, len(s.delivered()))
	require.True(t, faultRunning(p), "the relay survived the restart:\n%s", p.output())
	eventually(t, 10*time.Second, func() bool { return faultReadyz(t, p) == http.StatusOK }, "the relay is connected again")
	require.True(t, p.logged("nats: disconnected"), "the relay logs the disconnect:\n%s", p.output())
	require.True(t, p.logged("nats: reconnected to"), "the relay logs the reconnect:\n%s", p.output())
	require.Empty(t, e.deadLetters("restart"))
	dups := faultLedger(t, e, s, "restart", published, 2)
	t.Logf("delivered %d before the restart finished, %d duplicates", before, dups)
}

// faultProxy is a TCP proxy to NATS that can cut the network: close every
// connection and refuse new ones until healed.
type faultProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func faultStartProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.cut()
	})
	return p
}

func (p *faultProxy) serve(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		c.Close() // refused: the client sees EOF before NATS's INFO
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}
	go pipe(u, c)
	go pipe(c, u)
}

// cut closes every proxied connection and refuses new ones.
func (p *faultProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *faultProxy) heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *faultProxy) url() string { return "nats://" + p.ln.Addr().String() }

// Relay A reaches NATS through a proxy. Its attempt gets a 200, but the
// network is cut before the ack can leave and stays cut longer than AckWait;
// relay B, connected directly, delivers the redelivery. Once healed, A
// reconnects by itself and keeps delivering.
func TestFaultNetworkCutLongerThanAckWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	px := faultStartProxy(t, strings.TrimPrefix(e.url, "nats://"))
	arrived := make(chan time.Time, 1)
	isCut := make(chan struct{})
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 && h.Body == `{"n":0}` {
			arrived <- time.Now()
			select {
			case <-isCut:
			case <-h.Ctx.Done():
				return 0
			}
		}
		return faultOK(w)
	})
	e.addDest(destination.Destination{Name: "cut", URL: s.URL, Timeout: destination.Duration(time.Second)})
	const ackWait = 7 * time.Second // --ack-wait
	published := map[string]string{}
	pub := func(i int) {
		b := fmt.Sprintf(`{"n":%d}`, i)
		published[e.publish("cut", "", b).ID] = b
	}

	a := faultRun(t, px.url(), "--ack-wait", ackWait.String())
	eventually(t, 10*time.Second, func() bool { return faultReadyz(t, a) == http.StatusOK }, "relay A is ready")
	pub(0)
	var firstAt time.Time
	select {
	case firstAt = <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("relay A never sent the event")
	}
	px.cut()
	cutAt := time.Now()
	close(isCut) // the 200 goes out; A's ack cannot
	eventually(t, 10*time.Second, func() bool { return faultReadyz(t, a) == http.StatusServiceUnavailable }, "relay A sees the cut")

	b := faultRun(t, e.url, "--ack-wait", ackWait.String())
	eventually(t, 3*ackWait, func() bool { return len(s.all()) == 2 && e.settled("cut") }, "relay B delivers the redelivery")
	hs := s.all()
	require.Equal(t, hs[0].ID, hs[1].ID, "same webhook-id on the redelivery")
	// As in TestFaultSigstopLongerThanAckWait: AckWait began before firstAt.
	require.GreaterOrEqual(t, hs[1].At.Sub(firstAt), ackWait/2, "redelivered only after AckWait")
	require.Greater(t, time.Since(cutAt), ackWait/2, "the cut outlasted AckWait")
	require.True(t, b.logged("outcome=delivered"))

	px.heal()
	eventually(t, 20*time.Second, func() bool { return faultReadyz(t, a) == http.StatusOK }, "relay A reconnects:\n%s", a.output())
	// With B gone, only A can deliver what comes next.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	<-b.exited
	require.NoError(t, b.err, "B exits 0 on SIGTERM")
	for i := 1; i <= 10; i++ {
		pub(i)
	}
	eventually(t, 30*time.Second, func() bool { return len(s.delivered()) == len(published) && e.settled("cut") },
		"relay A delivers after reconnecting:\n%s", a.output())
	require.True(t, faultRunning(a), "relay A still runs")
	require.Empty(t, e.deadLetters("cut"))
	dups := faultLedger(t, e, s, "cut", published, 2)
	want := 0
	if hs[0].Status == http.StatusOK {
		want = 1 // A's 200 and B's
	}
	require.Equal(t, want, dups, "only the event caught in the cut may be delivered twice")
}

// The same kill for an ordered key, whose ack relay confirms (DoubleAck)
// before it logs the delivery: if the first relay logged it, JetStream had
// the ack, and the second relay must not deliver the event again.
func TestFaultKillAfter2xxBeforeAckOrdered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const partitions = 2
	s, res, ackedFirst := faultKillAfter2xx(t, e, destination.Destination{Name: "killord", Ordered: true, Partitions: partitions, Timeout: destination.Duration(time.Second)}, "customer-1")
	settled := func() bool {
		for i := range partitions {
			c, err := e.js.Consumer(context.Background(), stream.EventsStream, destination.PartitionConsumerName("killord", i))
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
	eventually(t, 30*time.Second, func() bool { return s.delivered()[res.ID] >= 1 && settled() }, "the event is delivered and acked")
	n := s.delivered()[res.ID]
	t.Logf("delivery logged before the kill (its mark confirmed): %v; deliveries: %d", ackedFirst, n)
	if ackedFirst {
		require.Equal(t, 1, n, "the mark was confirmed: no redelivery")
	}
	require.LessOrEqual(t, n, 2)
	for _, h := range s.all() {
		require.Equal(t, res.ID, h.ID, "same webhook-id on every request")
	}
	require.Empty(t, e.deadLetters("killord"))
}

// The replica holding the unknown-destination check is SIGKILLed while
// events for a destination that does not exist keep coming. The other
// replica takes the check over once the lease has been silent for
// CheckTakeover (10s), from the sequence the killed one recorded last: every
// such event is dead-lettered exactly once. (Events the killed one checked
// after its last record are checked again; their second dead letter is
// dropped by JetStream's dedup.)
func TestFaultKilledCheckHolderIsTakenOver(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	p1 := faultRun(t, e.url)
	var first routing.CheckState
	eventually(t, 20*time.Second, func() bool {
		st, ok, err := routing.ReadCheckState(ctx, e.js)
		first = st
		return err == nil && ok && st.Holder != ""
	}, "the first relay holds the check")
	faultRun(t, e.url)

	published := map[string]string{}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			id, body := fmt.Sprintf("g%d", i), fmt.Sprintf(`{"n":%d}`, i)
			m := nats.NewMsg("relay.in.ghost")
			m.Data = []byte(body)
			m.Header.Set("Nats-Msg-Id", id)
			_, err := e.js.PublishMsg(ctx, m)
			require.NoError(t, err)
			published[id] = body
		}
	}
	publish(0, 500)
	eventually(t, 30*time.Second, func() bool { return len(e.deadLetters("ghost")) >= 100 }, "the first relay dead-letters some")
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	<-p1.exited
	publish(500, 1000)

	eventually(t, 60*time.Second, func() bool {
		st, _, err := routing.ReadCheckState(ctx, e.js)
		return err == nil && st.Holder != "" && st.Holder != first.Holder && st.Checked == 1000
	}, "the second relay took the check over and checked all 1000 events")
	faultLedger(t, e, nil, "ghost", published, 0)
}
