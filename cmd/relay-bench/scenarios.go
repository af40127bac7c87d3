package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// result is one measured run: relay or a baseline in one scenario.
type result struct {
	Scenario    string `json:"scenario"` // a..g
	Title       string `json:"title"`
	System      string `json:"system"`                // relay, minimal loop, redis list sequential
	Round       int    `json:"round,omitempty"`       // (a): which of -a-rounds
	Subscribers int    `json:"subscribers,omitempty"` // (g): destinations subscribed to the events' type
	Events      int    `json:"events"`
	// Delivered counts deliveries: (destination, webhook-id) pairs the sink
	// answered 2xx. In (g) each event is delivered once per subscriber.
	Delivered  int64   `json:"delivered"`
	Requests   int64   `json:"requests"`
	Failed     int64   `json:"failed_requests"`
	Duplicates int64   `json:"duplicates"`
	Conns      int64   `json:"sink_connections"` // TCP connections the sink accepted
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"deliveries_per_second"`
	// Latency from the body's publish time to the sink's receipt of the 2xx
	// request. In the drain scenarios it is mostly time spent in the backlog.
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	Maxms       float64 `json:"max_ms"`
	LatencyKind string  `json:"latency_kind"`
	ProcCPU     float64 `json:"process_cpu_seconds,omitempty"`
	ProcCPUPer1 float64 `json:"process_cpu_seconds_per_1000,omitempty"`
	ProcRSSMB   float64 `json:"process_peak_rss_mb,omitempty"`
	SinkCPU     float64 `json:"sink_cpu_seconds"`
	BenchCPU    float64 `json:"bench_process_cpu_seconds"` // embedded NATS + publisher (+ minimal loop with -loop-in-bench)
	RedisCPU    float64 `json:"redis_cpu_seconds,omitempty"`
	SystemCPU   float64 `json:"system_busy_cpu_seconds"` // all processes, from /proc/stat
	OtherCPU    float64 `json:"other_cpu_seconds"`       // SystemCPU minus relay, sink, bench, redis and the NATS nodes
	// NATSMsgs is the messages into and out of the embedded NATS server in
	// the interval, all connections: what the consumer asks of the server.
	// In (r), of the three nodes, routes included (none for a node restart).
	NATSMsgs int64   `json:"nats_messages"`
	VsLoop   float64 `json:"ratio_to_minimal_loop_a,omitempty"`
	// RefRate, in (e): relay's deliveries/s to one destination in the runs
	// just before and after (their mean), the same events on the same
	// machine minutes closer than (a).
	RefRate     float64 `json:"reference_rate,omitempty"`
	VsRelayA    float64 `json:"ratio_to_relay_a,omitempty"` // (g): deliveries/s over (a)'s median relay rate
	VsDirect    float64 `json:"ratio_to_direct,omitempty"`  // (p): events/s over direct JetStream publishing's in the same round
	VsFloor     float64 `json:"ratio_to_floor,omitempty"`   // (p): events/s over the minimal handler's in the same round
	Rate        float64 `json:"target_rate_per_second,omitempty"`
	PublishSecs float64 `json:"publish_seconds,omitempty"`
	PublishRate float64 `json:"publish_rate_per_second,omitempty"`
	FirstMs     float64 `json:"first_delivery_ms,omitempty"` // from the start of the measured interval
	// NATSBaseMB and NATSRSSMB are the bench process's RSS after a GC (the
	// embedded NATS server) before and after publishing, in (k).
	NATSBaseMB float64 `json:"nats_rss_before_mb,omitempty"`
	NATSRSSMB  float64 `json:"nats_rss_after_mb,omitempty"`
	// (h) only: destinations, seconds from start to /readyz 200, RSS then,
	// and seconds from SIGTERM to exit.
	Dests      int      `json:"destinations,omitempty"`
	ReadySecs  float64  `json:"ready_seconds,omitempty"`
	ReadyRSSMB float64  `json:"ready_rss_mb,omitempty"`
	StopSecs   float64  `json:"stop_seconds,omitempty"`
	Notes      []string `json:"notes,omitempty"`

	// (r): the CPU of the cluster's three nodes, and what a node restart
	// did.
	NodesCPU float64         `json:"nats_nodes_cpu_seconds,omitempty"`
	Restart  *restartFigures `json:"restart,omitempty"`
}

// cpuMark is the CPU counters at the start of a measured interval.
type cpuMark struct {
	bench, sink, system, nodes float64
	natsMsgs                   int64
}

func (b *bench) mark() cpuMark {
	s, _ := b.sink.sample()
	m := cpuMark{bench: selfCPU(), sink: s, system: systemBusy(), natsMsgs: b.natsMsgs()}
	if b.cluster != nil {
		m.nodes = b.cluster.cpu()
	}
	return m
}

// natsMsgs is the messages the embedded server (or (r)'s cluster) has
// received and sent.
func (b *bench) natsMsgs() int64 {
	if b.cluster != nil {
		return b.cluster.msgs()
	}
	if b.ns == nil {
		return 0
	}
	v, err := b.ns.Varz(nil)
	if err != nil {
		return 0
	}
	return v.InMsgs + v.OutMsgs
}

// finish fills in the sink's figures and the CPU used since m.
// start is when the measured interval began, first when the sink first
// counted a delivery (zero: unknown).
func (b *bench) finish(ctx context.Context, r *result, m cpuMark, start, first time.Time, el time.Duration) error {
	s, _ := b.sink.sample()
	r.BenchCPU = selfCPU() - m.bench
	r.SinkCPU = s - m.sink
	r.SystemCPU = systemBusy() - m.system
	r.NATSMsgs = b.natsMsgs() - m.natsMsgs
	if b.cluster != nil {
		r.NodesCPU = b.cluster.cpu() - m.nodes
	}
	st, err := b.sinkStats(ctx)
	if err != nil {
		return err
	}
	r.Seconds = el.Seconds()
	r.Delivered, r.Requests, r.Failed, r.Duplicates, r.Conns = st.Delivered, st.Requests, st.Failed, st.Duplicates, st.Conns
	r.PerSecond = float64(st.Delivered) / el.Seconds()
	r.P50ms, r.P99ms, r.Maxms = st.P50ms, st.P99ms, st.Maxms
	if r.LatencyKind == "publish-to-delivery" {
		r.Notes = append(r.Notes, st.Late.String())
	}
	if b.loopRateA > 0 && r.System != "minimal loop" && r.Scenario != "b" {
		r.VsLoop = r.PerSecond / b.loopRateA
	}
	if r.ProcCPU > 0 && r.Delivered > 0 {
		r.ProcCPUPer1 = r.ProcCPU / float64(r.Delivered) * 1000
	}
	if !first.IsZero() {
		r.FirstMs = float64(first.Sub(start)) / 1e6
	}
	return nil
}

// procFigures records the CPU used since cpu0 and the peak RSS of p: relay,
// or the minimal loop when it runs as a process of its own.
func (r *result) procFigures(p *proc, cpu0 float64) {
	cpu, hwm := p.sample()
	r.ProcCPU = cpu - cpu0
	r.ProcRSSMB = float64(hwm) / 1024
}

// relayDrain publishes n events spread over dests before relay runs, then
// starts a fresh relay process and times it until the sink has all n.
func (b *bench) relayDrain(ctx context.Context, r *result, dests []string, n int) error {
	return b.relayRun(ctx, r, dests, n, false)
}

// relayRun is relayDrain, or with live set: it starts relay first, waits
// until its unknown-destination check runs, and publishes the n events
// while relay delivers them, timed from the first publish.
func (b *bench) relayRun(ctx context.Context, r *result, dests []string, n int, live bool) error {
	w := workload{dests: dests, deliveries: n, publish: func(ctx context.Context) error { return b.publishFor(ctx, r, dests, n) }}
	return b.relayRunWork(ctx, r, w, live)
}

// workload is what a relay measurement publishes and waits for.
type workload struct {
	dests      []string // the destinations that deliver it
	deliveries int      // the deliveries the sink must count
	publish    func(context.Context) error
	// copies, if not 0, is how many messages relay's router adds to the
	// events stream: the run notes when they were all stored.
	copies int
}

// relayRunWork is relayRun for any workload: w.publish publishes it (before
// relay starts, or with live set once relay runs), and the measurement
// ends when the sink has w.deliveries.
func (b *bench) relayRunWork(ctx context.Context, r *result, w workload, live bool) error {
	dests, n := w.dests, w.deliveries
	if err := b.settleUnrouted(ctx); err != nil {
		return err
	}
	if !live {
		if err := w.publish(ctx); err != nil {
			return err
		}
		logf("  starting relay")
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	name := r.Scenario
	if r.Round > 1 {
		name += strconv.Itoa(r.Round)
	}
	if r.Subscribers > 0 {
		name += strconv.Itoa(r.Subscribers)
	}
	before := ""
	if live {
		// A lease left by a relay process that was killed: the new one
		// must take over (CheckTakeover, 10s) before it holds the check.
		h, err := b.checkHolder(ctx)
		if err != nil {
			return err
		}
		before = h
	}
	var base uint64
	if w.copies > 0 && !live {
		var err error
		if base, err = b.lastSeq(ctx); err != nil {
			return err
		}
	}
	m := b.mark()
	start := time.Now()
	p, err := b.startRelay(name)
	if err != nil {
		return err
	}
	defer p.stop(20 * time.Second)
	profiled := b.profileRelay(ctx, p, name)
	var copied <-chan time.Duration
	if w.copies > 0 && !live {
		copied = b.watchCopies(ctx, p, base, w.copies, start)
	}
	cpu0 := 0.0 // a fresh process: all its CPU, start-up included
	if live {
		if err := b.waitCheckHeld(ctx, p, before); err != nil {
			return err
		}
		cpu0, _ = p.sample()
		m, start = b.mark(), time.Now()
		if err := w.publish(ctx); err != nil {
			return err
		}
	}
	first, err := b.waitDelivered(ctx, int64(n), p, limitFor(n))
	if err != nil {
		return err
	}
	el := time.Since(start)
	r.procFigures(p, cpu0)
	if err := b.finish(ctx, r, m, start, first, el); err != nil {
		return err
	}
	if live {
		r.Notes = append(r.Notes, "published while relay ran (-a-live), timed from the first publish")
	}
	r.Notes = append(r.Notes, b.relayNotes(ctx, p)...)
	if note := logErrors(p.logPath); note != "" {
		r.Notes = append(r.Notes, note)
	}
	if note := b.redeliveries(ctx, dests, n); note != "" {
		r.Notes = append(r.Notes, note)
	}
	if profiled != nil {
		r.Notes = append(r.Notes, <-profiled)
	}
	if copied != nil {
		if d := <-copied; d > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("the router had stored all %d copies %.2fs after relay started (%.0f%% of the run)", w.copies, d.Seconds(), 100*d.Seconds()/r.Seconds))
		} else {
			r.Notes = append(r.Notes, "could not tell when the router had stored every copy")
		}
	}
	if err := p.stop(20 * time.Second); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	return nil
}

// publishFor publishes n events spread over dests, as a backlog (async, in
// windows), and records how long that took in r.
func (b *bench) publishFor(ctx context.Context, r *result, dests []string, n int) error {
	subjects := make([]string, len(dests))
	for i, d := range dests {
		subjects[i] = stream.InSubject(d, "")
	}
	return b.publishTo(ctx, r, subjects, dests[0]+"-", n) // event ids: distinct across rounds, or JetStream drops them as duplicates
}

// publishTo publishes n events spread over subjects, with ids prefix<i>,
// as publishFor does.
func (b *bench) publishTo(ctx context.Context, r *result, subjects []string, prefix string, n int) error {
	logf("  publishing %d events (async, windows of %d)", n, b.opts.window)
	pd, err := b.pub.backlog(ctx, subjects, prefix, n, b.opts.window)
	if err != nil {
		return err
	}
	r.PublishSecs, r.PublishRate = pd.Seconds(), float64(n)/pd.Seconds()
	logf("  published in %.1fs (%.0f/s)", pd.Seconds(), r.PublishRate)
	return nil
}

// scenarioA: throughput of a 50,000-event backlog, relay and the minimal
// loop, in -a-rounds rounds (alternating which goes first), since one
// pair of runs on a shared 2-core machine varies by several points. Each
// run has a new NATS server: on one server, the runs with fewer events
// before them in the stream had the advantage (-aa: the loop against
// itself, 100-110% in the slot that went first in two rounds of three).
func (b *bench) scenarioA(ctx context.Context) ([]*result, error) {
	n := b.opts.n
	var out, relays, loops []*result
	for k := 1; k <= b.opts.aRounds; k++ {
		dest, loopDest := "a", "loop"
		if k > 1 {
			dest, loopDest = "a"+strconv.Itoa(k), "loop"+strconv.Itoa(k)
		}
		r := &result{Scenario: "a", Title: "throughput", System: "relay", Round: k, Events: n, LatencyKind: "queue"}
		l := &result{Scenario: "a", Title: "throughput", System: "minimal loop", Round: k, Events: n, LatencyKind: "queue"}
		runRelay := func() error {
			if err := b.freshNATS(ctx); err != nil {
				return err
			}
			if b.opts.aa {
				if err := b.loopRun(ctx, r, dest, n, b.opts.aLive); err != nil {
					return fmt.Errorf("(a) minimal loop in relay's place (-aa), round %d: %w", k, err)
				}
				logf("  minimal loop in relay's place (-aa): %d delivered in %.2fs = %.0f/s", r.Delivered, r.Seconds, r.PerSecond)
				return nil
			}
			if err := b.addDest(ctx, destination.Destination{Name: dest}); err != nil {
				return err
			}
			if err := b.relayRun(ctx, r, []string{dest}, n, b.opts.aLive); err != nil {
				return fmt.Errorf("(a) relay, round %d: %w", k, err)
			}
			logf("  relay: %d delivered in %.2fs = %.0f/s", r.Delivered, r.Seconds, r.PerSecond)
			return nil
		}
		runLoop := func() error {
			if err := b.freshNATS(ctx); err != nil {
				return err
			}
			if err := b.loopRun(ctx, l, loopDest, n, b.opts.aLive); err != nil {
				return fmt.Errorf("(a) minimal loop, round %d: %w", k, err)
			}
			logf("  minimal loop: %d delivered in %.2fs = %.0f/s", l.Delivered, l.Seconds, l.PerSecond)
			return nil
		}
		if err := inTurn(k, runRelay, runLoop); err != nil {
			return nil, err
		}
		r.VsLoop = r.PerSecond / l.PerSecond
		relays, loops = append(relays, r), append(loops, l)
		out = append(out, r, l)
	}
	b.relayRateA = medianRate(relays)
	b.loopRateA = medianRate(loops)
	return out, nil
}

// inTurn runs steps in order in odd rounds and in reverse in even ones, so
// that neither side of a comparison always runs first (on a cold or a warm
// machine). It stops at the first error.
func inTurn(round int, steps ...func() error) error {
	steps = slices.Clone(steps)
	if round%2 == 0 {
		slices.Reverse(steps)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// medianRate is the median deliveries/s of rs (the lower middle one of an
// even count).
func medianRate(rs []*result) float64 {
	v := make([]float64, len(rs))
	for i, x := range rs {
		v[i] = x.PerSecond
	}
	return median(v)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// loopRun is relayRun for the minimal loop on dest: its events published
// before it starts, or with live set, once it consumes.
func (b *bench) loopRun(ctx context.Context, r *result, dest string, n int, live bool) error {
	if err := b.addPausedDest(ctx, dest); err != nil {
		return err
	}
	if !live {
		if err := b.publishFor(ctx, r, []string{dest}, n); err != nil {
			return err
		}
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	m := b.mark()
	start := time.Now()
	l, lp, err := b.startLoopRunner(ctx, dest) // returns once the loop consumes
	if err != nil {
		return err
	}
	cpu0 := 0.0
	if live {
		if lp != nil {
			cpu0, _ = lp.sample()
		}
		m, start = b.mark(), time.Now()
		if err := b.publishFor(ctx, r, []string{dest}, n); err != nil {
			_ = l.stop()
			return err
		}
		r.Notes = append(r.Notes, "published while the loop ran (-a-live), timed from the first publish")
	}
	first, werr := b.waitDelivered(ctx, int64(n), lp, limitFor(n))
	el := time.Since(start)
	if werr != nil {
		_ = l.stop()
		return werr
	}
	if lp != nil {
		r.procFigures(lp, cpu0)
	}
	if err := b.finish(ctx, r, m, start, first, el); err != nil {
		_ = l.stop()
		return err
	}
	return l.stop()
}

// scenarioB: publish-to-delivery latency at fixed rates, relay against
// the minimal loop at the same rate: 5,000/s and half of the loop's (a)
// rate (its median), or only -rate when given.
func (b *bench) scenarioB(ctx context.Context) ([]*result, error) {
	type step struct {
		rate        float64
		title, note string
	}
	var steps []step
	switch {
	case b.opts.rate > 0:
		steps = []step{{b.opts.rate, "latency at -rate", ""}}
	case b.loopRateA > 0:
		steps = []step{{5000, "latency at 5,000/s", ""}, {b.loopRateA / 2, "latency at 50% of the loop's max", "rate: 50% of (a)'s minimal-loop rate (the median of its rounds)"}}
	default:
		steps = []step{{5000, "latency at 5,000/s", ""}}
	}
	var out []*result
	for i, st := range steps {
		dest, loopDest := "b", "loopb"
		if i > 0 {
			dest, loopDest = "b"+strconv.Itoa(i+1), "loopb"+strconv.Itoa(i+1)
		}
		rs, err := b.latencyAt(ctx, st.rate, st.title, st.note, dest, loopDest)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// latencyAt measures the minimal loop on loopDest and then relay on dest,
// each publishing at rate.
func (b *bench) latencyAt(ctx context.Context, rate float64, title, note, dest, loopDest string) ([]*result, error) {
	var out []*result
	// Each measurement on a new server: the second on one server (with
	// the first's events in its stream) measured up to 3x the first's p99
	// when both were the minimal loop (-aa).
	loopAt := func(l *result, dest string, dur time.Duration) error {
		if err := b.freshNATS(ctx); err != nil {
			return err
		}
		if err := b.addPausedDest(ctx, dest); err != nil {
			return err
		}
		lr, lp, err := b.startLoopRunner(ctx, dest)
		if err != nil {
			return err
		}
		err = b.atRateMeasured(ctx, l, dest, rate, dur, lp)
		if serr := lr.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("(b) minimal loop at %.0f/s: %w", rate, err)
		}
		logf("  minimal loop at %.0f/s: p50 %.2fms p99 %.2fms max %.2fms", rate, l.P50ms, l.P99ms, l.Maxms)
		return nil
	}
	if b.opts.loopDuration > 0 {
		l := &result{Scenario: "b", Title: title, System: "minimal loop", Rate: rate, LatencyKind: "publish-to-delivery"}
		if err := loopAt(l, loopDest, b.opts.loopDuration); err != nil {
			return nil, err
		}
		out = append(out, l)
	}

	r := &result{Scenario: "b", Title: title, System: "relay", Rate: rate, LatencyKind: "publish-to-delivery"}
	if note != "" {
		r.Notes = append(r.Notes, note)
	}
	if !b.opts.sharedNATS {
		r.Notes = append(r.Notes, "measured on a new NATS server, as the minimal loop was (the second on one server measured up to 3x the first's p99 in -aa runs)")
	}
	if b.opts.aa {
		r.Notes = append(r.Notes, "-aa: the minimal loop in relay's place")
		if err := loopAt(r, dest, b.opts.duration); err != nil {
			return nil, err
		}
		return append(out, r), nil
	}
	if err := b.freshNATS(ctx); err != nil {
		return nil, err
	}
	if err := b.addDest(ctx, destination.Destination{Name: dest}); err != nil {
		return nil, err
	}
	p, err := b.startRelay(dest)
	if err != nil {
		return nil, err
	}
	defer p.stop(20 * time.Second)
	if err := b.atRateMeasured(ctx, r, dest, rate, b.opts.duration, p); err != nil {
		return nil, fmt.Errorf("(b) relay at %.0f/s: %w", rate, err)
	}
	r.Notes = append(r.Notes, b.relayNotes(ctx, p)...)
	if err := p.stop(20 * time.Second); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	logf("  relay at %.0f/s: p50 %.2fms p99 %.2fms max %.2fms", rate, r.P50ms, r.P99ms, r.Maxms)
	return append(out, r), nil
}

// atRateMeasured warms dest up for a second at rate (until those events are
// delivered and, with relay, its unknown-destination check has caught up), then
// publishes at rate for dur and waits until all of it is delivered.
func (b *bench) atRateMeasured(ctx context.Context, r *result, dest string, rate float64, dur time.Duration, p *proc) error {
	warm, err := b.pub.atRate(ctx, dest, dest+"-warm-", rate, time.Second, b.opts.tick)
	if err != nil {
		return err
	}
	if _, err := b.waitDelivered(ctx, int64(warm), p, 2*time.Minute); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if p != nil && r.System == "relay" && !b.opts.aa {
		if err := b.waitCheckCaughtUp(ctx, p, 5*time.Minute); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if err := b.waitConsumerIdle(ctx, destination.ConsumerName(dest), p, time.Minute); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	var relay0 float64
	if p != nil {
		relay0, _ = p.sample()
	}
	m := b.mark()
	start := time.Now()
	logf("  publishing to %s at %.0f/s for %s", dest, rate, dur)
	n, err := b.pub.atRate(ctx, dest, dest+"-", rate, dur, b.opts.tick)
	if err != nil {
		return err
	}
	if _, err := b.waitDelivered(ctx, int64(n), p, time.Minute+dur); err != nil {
		return err
	}
	el := time.Since(start)
	r.Events = n
	if p != nil {
		r.procFigures(p, relay0)
	}
	return b.finish(ctx, r, m, time.Time{}, time.Time{}, el)
}

// scenarioC: 10% of requests answered 503.
func (b *bench) scenarioC(ctx context.Context) ([]*result, error) {
	n := b.opts.failN
	r := &result{Scenario: "c", Title: "10% answered 503", System: "relay", Events: n, LatencyKind: "queue"}
	d := destination.Destination{Name: "c", URL: b.sinkURL("c") + "?fail=10",
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(time.Second), NoJitter: true}}
	if err := b.addDest(ctx, d); err != nil {
		return nil, err
	}
	if err := b.relayDrain(ctx, r, []string{"c"}, n); err != nil {
		return nil, fmt.Errorf("(c) relay: %w", err)
	}
	r.Notes = append(r.Notes, "retry policy: base 100ms, max 1s, no jitter; 503s chosen by a hash of webhook-id and attempt")
	logf("  relay: %d delivered in %.2fs = %.0f/s, %d requests (%d answered 503)", r.Delivered, r.Seconds, r.PerSecond, r.Requests, r.Failed)
	return []*result{r}, nil
}

// scenarioD: a large backlog published before relay starts.
func (b *bench) scenarioD(ctx context.Context) ([]*result, error) {
	n := b.opts.backlog
	r := &result{Scenario: "d", Title: "backlog", System: "relay", Events: n, LatencyKind: "queue"}
	if err := b.addDest(ctx, destination.Destination{Name: "d"}); err != nil {
		return nil, err
	}
	if err := b.relayDrain(ctx, r, []string{"d"}, n); err != nil {
		return nil, fmt.Errorf("(d) relay: %w", err)
	}
	logf("  relay: drained %d in %.1fs = %.0f/s, peak RSS %.1f MB", r.Delivered, r.Seconds, r.PerSecond, r.ProcRSSMB)
	return []*result{r}, nil
}

// scenarioE: 100 destinations on the same sink, events round-robin.
//
// Each run of 100 destinations is judged against relay with one
// destination, the same events, in the runs just before and after it: the
// machine's speed drifts by 10-30% over the minutes between (a) and (e)
// (the micro-benchmarks of one make bench, minutes apart, moved that much).
func (b *bench) scenarioE(ctx context.Context) ([]*result, error) {
	var out []*result
	ref := func(k int) (*result, error) {
		r := &result{Scenario: "e", Title: refTitle, System: "relay", Round: k, Events: b.opts.n, LatencyKind: "queue"}
		if err := b.freshNATS(ctx); err != nil {
			return nil, err
		}
		dest := "eref" + strconv.Itoa(k)
		if err := b.addDest(ctx, destination.Destination{Name: dest}); err != nil {
			return nil, err
		}
		if err := b.relayDrain(ctx, r, []string{dest}, b.opts.n); err != nil {
			return nil, fmt.Errorf("(e) reference: %w", err)
		}
		logf("  relay (%s): %d delivered in %.2fs = %.0f/s", r.Title, r.Delivered, r.Seconds, r.PerSecond)
		out = append(out, r)
		return r, nil
	}
	before, err := ref(1)
	if err != nil {
		return nil, err
	}
	for k, shared := range []bool{false, true} {
		if err := b.freshNATS(ctx); err != nil {
			return nil, err
		}
		r, err := b.manyDests(ctx, shared)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		after, err := ref(k + 2)
		if err != nil {
			return nil, err
		}
		r.RefRate = (before.PerSecond + after.PerSecond) / 2
		before = after
	}
	return out, nil
}

// refTitle is the title of (e)'s runs of one destination.
const refTitle = "1 destination (reference)"

// manyDests is one run of (e): 100 destinations, each with a consumer of
// its own, or shared (served by the shared consumer).
func (b *bench) manyDests(ctx context.Context, shared bool) (*result, error) {
	n := b.opts.n
	r := &result{Scenario: "e", Title: "100 destinations, a consumer each", System: "relay", Events: n, LatencyKind: "queue"}
	prefix := "e"
	if shared {
		r.Title, prefix = "100 destinations, shared", "es"
	}
	dests := make([]string, 100)
	for i := range dests {
		dests[i] = prefix + strconv.Itoa(i)
		if err := b.addDest(ctx, destination.Destination{Name: dests[i], Shared: shared}); err != nil {
			return nil, err
		}
	}
	if err := b.relayDrain(ctx, r, dests, n); err != nil {
		return nil, fmt.Errorf("(e) relay: %w", err)
	}
	st, err := b.sinkStats(ctx)
	if err != nil {
		return nil, err
	}
	r.Notes = append(r.Notes, perDest(st, dests, 0))
	logf("  relay (%s): %d delivered in %.2fs = %.0f/s", r.Title, r.Delivered, r.Seconds, r.PerSecond)
	return r, nil
}

// scenarioG: fan-out. For each of -g-subscribers, that many destinations
// subscribe to one event type; -g-deliveries / subscribers typed events of
// that type are published before relay starts, and relay is timed until the
// sink has every subscriber's copy of every event. Its router copies each
// event to relay.in.<dest> for every subscriber, and those copies are
// delivered like any other event.
func (b *bench) scenarioG(ctx context.Context) ([]*result, error) {
	var out []*result
	for _, subs := range b.opts.gSubscribers {
		events := b.opts.gDeliveries / subs
		run := "g" + strconv.Itoa(subs)
		r := &result{Scenario: "g", Title: "fan-out", System: "relay", Subscribers: subs, Events: events, LatencyKind: "queue"}
		if b.opts.shared {
			r.Title = "fan-out (shared)"
		}
		dests := make([]string, subs)
		for i := range dests {
			// Each subscriber its own URL path at the sink, which counts
			// deliveries per (destination, webhook-id).
			dests[i] = run + "-" + strconv.Itoa(i)
			if err := b.addDest(ctx, destination.Destination{Name: dests[i], Types: []string{run + ".*"}, Shared: b.opts.shared}); err != nil {
				return nil, err
			}
		}
		typed := []string{stream.TypeSubject(run + ".created")}
		// Shared subscribers get one fan-out message per stream.FanChunk
		// of them, not a copy each.
		copies := events * subs
		if b.opts.shared {
			copies = events * ((subs + stream.FanChunk - 1) / stream.FanChunk)
		}
		w := workload{dests: dests, deliveries: events * subs, copies: copies, publish: func(ctx context.Context) error {
			return b.publishTo(ctx, r, typed, run+"-", events)
		}}
		if err := b.relayRunWork(ctx, r, w, false); err != nil {
			return nil, fmt.Errorf("(g) relay, %d subscribers: %w", subs, err)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%d typed events of type %s.created x %d subscribers = %d deliveries", events, run, subs, events*subs))
		st, err := b.sinkStats(ctx)
		if err != nil {
			return nil, err
		}
		r.Notes = append(r.Notes, perDest(st, dests, int64(events)))
		if b.relayRateA > 0 {
			r.VsRelayA = r.PerSecond / b.relayRateA
		}
		logf("  relay, %d subscribers: %d delivered in %.2fs = %.0f deliveries/s", subs, r.Delivered, r.Seconds, r.PerSecond)
		out = append(out, r)
	}
	return out, nil
}

// perDest says how many deliveries each of dests got, and which got other
// than want (want 0: no expectation).
func perDest(st sinkStats, dests []string, want int64) string {
	lo, hi := int64(-1), int64(0)
	var off []string
	for _, d := range dests {
		c := st.ByDest[d]
		if lo < 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
		if want > 0 && c != want {
			off = append(off, fmt.Sprintf("%s %d", d, c))
		}
	}
	s := fmt.Sprintf("per destination: %d to %d delivered", lo, hi)
	if len(off) > 0 {
		s += fmt.Sprintf("; NOT %d: %s", want, strings.Join(off, ", "))
	}
	return s
}

// scenarioF: the design relay started from, a Redis list worked by one
// goroutine, one event at a time, in a process of its own (relay-bench
// redis-sender).
func (b *bench) scenarioF(ctx context.Context) ([]*result, error) {
	n := b.opts.redisN
	r := &result{Scenario: "f", Title: "redis list sequential", System: "redis list sequential", Events: n, LatencyKind: "queue"}
	rp, rc, err := b.startRedis(ctx)
	if err != nil {
		return nil, fmt.Errorf("(f): %w", err)
	}
	defer rp.stop(5 * time.Second)
	defer rc.Close()
	const key = "relay-bench:events"
	logf("  LPUSH %d events", n)
	start := time.Now()
	for i := 0; i < n; {
		pipe := rc.Pipeline()
		for j := 0; j < 1000 && i < n; j, i = j+1, i+1 {
			id := "f-" + strconv.Itoa(i)
			pipe.LPush(ctx, key, id+"\n"+string(makeBody(time.Now().UnixNano(), id)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("(f) LPUSH: %w", err)
		}
	}
	pd := time.Since(start)
	r.PublishSecs, r.PublishRate = pd.Seconds(), float64(n)/pd.Seconds()
	if err := b.sinkReset(ctx); err != nil {
		return nil, err
	}
	m := b.mark()
	redis0, _ := rp.sample()
	start = time.Now()
	sp, err := b.startRedisSender(ctx, rc.Options().Addr, key, n)
	if err != nil {
		return nil, fmt.Errorf("(f) sender: %w", err)
	}
	defer sp.stop(10 * time.Second)
	if _, err := b.waitDelivered(ctx, int64(n), sp, limitFor(n)); err != nil {
		return nil, fmt.Errorf("(f): %w", err)
	}
	el := time.Since(start)
	r.procFigures(sp, 0)
	if err := b.finish(ctx, r, m, time.Time{}, time.Time{}, el); err != nil {
		return nil, err
	}
	if err := sp.stop(10 * time.Second); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	rcpu, _ := rp.sample()
	r.RedisCPU = rcpu - redis0
	if err := rp.stop(5 * time.Second); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	logf("  redis list: %d delivered in %.2fs = %.0f/s", r.Delivered, r.Seconds, r.PerSecond)
	return []*result{r}, nil
}

// redeliveries says how many more times JetStream handed relay the events of
// dests than there were events (naks, retries, AckWait expiries), or "" if
// it handed each one over once. Anything but "" means relay did more than
// one attempt's work for some events, which the figures then include.
func (b *bench) redeliveries(ctx context.Context, dests []string, n int) string {
	var delivered uint64
	for _, d := range dests {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := b.js.Consumer(cctx, stream.EventsStream, destination.ConsumerName(d))
		if err == nil {
			var info *jetstream.ConsumerInfo
			if info, err = c.Info(cctx); err == nil {
				delivered += info.Delivered.Consumer
			}
		}
		cancel()
		if err != nil {
			return fmt.Sprintf("cannot read consumer %s: %v", destination.ConsumerName(d), err)
		}
	}
	if delivered <= uint64(n) {
		return ""
	}
	return fmt.Sprintf("JetStream handed relay %d deliveries for %d expected: %d redeliveries (naks or AckWait expiries)", delivered, n, delivered-uint64(n))
}

// scenarioL: the delivery log's cost. Scenario (a)'s backlog drained by
// relay with the log off (--attempt-log=false) and on, in -a-rounds rounds
// alternating which goes first; then, with the log on, a backlog four
// times as large, whose peak RSS tells whether relay's memory grows with
// the records it writes.
func (b *bench) scenarioL(ctx context.Context) ([]*result, error) {
	n := b.opts.n
	var out []*result
	defer func() { b.relayArgs = nil }()
	for k := 1; k <= b.opts.aRounds; k++ {
		off := &result{Scenario: "l", Title: "delivery log", System: "relay, log off", Round: k, Events: n, LatencyKind: "queue"}
		on := &result{Scenario: "l", Title: "delivery log", System: "relay, log on", Round: k, Events: n, LatencyKind: "queue"}
		run := func(r *result, logOn bool) error {
			// A new server for each run, as in (a): the log's records
			// of one run are not in the next one's server.
			if err := b.freshNATS(ctx); err != nil {
				return err
			}
			dest := "l" + strconv.Itoa(k) + "off"
			b.relayArgs = []string{"--attempt-log=false"}
			if logOn {
				dest, b.relayArgs = "l"+strconv.Itoa(k)+"on", nil
			}
			if err := b.addDest(ctx, destination.Destination{Name: dest}); err != nil {
				return err
			}
			if err := b.relayRun(ctx, r, []string{dest}, n, false); err != nil {
				return fmt.Errorf("(l) %s, round %d: %w", r.System, k, err)
			}
			logf("  %s: %d delivered in %.2fs = %.0f/s, peak RSS %.0f MB", r.System, r.Delivered, r.Seconds, r.PerSecond, r.ProcRSSMB)
			return nil
		}
		first, second := off, on
		if k%2 == 0 {
			first, second = on, off
		}
		if err := run(first, first == on); err != nil {
			return nil, err
		}
		if err := run(second, second == on); err != nil {
			return nil, err
		}
		out = append(out, off, on)
	}
	big := &result{Scenario: "l", Title: "delivery log", System: "relay, log on, 4x backlog", Events: 4 * n, LatencyKind: "queue"}
	b.relayArgs = nil
	if err := b.freshNATS(ctx); err != nil {
		return nil, err
	}
	if err := b.addDest(ctx, destination.Destination{Name: "lbig"}); err != nil {
		return nil, err
	}
	if err := b.relayRun(ctx, big, []string{"lbig"}, 4*n, false); err != nil {
		return nil, fmt.Errorf("(l) 4x backlog: %w", err)
	}
	return append(out, big), nil
}
