package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/internal/replica"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
	"github.com/relaydev/relay/stream/streamtest"
)

// relayBin is the relay binary built once for the process tests.
var relayBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "relay-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relayBin = filepath.Join(dir, "relay")
	out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", relayBin, "../cmd/relay").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building relay: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's world: an embedded NATS server with relay's streams.
type env struct {
	t     testing.TB
	cfg   embedded.Config
	srv   *server.Server
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	store *destination.Store
	prod  *publish.Producer
	// signals: of the relays startRelay ran (none before).
	signals relaySignals
}

func setup(t testing.TB) *env {
	t.Helper()
	// A port restartNATS can start the server on again.
	cfg := embedded.Config{DataDir: t.TempDir(), Port: streamtest.Port(t), Mappings: stream.Mappings()}
	s, err := embedded.Start(cfg)
	require.NoError(t, err)
	e := &env{t: t, cfg: cfg}
	e.srv = s
	t.Cleanup(func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	})
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, stream.Ensure(ctx, js, stream.Config{}))
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	p, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	e.url, e.nc, e.js, e.store, e.prod = s.ClientURL(), nc, js, st, p
	return e
}

// restartNATS starts the embedded server again on the same port and data.
func (e *env) restartNATS() {
	e.t.Helper()
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	s, err := embedded.Start(e.cfg)
	require.NoError(e.t, err)
	e.srv = s
}

func (e *env) addDest(d destination.Destination) destination.Destination {
	e.t.Helper()
	d, err := e.store.Add(context.Background(), d)
	require.NoError(e.t, err)
	return d
}

func (e *env) publish(dest, key string, body string) publish.Published {
	e.t.Helper()
	res, err := e.prod.Publish(context.Background(), publish.Event{Dest: dest, Key: key, Data: []byte(body)})
	require.NoError(e.t, err)
	return res
}

// loopback is where the tests' sinks listen: the address guard must let it
// through.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// loopbackNets is loopback as --allow-net takes it.
var loopbackNets = []string{"127.0.0.0/8", "::1/128"}

// watched keeps the values an in-process relay's signal carried, and wakes
// the tests that wait for a condition on them at each.
type watched[T any] struct {
	mu      sync.Mutex
	all     []T
	changed chan struct{} // closed, and replaced, at each value
}

func newWatched[T any]() *watched[T] { return &watched[T]{changed: make(chan struct{})} }

// add records v; a relay's signal calls it.
func (w *watched[T]) add(v T) {
	w.mu.Lock()
	w.all = append(w.all, v)
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// count is the number of values f holds of.
func (w *watched[T]) count(f func(T) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, x := range w.all {
		if f(x) {
			n++
		}
	}
	return n
}

// waitFor waits until cond holds of the values recorded so far, asking it
// again at each value signalled and never between: what cond asks of is
// relay's own progress, which a signal reports. It fails the test after
// signalWait.
func (w *watched[T]) waitFor(t testing.TB, cond func(all []T) bool, format string, args ...any) {
	t.Helper()
	deadline := time.NewTimer(signalWait)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok, changed := cond(w.all), w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no signal within %s for: %s", signalWait, fmt.Sprintf(format, args...))
		}
	}
}

// waitLast waits until cond holds of the last value signalled.
func (w *watched[T]) waitLast(t testing.TB, cond func(T) bool, format string, args ...any) {
	t.Helper()
	w.waitFor(t, func(all []T) bool { return len(all) > 0 && cond(all[len(all)-1]) }, format, args...)
}

// signalWait bounds a wait for a signal: what must happen, not how fast
// (as minEventually), and long enough for a machine busy with the whole
// suite.
const signalWait = 2 * time.Minute

// outcomes records every attempt an in-process relay made (its
// OnDelivery, called once the attempt's decision is carried out).
type outcomes struct{ *watched[relay.Outcome] }

// wait waits until n outcomes f holds of are recorded.
func (o *outcomes) wait(t testing.TB, n int, f func(relay.Outcome) bool, format string, args ...any) {
	t.Helper()
	o.waitFor(t, func(all []relay.Outcome) bool {
		c := 0
		for _, x := range all {
			if f(x) {
				c++
			}
		}
		return c >= n
	}, format, args...)
}

// first waits for an outcome f holds of, and returns the first.
func (o *outcomes) first(t testing.TB, f func(relay.Outcome) bool, format string, args ...any) relay.Outcome {
	t.Helper()
	var got relay.Outcome
	o.waitFor(t, func(all []relay.Outcome) bool {
		for _, x := range all {
			if f(x) {
				got = x
				return true
			}
		}
		return false
	}, format, args...)
	return got
}

// relaySignals are what every in-process relay of a test signals: the
// router's and the unknown-destination check's progress as written to
// relay_state, the operator events published, and the events whose
// delivery-log records are indexed.
type relaySignals struct {
	routed     *watched[routing.State]
	checked    *watched[routing.CheckState]
	opEvents   *watched[string]
	logIndexed *watched[string]
}

// startRelay runs a replica in this process, as 'relay run' does
// (replica.Config), over e's connection, until the test ends (or stop is
// called), and records its outcomes. mods change the engine's
// configuration (replica.Config.Engine).
func (e *env) startRelay(mods ...func(*relay.Config)) (*outcomes, func()) {
	e.t.Helper()
	rec := &outcomes{newWatched[relay.Outcome]()}
	if e.signals.routed == nil {
		e.signals = relaySignals{routed: newWatched[routing.State](), checked: newWatched[routing.CheckState](), opEvents: newWatched[string](),
			logIndexed: newWatched[string]()}
	}
	var sigs relay.TestSignals
	sigs.RouterWritten.Notify(e.signals.routed.add)
	sigs.CheckWritten.Notify(e.signals.checked.add)
	sigs.OpEvent.Notify(e.signals.opEvents.add)
	sigs.LogIndexed.Notify(e.signals.logIndexed.add)
	cfg := replica.Config{
		JS:       e.js,
		AllowNet: loopbackNets,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Engine: func(c *relay.Config) {
			c.OnDelivery = rec.add
			c.TestSignals = &sigs
			for _, m := range mods {
				m(c)
			}
		},
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	r, err := replica.New(cfg)
	require.NoError(e.t, err)
	require.NoError(e.t, r.Start(context.Background()))
	var once sync.Once
	stop := func() {
		once.Do(func() { require.NoError(e.t, r.Stop()) })
	}
	e.t.Cleanup(stop)
	return rec, stop
}

// waitRouted waits until the router's progress, as written to relay_state
// by an in-process relay, is what cond asks.
func (e *env) waitRouted(cond func(routing.State) bool, format string, args ...any) {
	e.t.Helper()
	require.NotNil(e.t, e.signals.routed, "waitRouted needs a relay of startRelay")
	e.signals.routed.waitLast(e.t, cond, format, args...)
}

// waitChecked is waitRouted for the unknown-destination check.
func (e *env) waitChecked(cond func(routing.CheckState) bool, format string, args ...any) {
	e.t.Helper()
	require.NotNil(e.t, e.signals.checked, "waitChecked needs a relay of startRelay")
	e.signals.checked.waitLast(e.t, cond, format, args...)
}

// waitOpEvent waits until an in-process relay published an operator event
// of type typ.
func (e *env) waitOpEvent(typ string) {
	e.t.Helper()
	require.NotNil(e.t, e.signals.opEvents, "waitOpEvent needs a relay of startRelay")
	e.signals.opEvents.waitFor(e.t, func(all []string) bool { return slices.Contains(all, typ) }, "operator event %s published", typ)
}

// waitIndexed waits until an in-process relay indexed delivery-log records
// of each event of ids: a lookup by id finds them from then on.
func (e *env) waitIndexed(ids ...string) {
	e.t.Helper()
	require.NotNil(e.t, e.signals.logIndexed, "waitIndexed needs a relay of startRelay")
	e.signals.logIndexed.waitFor(e.t, func(all []string) bool {
		for _, id := range ids {
			if !slices.Contains(all, id) {
				return false
			}
		}
		return true
	}, "delivery-log records of %v indexed", ids)
}

// settled reports whether dest's consumer has nothing pending and nothing
// waiting for an ack. For a shared destination: the shared consumer (all
// shared destinations at once) and dest's lane, if it has one.
func (e *env) settled(dest string) bool {
	ctx := context.Background()
	name := destination.ConsumerName(dest)
	if d, err := e.store.Get(ctx, dest); err == nil && d.Shared {
		if c, err := e.js.Consumer(ctx, stream.EventsStream, destination.LaneConsumerName(dest)); err == nil {
			info, err := c.Info(ctx)
			if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
				return false
			}
		}
		name = destination.SharedConsumer
	}
	c, err := e.js.Consumer(ctx, stream.EventsStream, name)
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}

// eventsStored is the number of messages in the events stream.
func (e *env) eventsStored() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), stream.EventsStream)
	require.NoError(e.t, err)
	info, err := s.Info(context.Background())
	require.NoError(e.t, err)
	return info.State.Msgs
}

// storedAt is when the events stream stored sequence seq.
func (e *env) storedAt(seq uint64) time.Time {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), stream.EventsStream)
	require.NoError(e.t, err)
	m, err := s.GetMsg(context.Background(), seq)
	require.NoError(e.t, err)
	return m.Time
}

func (e *env) deadLetters(dest string) []dlq.Letter {
	e.t.Helper()
	return deadLettersIn(e.t, e.js, dest)
}

func deadLettersIn(t testing.TB, js jetstream.JetStream, dest string) []dlq.Letter {
	t.Helper()
	st, err := dlq.Open(context.Background(), js)
	require.NoError(t, err)
	ls, err := st.List(context.Background(), dlq.Filter{Dest: dest}, 0)
	require.NoError(t, err)
	return ls
}

// eventually polls cond until it holds or timeout passes. The timeout is
// at least minEventually: it bounds a wait for what must happen, not how
// fast (no test asserts speed), and a machine busy with the whole suite,
// browsers included, can take that long for what takes a second alone.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	timeout = max(timeout, minEventually)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, fmt.Sprintf(format, args...))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// minEventually is eventually's shortest timeout.
const minEventually = 30 * time.Second

// hit is one request a sink received.
type hit struct {
	ID     string
	N      int // requests with this webhook-id so far, this one included
	At     time.Time
	Body   string
	Header http.Header
	Status int
	Ctx    context.Context // the request's context: done when the client goes away
}

// sink is a real HTTP receiver whose answers the test scripts.
type sink struct {
	*httptest.Server
	mu     sync.Mutex
	hits   []hit                                  // answered requests
	perID  map[string]int                         // requests received per webhook-id, answered or not
	answer func(h hit, w http.ResponseWriter) int // returns the status written
}

func newSink(t testing.TB, answer func(h hit, w http.ResponseWriter) int) *sink {
	s := &sink{perID: map[string]int{}, answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		id := r.Header.Get("webhook-id")
		s.mu.Lock()
		s.perID[id]++
		h := hit{ID: id, N: s.perID[id], At: time.Now(), Body: string(b), Header: r.Header.Clone(), Ctx: r.Context()}
		s.mu.Unlock()
		status := http.StatusOK
		if s.answer != nil {
			status = s.answer(h, w)
		} else {
			w.WriteHeader(status)
		}
		h.Status = status
		s.mu.Lock()
		s.hits = append(s.hits, h)
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) all() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hit(nil), s.hits...)
}

// received is the number of requests that arrived, answered or not.
func (s *sink) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.perID {
		n += c
	}
	return n
}

func (s *sink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hits)
}

// delivered returns the webhook-ids answered with a 2xx, and how often.
func (s *sink) delivered() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, h := range s.hits {
		if h.Status >= 200 && h.Status < 300 {
			out[h.ID]++
		}
	}
	return out
}

// proc is a relay binary running as a process.
type proc struct {
	out    syncBuffer // stdout
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	exited chan struct{}
	err    error
}

// startProc runs the relay binary with args and collects its stderr lines.
func startProc(t testing.TB, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, nil, args...)
}

// startProcEnv is startProc with extra environment variables.
func startProcEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(relayBin, args...)
	// The tests' sinks listen on loopback, which the address guard refuses
	// unless allowed.
	// Several relays run at once: each serves its metrics on a free port.
	// DEBUG: the tests read each attempt's line (outcome=delivered), which
	// INFO leaves out.
	cmd.Env = append(append(os.Environ(), "RELAY_ALLOW_NET=127.0.0.0/8", "RELAY_METRICS_ADDR=127.0.0.1:0", "RELAY_LOG_LEVEL=debug"), env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout = &p.out
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			if testing.Verbose() {
				fmt.Fprintln(os.Stderr, "relay:", sc.Text())
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// syncBuffer is a bytes.Buffer that may be read while the process writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (p *proc) logged(substr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.Contains(l, substr) {
			return true
		}
	}
	return false
}

// stdout is what the process printed on standard output; read it after it
// exited.
func (p *proc) stdout() string {
	<-p.exited
	return p.out.String()
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// relayCLI runs a relay client command against e's server and returns its
// exit code and output.
func (e *env) relayCLI(args ...string) (int, string) {
	e.t.Helper()
	// A command that should end but runs on (a 'run' that should have been
	// refused) fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, relayBin, append([]string{"--nats-url", e.url}, args...)...)
	// Without the shell's RELAY_* settings, which would change what it does.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	require.NoError(e.t, ctx.Err(), "relay %s did not end within a minute:\n%s", strings.Join(args, " "), out)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return code, string(out)
}
