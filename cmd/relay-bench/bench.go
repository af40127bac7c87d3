package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/replica"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/stream/embedded"
	"github.com/relaydev/relay/webhook"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/relaydev/relay/stream"
)

// bench is everything a run shares: the embedded NATS server, the sink
// process, the destination store and the publisher.
type bench struct {
	opts    options
	rep     *report // counts the dead letters of each server before it goes
	tmp     string  // removed at the end
	logDir  string  // <out>/logs, kept
	ns      *server.Server
	natsURL string
	nc      *nats.Conn
	js      jetstream.JetStream
	store   *destination.Store
	pub     *publisher
	sink    *sinkProc
	hc      *http.Client // talks to the sink's /count, /stats, /reset

	settles int    // settle runs so far, to name their logs
	servers int    // embedded servers started so far, to name their directories
	natsDir string // the current server's data directory
	// cluster is scenario (r)'s NATS cluster while (r) runs: the CPU and
	// message figures are then its nodes'.
	cluster *natsCluster

	// figures later scenarios compare with
	relayRateA float64
	// relayArgs are added to 'relay run' (scenario l turns the delivery
	// log off with them).
	relayArgs []string
	// defaultLogLevel runs relay at its default log level rather than
	// warn ((r): as a user runs it).
	defaultLogLevel bool
	// rRuns counts (r)'s runs at a rate, for their events' ids.
	rRuns     int
	loopRateA float64
}

func newBench(ctx context.Context, o options) (b *bench, err error) {
	b = &bench{opts: o}
	defer func() {
		if err != nil {
			b.close()
			b = nil
		}
	}()
	b.tmp, err = os.MkdirTemp("", "relay-bench-")
	if err != nil {
		return b, err
	}
	b.logDir = filepath.Join(o.out, "logs")
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		return b, err
	}
	if err := b.startNATS(ctx); err != nil {
		return b, err
	}
	b.sink, err = startSink(ctx, b.logDir)
	if err != nil {
		return b, err
	}
	b.hc = &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}
	return b, nil
}

// close stops everything this run started and removes the temporary data.
func (b *bench) close() {
	if b.sink != nil {
		if err := b.sink.stop(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "relay-bench:", err)
		}
	}
	b.stopNATS()
	if b.tmp != "" {
		if err := os.RemoveAll(b.tmp); err != nil {
			fmt.Fprintln(os.Stderr, "relay-bench: removing", b.tmp+":", err)
		}
	}
}

// startNATS starts an embedded NATS server with file storage in a new data
// directory, connects to it, and sets up relay's streams, the destination
// store and the publisher.
func (b *bench) startNATS(ctx context.Context) (err error) {
	b.servers++
	b.natsDir = filepath.Join(b.tmp, "nats-"+strconv.Itoa(b.servers))
	b.ns, err = embedded.Start(embedded.Config{
		DataDir: b.natsDir,
		Host:    "127.0.0.1",
		Port:    -1,
		Name:    "relay-bench",
	})
	if err != nil {
		return err
	}
	b.natsURL = b.ns.ClientURL()
	b.nc, err = nats.Connect(b.natsURL, nats.Name("relay-bench publisher"))
	if err != nil {
		return fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	b.js, err = jetstream.New(b.nc)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := stream.Ensure(sctx, b.js, relayStreams(1)); err != nil {
		return fmt.Errorf("set up relay's streams: %w", err)
	}
	b.store, err = destination.NewStore(sctx, b.js)
	if err != nil {
		return err
	}
	b.pub, err = newPublisher(b.nc)
	return err
}

// relayStreams are the settings of relay's streams and buckets that 'relay
// run --replicas n' sets up, its other flags left at their defaults.
func relayStreams(replicas int) stream.Config {
	return replica.Config{Replicas: replicas}.WithDefaults().Streams()
}

// stopNATS stops the embedded server and removes its data directory.
func (b *bench) stopNATS() {
	if b.nc != nil {
		b.nc.Close()
		b.nc = nil
	}
	if b.ns != nil {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
		b.ns = nil
		if err := os.RemoveAll(b.natsDir); err != nil {
			fmt.Fprintln(os.Stderr, "relay-bench: removing", b.natsDir+":", err)
		}
	}
}

// restartNATS replaces the embedded server by a new one with no data, so
// that the next scenario does not measure what an earlier one left in the
// server: the duplicate-detection window's ids, caches, consumers.
func (b *bench) restartNATS(ctx context.Context) error {
	b.stopNATS()
	return b.startNATS(ctx)
}

// freshNATS gives the next measurement a new server with no data (its dead
// letters counted first), unless all runs share one (-shared-nats).
func (b *bench) freshNATS(ctx context.Context) error {
	if b.opts.sharedNATS {
		return nil
	}
	if b.rep != nil {
		if err := b.checkDLQ(ctx, b.rep); err != nil {
			return err
		}
	}
	return b.restartNATS(ctx)
}

func (b *bench) sinkURL(dest string) string { return "http://" + b.sink.addr + "/d/" + dest }

// addDest creates a destination the way 'relay dest add' does: with a
// generated signing secret, so relay signs every delivery.
func (b *bench) addDest(ctx context.Context, d destination.Destination) error {
	if d.URL == "" {
		d.URL = b.sinkURL(d.Name)
	}
	if d.Concurrency == 0 {
		d.Concurrency = b.opts.concurrency
	}
	d.Secret = webhook.GenerateSecret()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.store.Add(actx, d); err != nil {
		return fmt.Errorf("add destination %s: %w", d.Name, err)
	}
	return nil
}

// addPausedDest creates a destination for a baseline: it fixes the subject
// contract of its events, and it is paused for good so that no relay process
// ever delivers them (and relay's unrouted-events check finds it).
func (b *bench) addPausedDest(ctx context.Context, name string) error {
	return b.addDest(ctx, destination.Destination{Name: name, PausedUntil: destination.Forever, PauseReason: destination.PauseOperator})
}

// --- the sink's control API ---

func (b *bench) sinkReset(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+b.sink.addr+"/reset", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		return fmt.Errorf("reset the sink: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("reset the sink: status %d", resp.StatusCode)
	}
	return nil
}

func (b *bench) sinkCount(ctx context.Context) (delivered, requests int64, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.sink.addr+"/count", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("ask the sink: %w", err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if _, err := fmt.Sscanf(line, "%d %d", &delivered, &requests); err != nil {
		return 0, 0, fmt.Errorf("sink /count answered %q", line)
	}
	return delivered, requests, nil
}

func (b *bench) sinkStats(ctx context.Context) (sinkStats, error) {
	return b.sinkStatsWith(ctx, "")
}

// sinkStatsWith is sinkStats with a query: "bins=1" adds the histogram.
func (b *bench) sinkStatsWith(ctx context.Context, query string) (sinkStats, error) {
	var st sinkStats
	url := "http://" + b.sink.addr + "/stats"
	if query != "" {
		url += "?" + query
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		return st, fmt.Errorf("ask the sink for stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("sink /stats: %w", err)
	}
	return st, nil
}

// waitDelivered polls the sink until it has delivered want events (since its
// last reset), and returns when it first saw one delivered. It fails when p
// (if any) exits, when nothing moves for stallLimit, or after limit.
func (b *bench) waitDelivered(ctx context.Context, want int64, p *proc, limit time.Duration) (first time.Time, err error) {
	const stallLimit = 60 * time.Second
	deadline := time.Now().Add(limit)
	var last int64 = -1
	lastMove := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		got, reqs, err := b.sinkCount(ctx)
		if err != nil {
			return first, err
		}
		if got > 0 && first.IsZero() {
			first = time.Now()
		}
		if got >= want {
			return first, nil
		}
		if p != nil && p.exited() {
			return first, p.exitError()
		}
		if b.sink.exited() {
			return first, b.sink.exitError()
		}
		now := time.Now()
		if got+reqs != last {
			last, lastMove = got+reqs, now
		}
		if now.Sub(lastMove) > stallLimit {
			return first, fmt.Errorf("stalled: %d of %d delivered (%d requests), nothing new for %s", got, want, reqs, stallLimit)
		}
		if now.After(deadline) {
			return first, fmt.Errorf("gave up after %s: %d of %d delivered (%d requests)", limit, got, want, reqs)
		}
		select {
		case <-ctx.Done():
			return first, ctx.Err()
		case <-t.C:
		}
	}
}

// limitFor bounds the wait for n deliveries: generous, but finite.
func limitFor(n int) time.Duration { return 10*time.Minute + time.Duration(n)*2*time.Millisecond }

// waitFor polls cond every interval until it holds. It fails when p (if
// any) exits, or after limit, saying what it waited for and cond's last
// error.
func waitFor(ctx context.Context, p *proc, limit, interval time.Duration, what string, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := cond(cctx)
		cancel()
		if ok {
			return nil
		}
		if p != nil && p.exited() {
			return p.exitError()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s (last error: %v)", what, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// waitConsumerIdle waits until a consumer exists and has nothing pending or
// unacknowledged.
func (b *bench) waitConsumerIdle(ctx context.Context, name string, p *proc, limit time.Duration) error {
	return waitFor(ctx, p, limit, 50*time.Millisecond, "consumer "+name+" idle", func(ctx context.Context) (bool, error) {
		c, err := b.js.Consumer(ctx, stream.EventsStream, name)
		if err != nil {
			return false, err
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0, err
	})
}

// checkCaughtUp reports whether relay's unknown-destination check has gone
// through every event stored so far.
func (b *bench) checkCaughtUp(ctx context.Context) (bool, error) {
	lag, err := routing.CheckLag(ctx, b.js)
	return err == nil && lag == 0, err // an empty stream needs no check
}

// waitCheckCaughtUp waits until relay's unknown-destination check has gone
// through every event stored so far.
func (b *bench) waitCheckCaughtUp(ctx context.Context, p *proc, limit time.Duration) error {
	return waitFor(ctx, p, limit, 50*time.Millisecond, "relay's unknown-destination check caught up", b.checkCaughtUp)
}

// checkHolder is the replica that holds relay's unknown-destination check,
// "" when none does (or it cannot be read).
func (b *bench) checkHolder(ctx context.Context) (string, error) {
	st, _, err := routing.ReadCheckState(ctx, b.js)
	return st.Holder, err
}

// waitCheckHeld waits until relay process p holds the unknown-destination
// check: its lease names a holder other than before, the replica that held
// it before p started ("" if none).
func (b *bench) waitCheckHeld(ctx context.Context, p *proc, before string) error {
	return waitFor(ctx, p, time.Minute, 10*time.Millisecond, "relay took up the unknown-destination check", func(ctx context.Context) (bool, error) {
		h, err := b.checkHolder(ctx)
		return err == nil && h != "" && h != before, err
	})
}

// settleUnrouted lets a relay process check, before a measurement, the
// events published since the last relay process ran (the baselines', for
// instance): relay's unknown-destination check goes through every event
// once, and that catch-up is not part of the next measurement's work.
func (b *bench) settleUnrouted(ctx context.Context) error {
	if ok, _ := b.checkCaughtUp(ctx); ok {
		return nil
	}
	b.settles++
	p, err := b.startRelay("settle" + strconv.Itoa(b.settles))
	if err != nil {
		return err
	}
	defer p.stop(20 * time.Second)
	if err := b.waitCheckCaughtUp(ctx, p, 5*time.Minute); err != nil {
		return fmt.Errorf("settling relay's unknown-destination check: %w", err)
	}
	return p.stop(20 * time.Second)
}

// startRelay starts 'relay run' against the embedded server.
func (b *bench) startRelay(name string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--nats-url", b.natsURL, "--log-level", "warn"}
	if b.defaultLogLevel {
		args = args[:2]
	}
	args = append(args, "run", "--allow-net", "127.0.0.0/8", "--metrics-addr", addr)
	args = append(args, b.relayArgs...)
	args = append(args, b.opts.relayExtra...)
	p, _, err := startProc("relay ("+name+")", filepath.Join(b.logDir, "relay-"+name+".log"), childEnv(), false, b.opts.relay, args...)
	if p != nil {
		p.metrics = addr
	}
	return p, err
}

// freeAddr is a loopback address with a port free at the moment.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// relayNotes says how many events relay process p's unknown-destination
// check read (relay_unknown_destination_check_events_total; relay before
// 7e8e507 also counted and listed some, with a label how),
// and how many of its HTTP attempts took longer than 16 and 64 ms
// (relay_attempt_duration_seconds, warm-up included): a tail the attempts do
// not have came from before them (NATS, relay's queue). On failure it says
// why the figures cannot be told.
func (b *bench) relayNotes(ctx context.Context, p *proc) []string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return []string{"relay's metrics: " + err.Error()}
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return []string{"cannot read relay's metrics: " + err.Error()}
	}
	defer resp.Body.Close()
	check := map[string]float64{"counted": 0, "listed": 0, "read": 0}
	unlabelled := false
	var attempts, upTo16, upTo64 float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		for how := range check {
			if name == `relay_unknown_destination_check_events_total{how="`+how+`"}` {
				check[how] = f
			}
		}
		if name == "relay_unknown_destination_check_events_total" {
			// Since 7e8e507 the check reads every event's headers, and
			// the counter has no label.
			check["read"], unlabelled = f, true
		}
		if h, ok := strings.CutPrefix(name, "relay_attempt_duration_seconds_"); ok {
			switch {
			case strings.HasPrefix(h, "count{"):
				attempts += f
			case strings.HasPrefix(h, "bucket{") && strings.HasSuffix(h, `le="0.016"}`):
				upTo16 += f
			case strings.HasPrefix(h, "bucket{") && strings.HasSuffix(h, `le="0.064"}`):
				upTo64 += f
			}
		}
	}
	checkNote := fmt.Sprintf("unknown-destination check in this relay process: %.0f events counted, %.0f listed, %.0f read", check["counted"], check["listed"], check["read"])
	if unlabelled {
		checkNote = fmt.Sprintf("unknown-destination check in this relay process: %.0f events read (their headers)", check["read"])
	}
	return []string{
		checkNote,
		fmt.Sprintf("relay's HTTP attempts (warm-up included): %.0f, of which %.0f took over 16 ms and %.0f over 64 ms", attempts, attempts-upTo16, attempts-upTo64),
	}
}

// --- publishing ---

const bodySize = 1024

var padding = strings.Repeat("x", bodySize)

// makeBody is a 1 KiB JSON event that starts with its publish time:
// {"ts":<unix ns>,"id":"<id>","pad":"xxx..."}.
func makeBody(ts int64, id string) []byte {
	b := make([]byte, 0, bodySize)
	b = append(b, `{"ts":`...)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, `,"id":"`...)
	b = append(b, id...)
	b = append(b, `","pad":"`...)
	b = append(b, padding[:max(bodySize-len(b)-2, 0)]...)
	return append(b, `"}`...)
}

// publisher publishes events asynchronously, as a producer would through
// the subject contract: relay.in.<dest>, or relay.type.<type> for a typed
// event, with Nats-Msg-Id.
type publisher struct {
	js    jetstream.JetStream
	errs  atomic.Int64
	mu    sync.Mutex
	first error
}

// maxPending bounds the publishes waiting for their PubAck.
const maxPending = 100_000

func newPublisher(nc *nats.Conn) (*publisher, error) {
	p := &publisher{}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(time.Minute),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) { p.fail(err) }))
	if err != nil {
		return nil, err
	}
	p.js = js
	return p, nil
}

func (p *publisher) fail(err error) {
	p.errs.Add(1)
	p.mu.Lock()
	if p.first == nil {
		p.first = err
	}
	p.mu.Unlock()
}

func (p *publisher) publish(dest, id string) error {
	return p.publishTo(stream.InSubject(dest, ""), id)
}

func (p *publisher) publishTo(subject, id string) error {
	m := stream.Envelope{ID: id, Body: makeBody(time.Now().UnixNano(), id)}.Msg(stream.Produced, subject, nil)
	if _, err := p.js.PublishMsgAsync(m); err != nil {
		return fmt.Errorf("publish %s: %w", id, err)
	}
	return nil
}

// wait waits until every publish so far is acknowledged, and fails if any
// was refused.
func (p *publisher) wait(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("%d publishes still unacknowledged after 2m", p.js.PublishAsyncPending())
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := p.errs.Load(); n > 0 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Errorf("%d publishes failed; the first: %w", n, p.first)
	}
	return nil
}

// backlog publishes n events spread round-robin over subjects, with at
// most window unacknowledged at a time, and returns how long it took.
func (p *publisher) backlog(ctx context.Context, subjects []string, prefix string, n, window int) (time.Duration, error) {
	start := time.Now()
	for i := range n {
		if err := p.publishTo(subjects[i%len(subjects)], prefix+strconv.Itoa(i)); err != nil {
			return 0, err
		}
		if (i+1)%window == 0 {
			if err := p.wait(ctx); err != nil {
				return 0, err
			}
		}
	}
	if err := p.wait(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// atRate publishes to dest at rate events/s for dur, paced by a ticker
// (each tick publishes what is due), then waits for the PubAcks. It returns
// the number published.
func (p *publisher) atRate(ctx context.Context, dest, prefix string, rate float64, dur, tick time.Duration) (int, error) {
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	sent := 0
	for {
		el := time.Since(start)
		if el >= dur {
			break
		}
		due := int(rate * el.Seconds())
		for ; sent < due; sent++ {
			if err := p.publish(dest, prefix+strconv.Itoa(sent)); err != nil {
				return sent, err
			}
		}
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-t.C:
		}
	}
	return sent, p.wait(ctx)
}

// --- the minimal loop ---

// loop is the baseline consumer: a durable pull consumer on one
// destination's subjects, worker goroutines that POST each event to the sink
// and Ack it on 2xx (Nak otherwise). No retry policy, no dead letters, no
// signing, no metrics.
type loop struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	iter    jetstream.MessagesContext
	durable string
	done    chan struct{}
}

func (b *bench) startLoop(ctx context.Context, dest string, workers int) (l *loop, err error) {
	// Label the loop's goroutines (its NATS client's and HTTP transport's
	// too, which start from here) for -cpuprofile: part=minimal-loop.
	pprof.Do(ctx, pprof.Labels("part", "minimal-loop"), func(ctx context.Context) {
		l, err = startLoop(ctx, b.natsURL, b.sinkURL(dest), dest, workers)
	})
	return l, err
}

// startLoop starts the minimal loop on dest's subjects: a durable pull
// consumer, Messages(), workers goroutines that POST each event to url and
// ack it on 2xx. It runs in the bench process, or in a process of its own
// (relay-bench loop, see runLoopProc).
func startLoop(ctx context.Context, natsURL, url, dest string, workers int) (*loop, error) {
	// Reconnecting as relay does (stream.Connect), to another node of
	// scenario (r)'s cluster when one goes.
	nc, err := nats.Connect(natsURL, nats.Name("relay-bench minimal loop"), nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	l := &loop{nc: nc, js: js, durable: "bench_" + dest, done: make(chan struct{})}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(cctx, stream.EventsStream, jetstream.ConsumerConfig{
		Durable:        l.durable,
		FilterSubjects: stream.DestFilters(dest),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxDeliver:     -1,
		MaxAckPending:  10_000,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("minimal loop consumer: %w", err)
	}
	l.iter, err = cons.Messages()
	if err != nil {
		nc.Close()
		return nil, err
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil, MaxIdleConns: 2 * workers, MaxIdleConnsPerHost: 2 * workers, IdleConnTimeout: 90 * time.Second,
	}}
	ch := make(chan jetstream.Msg, workers)
	go func() {
		defer close(ch)
		for {
			m, err := stream.NextMsg(context.Background(), l.iter, nc) // as relay does: without it the loop stalls now and then
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // a missed heartbeat and the like: the client retries
				continue
			}
			ch <- m
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for m := range ch {
				st, err := post(client, url, stream.FromHeader(m.Headers()).ID, m.Data())
				if err == nil && st >= 200 && st <= 299 {
					_ = m.Ack()
				} else {
					_ = m.Nak()
				}
			}
		})
	}
	go func() {
		wg.Wait()
		client.CloseIdleConnections()
		close(l.done)
	}()
	return l, nil
}

// stop ends the loop: no more pulls, the workers finish what they hold,
// pending acks are flushed, and the consumer is deleted.
func (l *loop) stop() error {
	l.iter.Stop()
	var err error
	select {
	case <-l.done:
	case <-time.After(30 * time.Second):
		err = errors.New("minimal loop workers did not stop within 30s")
	}
	_ = l.nc.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if derr := l.js.DeleteConsumer(ctx, stream.EventsStream, l.durable); derr != nil && err == nil {
		err = fmt.Errorf("delete consumer %s: %w", l.durable, derr)
	}
	l.nc.Close()
	return err
}

// post sends one delivery the way the baselines do.
func post(c *http.Client, url, id string, body []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// --- redis-server ---

func (b *bench) startRedis(ctx context.Context) (*proc, *redis.Client, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, nil, errors.New("redis-server is not installed (scenario f needs it): apt-get install -y redis-server, or leave f out of -scenarios")
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	dir := filepath.Join(b.tmp, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	p, _, err := startProc("redis-server", filepath.Join(b.logDir, "redis.log"), childEnv(), false, path,
		"--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning")
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return p, c, nil
		}
		if p.exited() {
			c.Close()
			return nil, nil, p.exitError()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.Close()
			_ = p.stop(2 * time.Second)
			return nil, nil, fmt.Errorf("redis-server on %s did not answer PING within 10s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// profileRelay fetches, with -relay-cpuprofile, a CPU profile of relay
// process p from its /debug/pprof/profile (on its --metrics-addr), from as
// soon as it answers, for -relay-cpuprofile-for, into <prefix>.<name>. The
// channel gets one note once the profile is written or has failed; nil
// without the flag. Receive from it before stopping p.
func (b *bench) profileRelay(ctx context.Context, p *proc, name string) <-chan string {
	if b.opts.relayProf == "" {
		return nil
	}
	path := b.opts.relayProf + "." + name
	secs := int(b.opts.relayProfFor.Seconds())
	done := make(chan string, 1)
	go func() {
		err := b.fetchProfile(ctx, p, path, secs)
		if err != nil {
			done <- fmt.Sprintf("relay CPU profile %s: %v", path, err)
			return
		}
		done <- fmt.Sprintf("relay CPU profile: %s (%ds from relay's start; go tool pprof -top %s %s)", path, secs, b.opts.relay, path)
	}()
	return done
}

func (b *bench) fetchProfile(ctx context.Context, p *proc, path string, secs int) error {
	url := "http://" + p.metrics + "/debug/pprof/profile?seconds=" + strconv.Itoa(secs)
	c := &http.Client{Timeout: time.Duration(secs)*time.Second + time.Minute, Transport: &http.Transport{Proxy: nil}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				return fmt.Errorf("%s: status %d: %s", url, resp.StatusCode, bytes.TrimSpace(msg))
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", url, err)
			}
			return f.Close()
		}
		// relay serves its metrics address a moment after it starts.
		if p.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// lastSeq is the events stream's last sequence.
func (b *bench) lastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.LastSeq, nil
}

// watchCopies polls the events stream until its last sequence reaches
// base + copies (base: read before relay process p started; nothing else
// writes to the stream meanwhile), and sends how long after start that was
// (0 if it could not tell: p exited, or not within the bench's limit).
func (b *bench) watchCopies(ctx context.Context, p *proc, base uint64, copies int, start time.Time) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var at time.Duration
		_ = waitFor(ctx, p, limitFor(copies), 20*time.Millisecond, "copies stored", func(ctx context.Context) (bool, error) {
			seq, err := b.lastSeq(ctx)
			if err == nil && seq >= base+uint64(copies) {
				at = time.Since(start)
				return true, nil
			}
			return false, err
		})
		out <- at
	}()
	return out
}
