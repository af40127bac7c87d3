package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// scenarioR: the distributed deployment (issues 29 and 44). A 3-node NATS
// cluster (natsCluster: three processes), relay's streams and buckets with
// 3 replicas, and two 'relay run --replicas 3' processes on the cluster's
// URLs at relay's default log level, against the minimal loop on the same
// cluster:
//  1. throughput, -r-rounds rounds each, taking turns which goes first:
//     -r-n events published before the processes start, timed from their
//     start until the sink has them all;
//  2. latency at half the loop's rate in (1) (the median of its rounds),
//     for -r-duration, -r-rounds rounds each, taking turns;
//  3. the same rate again, with the node that leads the events stream and
//     the consumer (colocate) SIGKILLed rKillAfter into it and started again -r-down later, once each: events
//     published (retried until acknowledged) against delivered, duplicates,
//     the longest publish-to-2xx (copies included: how long an event whose
//     ack or pull response the node took with it waited), the longest gap
//     between new deliveries and the dip in the delivery rate.
//
// Each round starts the processes it measures and stops them after it, so
// that neither runs beside the other.
func (b *bench) scenarioR(ctx context.Context) ([]*result, error) {
	dir := filepath.Join(b.tmp, "cluster")
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "relay-bench: removing", dir+":", err)
		}
	}()
	logf("  starting a 3-node NATS cluster")
	c, err := startCluster(ctx, dir, b.logDir)
	if err != nil {
		return nil, fmt.Errorf("(r) NATS cluster: %w", err)
	}
	defer c.close()
	nc, err := connectCluster(c.urls(), "relay-bench (r) publisher")
	if err != nil {
		return nil, fmt.Errorf("(r) connect to the cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := ensureR3(ctx, js); err != nil {
		return nil, fmt.Errorf("(r): %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := destination.NewStore(sctx, js)
	if err != nil {
		return nil, err
	}
	pub, err := newPublisher(nc)
	if err != nil {
		return nil, err
	}
	// The bench's helpers (addDest, publishFor, loopRun, startRelay, the
	// consumer and check waits) work on the cluster while (r) runs.
	natsURL, bnc, bjs, bstore, bpub, ns := b.natsURL, b.nc, b.js, b.store, b.pub, b.ns
	b.natsURL, b.nc, b.js, b.store, b.pub, b.ns, b.cluster = c.urls(), nc, js, store, pub, nil, c
	// Without --replicas 3, relay would set the streams to one replica;
	// and relay runs at its default log level, as a user runs it.
	b.relayArgs, b.defaultLogLevel = []string{"--replicas", "3"}, true
	defer func() {
		b.natsURL, b.nc, b.js, b.store, b.pub, b.ns, b.cluster = natsURL, bnc, bjs, bstore, bpub, ns, nil
		b.relayArgs, b.defaultLogLevel = nil, false
	}()
	logf("  cluster healthy: %s; relay's streams and buckets have 3 replicas", c.urls())

	const dest = "r"
	relaySys := clusterSystem{name: "relay, 2 replicas", dest: dest, consumer: destination.ConsumerName(dest), relay: true}
	if err := b.addDest(ctx, destination.Destination{Name: dest}); err != nil {
		return nil, err
	}
	if err := b.settleUnrouted(ctx); err != nil {
		return nil, err
	}
	n := b.opts.rN
	var out, loops []*result
	for k := 1; k <= b.opts.rRounds; k++ {
		r := &result{Scenario: "r", Title: "cluster throughput", System: relaySys.name, Round: k, Events: n, LatencyKind: "queue"}
		l := &result{Scenario: "r", Title: "cluster throughput", System: "minimal loop", Round: k, Events: n, LatencyKind: "queue"}
		err := inTurn(k, func() error {
			if err := b.clusterRelayThroughput(ctx, c, r, relaySys, k == 1); err != nil {
				return fmt.Errorf("(r) relay throughput, round %d: %w", k, err)
			}
			logf("  relay (2 replicas), round %d: %d delivered in %.2fs = %.0f/s", k, r.Delivered, r.Seconds, r.PerSecond)
			return nil
		}, func() error {
			if err := b.clusterLoopThroughput(ctx, c, l, "rloop"+strconv.Itoa(k), n); err != nil {
				return fmt.Errorf("(r) minimal loop throughput, round %d: %w", k, err)
			}
			logf("  minimal loop, round %d: %d delivered in %.2fs = %.0f/s", k, l.Delivered, l.Seconds, l.PerSecond)
			return nil
		})
		if err != nil {
			return nil, err
		}
		// relay against the loop on the cluster in the same round, in the
		// "vs loop" column; relay on the cluster against relay on one
		// server in "vs relay (a)".
		r.VsLoop, l.VsLoop = r.PerSecond/l.PerSecond, 0
		r.Notes = append(r.Notes, "vs loop: against the minimal loop on the cluster, the same round")
		if b.relayRateA > 0 {
			r.VsRelayA = r.PerSecond / b.relayRateA
			r.Notes = append(r.Notes, "vs relay (a): against relay on one server, (a)'s median")
		}
		out = append(out, r, l)
		loops = append(loops, l)
	}

	rate := medianRate(loops) * b.opts.rRateShare
	logf("  latency and node restart at %.0f/s, %.0f%% of the loop's median throughput", rate, 100*b.opts.rRateShare)
	const loopDest = "rloopb"
	if err := b.addPausedDest(ctx, loopDest); err != nil {
		return nil, err
	}
	loopSys := clusterSystem{name: "minimal loop", dest: loopDest, consumer: "bench_" + loopDest}
	atRate := func(r *result, sys clusterSystem, restart bool) error {
		run := b.withLoop
		if sys.relay {
			run = b.withRelay
		}
		return run(ctx, r, sys, func(sys clusterSystem) error { return b.clusterAtRate(ctx, c, r, sys, rate, restart) })
	}
	for k := 1; k <= b.opts.rRounds; k++ {
		r := &result{Scenario: "r", Title: "cluster latency", System: relaySys.name, Round: k, Rate: rate, LatencyKind: "publish-to-delivery"}
		l := &result{Scenario: "r", Title: "cluster latency", System: loopSys.name, Round: k, Rate: rate, LatencyKind: "publish-to-delivery"}
		err := inTurn(k, func() error {
			if err := atRate(r, relaySys, false); err != nil {
				return fmt.Errorf("(r) relay latency, round %d: %w", k, err)
			}
			return nil
		}, func() error {
			if err := atRate(l, loopSys, false); err != nil {
				return fmt.Errorf("(r) minimal loop latency, round %d: %w", k, err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, r, l)
	}

	for i, sys := range []clusterSystem{relaySys, loopSys} {
		if i > 0 {
			logf("  waiting until every node is healthy again")
			if err := waitFor(ctx, nil, 2*time.Minute, 100*time.Millisecond, "every NATS node healthy", c.healthy); err != nil {
				return nil, fmt.Errorf("(r): %w", err)
			}
		}
		kill := &result{Scenario: "r", Title: "cluster node restart", System: sys.name, Rate: rate, LatencyKind: "publish-to-delivery"}
		if err := atRate(kill, sys, true); err != nil {
			return nil, fmt.Errorf("(r) %s node restart: %w", sys.name, err)
		}
		out = append(out, kill)
	}
	if note := b.clusterDeadLetters(ctx); note != "" {
		out[len(out)-1].Notes = append(out[len(out)-1].Notes, note)
	}
	return out, nil
}

// clusterSystem is what one half of (r) measures: two relay replicas, or
// the minimal loop.
type clusterSystem struct {
	name     string
	dest     string
	consumer string  // its durable JetStream consumer
	procs    []*proc // the relay replicas, or the loop's process (none with -loop-in-bench)
	relay    bool
}

func (s clusterSystem) first() *proc {
	if len(s.procs) == 0 {
		return nil
	}
	return s.procs[0]
}

// startReplicas starts two relay replicas on the cluster, with
// -relay-cpuprofile profiled as <profile>-1 and -2 (none if "").
func (b *bench) startReplicas(ctx context.Context, sys *clusterSystem, profile string) ([]<-chan string, error) {
	var profiles []<-chan string
	for i := range 2 {
		name := "r-" + strconv.Itoa(i+1)
		p, err := b.startRelay(name)
		if err != nil {
			return profiles, err
		}
		sys.procs = append(sys.procs, p)
		if profile == "" {
			continue
		}
		if ch := b.profileRelay(ctx, p, profile+"-"+strconv.Itoa(i+1)); ch != nil {
			profiles = append(profiles, ch)
		}
	}
	return profiles, nil
}

// stopReplicas stops sys's relay processes, noting in r the errors their
// logs have and how they stopped.
func stopReplicas(r *result, sys clusterSystem) {
	for _, p := range sys.procs {
		if note := logErrors(p.logPath); note != "" {
			r.Notes = append(r.Notes, p.name+": "+note)
		}
		if err := p.stop(20 * time.Second); err != nil {
			r.Notes = append(r.Notes, err.Error())
		}
	}
}

// withRelay runs f with two relay replicas started for it, stopped after
// (their profiles written first, in the first latency round).
func (b *bench) withRelay(ctx context.Context, r *result, sys clusterSystem, f func(clusterSystem) error) error {
	defer func() { stopReplicas(r, sys) }()
	profile := ""
	if r.Title == "cluster latency" && r.Round == 1 {
		profile = "rlat"
	}
	profiles, err := b.startReplicas(ctx, &sys, profile)
	if err == nil {
		err = f(sys)
	}
	for _, ch := range profiles {
		r.Notes = append(r.Notes, <-ch)
	}
	return err
}

// withLoop runs f with the minimal loop started for it, stopped after.
func (b *bench) withLoop(ctx context.Context, r *result, sys clusterSystem, f func(clusterSystem) error) error {
	lr, lp, err := b.startLoopRunner(ctx, sys.dest)
	if err != nil {
		return err
	}
	if lp != nil {
		sys.procs = []*proc{lp}
	}
	err = f(sys)
	if serr := lr.stop(); err == nil && serr != nil {
		r.Notes = append(r.Notes, serr.Error())
	}
	return err
}

// clusterRelayThroughput measures two relay replicas draining -r-n events
// published before they start, timed from their start.
func (b *bench) clusterRelayThroughput(ctx context.Context, c *natsCluster, tp *result, sys clusterSystem, profile bool) error {
	// Each round's events have ids of their own, as JetStream drops an id
	// seen in the last two minutes.
	n := tp.Events
	if err := b.publishTo(ctx, tp, []string{stream.InSubject(sys.dest, "")}, sys.dest+"-tp"+strconv.Itoa(tp.Round)+"-", n); err != nil {
		return err
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	m, start := b.mark(), time.Now()
	defer func() { stopReplicas(tp, sys) }()
	name := ""
	if profile {
		name = "r"
	}
	profiles, err := b.startReplicas(ctx, &sys, name)
	if err != nil {
		return err
	}
	first, err := b.waitDeliveredAll(ctx, int64(n), sys.procs, limitFor(n))
	if err != nil {
		return err
	}
	el := time.Since(start)
	procsFigures(tp, sys.procs, nil)
	if err := b.finish(ctx, tp, m, start, first, el); err != nil {
		return err
	}
	tp.Notes = append(tp.Notes, fmt.Sprintf("two relay processes, %s --nats-url <the 3 nodes> run --replicas 3 (concurrency %d each); CPU s/1k sums both, RSS is the larger peak", b.opts.relay, b.opts.concurrency))
	for _, p := range sys.procs {
		for _, note := range b.relayNotes(ctx, p) {
			tp.Notes = append(tp.Notes, p.name+": "+note)
		}
	}
	if note := b.redeliveries(ctx, []string{sys.dest}, n); note != "" {
		tp.Notes = append(tp.Notes, note)
	}
	tp.Notes = append(tp.Notes, b.consumerNote(ctx, sys.consumer), c.placement(ctx))
	for _, ch := range profiles {
		tp.Notes = append(tp.Notes, <-ch)
	}
	return nil
}

// clusterLoopThroughput is loopRun (not live) for (r): it also notes,
// before the loop stops and deletes its consumer, where the consumer's
// leader is and which node each client is connected to.
func (b *bench) clusterLoopThroughput(ctx context.Context, c *natsCluster, r *result, dest string, n int) error {
	if err := b.addPausedDest(ctx, dest); err != nil {
		return err
	}
	if err := b.publishFor(ctx, r, []string{dest}, n); err != nil {
		return err
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	m, start := b.mark(), time.Now()
	l, lp, err := b.startLoopRunner(ctx, dest)
	if err != nil {
		return err
	}
	first, err := b.waitDelivered(ctx, int64(n), lp, limitFor(n))
	el := time.Since(start)
	if err == nil {
		if lp != nil {
			r.procFigures(lp, 0)
		}
		err = b.finish(ctx, r, m, start, first, el)
		r.Notes = append(r.Notes, b.consumerNote(ctx, "bench_"+dest), c.placement(ctx))
	}
	if serr := l.stop(); err == nil {
		err = serr
	}
	return err
}

// rKillAfter is when the node-restart run kills a node, after it began
// publishing.
const rKillAfter = 4 * time.Second

// pubAckTimeout is how long (r)'s publisher waits for a PubAck before it
// publishes the event again.
const pubAckTimeout = 2 * time.Second

// clusterAtRate publishes to sys at rate for -r-duration and waits until
// everything is delivered, after a warm-up of a second at rate. With
// restart, it SIGKILLs the events stream's leader rKillAfter
// into the run, starts it again -r-down later, and records what that did
// (r.Restart).
func (b *bench) clusterAtRate(ctx context.Context, c *natsCluster, r *result, sys clusterSystem, rate float64, restart bool) error {
	dur, p0 := b.opts.rDuration, sys.first()
	rp, err := newRetryPublisher(b.nc, pubAckTimeout)
	if err != nil {
		return err
	}
	if restart {
		// The node killed leads both the events stream and the consumer:
		// publishes stall and the acks on their way to it are lost.
		if err := b.colocate(ctx, sys.consumer); err != nil {
			return err
		}
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	// Every run's events have ids of their own: JetStream would drop an
	// id it saw in the last two minutes as a duplicate.
	b.rRuns++
	run := strconv.Itoa(b.rRuns)
	warm, err := rp.atRate(ctx, sys.dest, sys.dest+"-warm"+run+"-", rate, time.Second, b.opts.tick, time.Minute)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := b.waitDeliveredAll(ctx, int64(warm), sys.procs, 2*time.Minute); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if sys.relay {
		if err := b.waitCheckCaughtUp(ctx, p0, 5*time.Minute); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := b.waitConsumerIdle(ctx, sys.consumer, p0, 2*time.Minute); err != nil {
		return err
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	cpu0 := make([]float64, len(sys.procs))
	for i, p := range sys.procs {
		cpu0[i], _ = p.sample()
	}
	m, start := b.mark(), time.Now()

	var rr restartRun
	var wg sync.WaitGroup
	kctx, kcancel := context.WithCancel(ctx)
	defer func() {
		kcancel()
		wg.Wait()
	}()
	what, also := "lat", ""
	if restart {
		what, also = "kill", ", the events stream's leader killed "+rKillAfter.String()+" in"
		wg.Go(func() { rr = b.restartLeader(kctx, c, sys, start) })
	}
	logf("  %s: publishing to %s at %.0f/s for %s%s", sys.name, sys.dest, rate, dur, also)
	published, err := rp.atRate(ctx, sys.dest, sys.dest+"-"+what+run+"-", rate, dur, b.opts.tick, 2*time.Minute)
	if err != nil {
		return err
	}
	r.Events = published
	var delivered int64
	if restart {
		// Events the lost node had handed out come back after their
		// AckWait (relay's --ack-wait, 30s for the loop): no stall
		// limit here, only a bound; what is still missing then is lost.
		delivered, err = b.waitCount(ctx, int64(published), sys.procs, 3*time.Minute)
	} else {
		_, err = b.waitDeliveredAll(ctx, int64(published), sys.procs, time.Minute+dur)
	}
	if err != nil {
		return err
	}
	el := time.Since(start)
	procsFigures(r, sys.procs, cpu0)
	if err := b.finish(ctx, r, m, time.Time{}, time.Time{}, el); err != nil {
		return err
	}
	if !restart {
		logf("  %s at %.0f/s: p50 %.2fms p99 %.2fms max %.2fms", sys.name, rate, r.P50ms, r.P99ms, r.Maxms)
		return nil
	}
	wg.Wait()
	if rr.err != nil {
		return rr.err
	}
	// Copies handed out again (acks the lost node took with it) come after
	// AckWait: wait for them, then count the duplicates.
	if err := b.waitConsumerIdle(ctx, sys.consumer, p0, 3*time.Minute); err != nil {
		return err
	}
	st, err := b.sinkStatsWith(ctx, "bins=1")
	if err != nil {
		return err
	}
	r.Requests, r.Duplicates = st.Requests, st.Duplicates
	r.NATSMsgs = 0 // the restarted node's counters started over
	retried, pubDups := rp.figures()
	ns := func(t time.Time) int64 { return t.UnixNano() }
	binOf := func(t time.Time) int { return int((ns(t) - st.BinsStartNs) / int64(binWidth)) }
	f := &restartFigures{
		Node: rr.node, Led: rr.led, Clients: rr.clients, ElectedSecs: -1,
		KillAtSecs:  rr.killAt.Sub(start).Seconds(),
		DownSecs:    rr.restartAt.Sub(rr.killAt).Seconds(),
		ReadySecs:   rr.readyAt.Sub(rr.restartAt).Seconds(),
		Republished: retried, PubDuplicates: pubDups,
		Lost:             int64(published) - delivered,
		LongestMs:        st.Maxms,
		LastCopySecs:     -1,
		MaxGapMs:         st.MaxGapMs,
		AllDeliveredSecs: (el - dur).Seconds(),
		Dip:              dipOf(st.Bins, rate*binWidth.Seconds(), binOf(rr.killAt), binOf(start.Add(dur))),
	}
	if t, ok := firstLogAfter(c.logs(), "new stream leader for '$G > "+stream.EventsStream+"'", rr.killAt); ok {
		f.ElectedSecs = t.Sub(rr.killAt).Seconds()
	}
	if st.LastDuplicateNs > 0 {
		f.LastCopySecs = float64(st.LastDuplicateNs-ns(rr.killAt)) / 1e9
	}
	if st.MaxGapEndNs > 0 {
		f.MaxGapEndSecs = float64(st.MaxGapEndNs-ns(rr.killAt)) / 1e9
	}
	r.Restart = f
	r.Notes = append(r.Notes, f.String())
	if f.Lost > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("LOST: %d of %d acknowledged events not delivered within 3 minutes", f.Lost, published))
	}
	logf("  %s: %s", sys.name, f.String())
	return nil
}

// colocate makes the events stream's leader lead consumer too, asking the
// consumer's leader to step down in its favour (the JetStream API's
// preferred placement), and waits until it does.
func (b *bench) colocate(ctx context.Context, consumer string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		s, err := b.js.Stream(ctx, stream.EventsStream)
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream.EventsStream, err)
		}
		cons, err := b.js.Consumer(ctx, stream.EventsStream, consumer)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", consumer, err)
		}
		sl, cl := s.CachedInfo().Cluster, cons.CachedInfo().Cluster
		switch {
		case sl == nil || cl == nil:
			return fmt.Errorf("stream %s or consumer %s has no cluster information", stream.EventsStream, consumer)
		case sl.Leader != "" && sl.Leader == cl.Leader:
			logf("  %s leads both the events stream and consumer %s", sl.Leader, consumer)
			return nil
		case sl.Leader != "" && cl.Leader != "":
			req, _ := json.Marshal(server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: sl.Leader}})
			msg, err := b.nc.RequestWithContext(ctx, fmt.Sprintf(server.JSApiConsumerLeaderStepDownT, stream.EventsStream, consumer), req)
			if err != nil {
				return fmt.Errorf("ask consumer %s's leader to step down: %w", consumer, err)
			}
			var resp server.JSApiConsumerLeaderStepDownResponse
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				return fmt.Errorf("consumer %s's step-down answered %q: %w", consumer, msg.Data, err)
			}
			if resp.Error != nil {
				return fmt.Errorf("consumer %s's step-down in favour of %s: %v", consumer, sl.Leader, resp.Error)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer %s's leader did not move to the events stream's: %w", consumer, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// restartRun is what restartLeader did.
type restartRun struct {
	node                       string
	led                        []string
	clients                    []string // connected to the node when it was killed
	killAt, restartAt, readyAt time.Time
	err                        error
}

// restartLeader SIGKILLs, rKillAfter after start, the node that leads the
// events stream, starts it again -r-down later, and waits until it is
// healthy.
func (b *bench) restartLeader(ctx context.Context, c *natsCluster, sys clusterSystem, start time.Time) (rr restartRun) {
	select {
	case <-ctx.Done():
		rr.err = ctx.Err()
		return rr
	case <-time.After(time.Until(start.Add(rKillAfter))):
	}
	leader, led, err := b.leaders(ctx, c, sys.consumer)
	if err != nil {
		rr.err = fmt.Errorf("find the events stream's leader: %w", err)
		return rr
	}
	i := c.index(leader)
	if i < 0 {
		rr.err = fmt.Errorf("the events stream's leader %q is none of the nodes", leader)
		return rr
	}
	rr.node, rr.led = leader, led
	if st, err := c.varz(ctx, i); err == nil {
		rr.clients = st.Clients
	}
	logf("  SIGKILL NATS node %s (leader of %s; clients %s)", leader, strings.Join(led, ", "), strings.Join(rr.clients, ", "))
	rr.killAt = time.Now()
	if err := c.kill(i, false); err != nil {
		rr.err = err
		return rr
	}
	select {
	case <-ctx.Done():
		rr.err = ctx.Err()
		return rr
	case <-time.After(b.opts.rDown):
	}
	rr.restartAt = time.Now()
	logf("  starting NATS node %s again", leader)
	if err := c.start(ctx, i); err != nil {
		rr.err = fmt.Errorf("restart NATS node %s: %w", leader, err)
		return rr
	}
	rr.readyAt = time.Now()
	logf("  NATS node %s healthy again %.1fs after its start", leader, rr.readyAt.Sub(rr.restartAt).Seconds())
	return rr
}

// leaders names the events stream's leader, and what else it leads:
// consumer, the meta group.
func (b *bench) leaders(ctx context.Context, c *natsCluster, consumer string) (string, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return "", nil, err
	}
	ci := s.CachedInfo().Cluster
	if ci == nil || ci.Leader == "" {
		return "", nil, fmt.Errorf("stream %s has no leader", stream.EventsStream)
	}
	led := []string{"the events stream"}
	if cons, err := b.js.Consumer(ctx, stream.EventsStream, consumer); err == nil {
		if cc := cons.CachedInfo().Cluster; cc != nil && cc.Leader == ci.Leader {
			led = append(led, "consumer "+consumer)
		}
	}
	if c.metaLeader(ctx) == ci.Leader {
		led = append(led, "the meta group")
	}
	return ci.Leader, led, nil
}

// consumerNote says how many replicas consumer has and where its leader is.
func (b *bench) consumerNote(ctx context.Context, consumer string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := b.js.Consumer(ctx, stream.EventsStream, consumer)
	if err != nil {
		return fmt.Sprintf("consumer %s: %v", consumer, err)
	}
	info := cons.CachedInfo()
	if info.Cluster == nil {
		return fmt.Sprintf("consumer %s: no cluster information", consumer)
	}
	return fmt.Sprintf("consumer %s: %d replicas (the stream's, inherited: configured %d), leader %s", consumer, len(info.Cluster.Replicas)+1, info.Config.Replicas, info.Cluster.Leader)
}

// clusterDeadLetters says how many dead letters the cluster holds ("" if
// none).
func (b *bench) clusterDeadLetters(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, stream.DLQStream)
	if err != nil {
		return "cannot read the cluster's dead-letter stream: " + err.Error()
	}
	if n := s.CachedInfo().State.Msgs; n > 0 {
		return fmt.Sprintf("%d dead letters in the cluster", n)
	}
	return ""
}

// procsFigures records, in r, the CPU that ps used since cpu0 (nil: since
// they started), summed, and the largest peak RSS.
func procsFigures(r *result, ps []*proc, cpu0 []float64) {
	r.ProcCPU, r.ProcRSSMB = 0, 0
	for i, p := range ps {
		cpu, hwm := p.sample()
		if cpu0 != nil {
			cpu -= cpu0[i]
		}
		r.ProcCPU += cpu
		r.ProcRSSMB = max(r.ProcRSSMB, float64(hwm)/1024)
	}
}

// waitDeliveredAll is waitDelivered for several processes: it fails when
// any of ps exits.
func (b *bench) waitDeliveredAll(ctx context.Context, want int64, ps []*proc, limit time.Duration) (time.Time, error) {
	if len(ps) < 2 {
		var p *proc
		if len(ps) == 1 {
			p = ps[0]
		}
		return b.waitDelivered(ctx, want, p, limit)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, p := range ps[1:] {
		go func() {
			select {
			case <-p.done:
				cancel(p.exitError())
			case <-wctx.Done():
			}
		}()
	}
	first, err := b.waitDelivered(wctx, want, ps[0], limit)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		err = context.Cause(wctx)
	}
	return first, err
}

// waitCount waits until the sink counts want deliveries, or until limit,
// with no stall limit, and returns the count then. It fails if one of ps
// or the sink exits.
func (b *bench) waitCount(ctx context.Context, want int64, ps []*proc, limit time.Duration) (int64, error) {
	deadline := time.Now().Add(limit)
	for {
		got, _, err := b.sinkCount(ctx)
		if err != nil {
			return 0, err
		}
		if got >= want || time.Now().After(deadline) {
			return got, nil
		}
		for _, p := range ps {
			if p.exited() {
				return got, p.exitError()
			}
		}
		if b.sink.exited() {
			return got, b.sink.exitError()
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// restartFigures are what a node restart did to a system in (r).
type restartFigures struct {
	Node    string   `json:"node"`    // the node killed: the events stream's leader
	Led     []string `json:"led"`     // what it led when killed
	Clients []string `json:"clients"` // the client connections it had then, by name
	// ElectedSecs: from the kill to the events stream's new leader (from
	// the nodes' logs); -1 if not found.
	ElectedSecs   float64 `json:"stream_leader_elected_seconds"`
	KillAtSecs    float64 `json:"kill_at_seconds"`
	DownSecs      float64 `json:"down_seconds"`  // SIGKILL to its new start
	ReadySecs     float64 `json:"ready_seconds"` // start to healthy (caught up)
	Republished   int64   `json:"republished"`   // publishes repeated for want of a PubAck
	PubDuplicates int64   `json:"publish_duplicates"`
	Lost          int64   `json:"lost"` // acknowledged, not delivered
	// LongestMs is the longest publish-to-2xx of the run, copies
	// included: how long the events whose acks (or pull responses) the
	// node took with it waited to come back. LastCopySecs is when the
	// last copy came, from the kill (-1: none).
	LongestMs    float64 `json:"longest_publish_to_2xx_ms"`
	LastCopySecs float64 `json:"last_copy_after_kill_seconds"`
	// MaxGapMs is the longest time without a new delivery, and
	// MaxGapEndSecs when it ended, from the kill.
	MaxGapMs         float64    `json:"max_gap_ms"`
	MaxGapEndSecs    float64    `json:"max_gap_end_after_kill_seconds"`
	AllDeliveredSecs float64    `json:"all_delivered_after_publishing_seconds"`
	Dip              dipFigures `json:"dip"`
}

func (f *restartFigures) String() string {
	clients := "none"
	if len(f.Clients) > 0 {
		clients = strings.Join(f.Clients, ", ")
	}
	elected := "not found in the nodes' logs"
	if f.ElectedSecs >= 0 {
		elected = fmt.Sprintf("%.1fs after the kill", f.ElectedSecs)
	}
	return fmt.Sprintf("SIGKILL of node %s (leader of %s; its clients: %s) %.1fs in, started again %.1fs later, healthy %.1fs after that; "+
		"the events stream's new leader elected %s; %d publishes repeated for want of a PubAck (%d dropped by JetStream as duplicates); lost %d; "+
		"longest time without a new delivery %.0f ms, ending %.1fs after the kill; %s; all delivered %.1fs after publishing ended; "+
		"the longest publish-to-2xx, copies included, %.1fs; %s",
		f.Node, strings.Join(f.Led, ", "), clients, f.KillAtSecs, f.DownSecs, f.ReadySecs, elected, f.Republished, f.PubDuplicates, f.Lost,
		f.MaxGapMs, f.MaxGapEndSecs, f.Dip, f.AllDeliveredSecs, f.LongestMs/1000, f.lastCopy())
}

func (f *restartFigures) lastCopy() string {
	if f.LastCopySecs < 0 {
		return "no copies"
	}
	return fmt.Sprintf("the last copy %.1fs after the kill", f.LastCopySecs)
}

// dipFigures describe the delivery rate after a node's loss, from the
// sink's new deliveries per 100 ms (binWidth), measured against half the
// publish rate.
type dipFigures struct {
	// StartMs: from the kill to the first 100 ms with fewer deliveries
	// than half the publish rate's; -1 if none before publishing ended.
	StartMs float64 `json:"start_ms"`
	// LastsMs: from then until the rate recovered, the start of the first
	// second whose every 100 ms has at least half; -1 if it did not
	// before publishing ended.
	LastsMs float64 `json:"lasts_ms"`
	// BelowHalfMs: all the 100 ms below half, from the kill until
	// publishing ended.
	BelowHalfMs float64 `json:"below_half_ms"`
	// LowestPerSec: the fewest deliveries in a second (sliding by 100 ms)
	// from the kill until publishing ended; -1 if less than a second.
	LowestPerSec float64 `json:"lowest_per_second"`
}

func (d dipFigures) String() string {
	var s string
	switch {
	case d.StartMs < 0:
		s = "the rate never fell below half the publish rate (per 100 ms)"
	case d.LastsMs < 0:
		s = fmt.Sprintf("the rate fell below half the publish rate %.0f ms after the kill and did not recover before publishing ended", d.StartMs)
	default:
		s = fmt.Sprintf("the rate fell below half the publish rate %.0f ms after the kill and recovered %.0f ms later", d.StartMs, d.LastsMs)
	}
	s += fmt.Sprintf(" (%.0f ms below half in all", d.BelowHalfMs)
	if d.LowestPerSec >= 0 {
		s += fmt.Sprintf(", the fewest deliveries in a second %.0f", d.LowestPerSec)
	}
	return s + ")"
}

// recoverBins is how many bins in a row at half the rate or more make a
// recovery: a second.
const recoverBins = int(time.Second / binWidth)

// dipOf reads bins (new deliveries per binWidth) from killBin up to endBin
// (exclusive: the end of publishing), expecting expect per bin.
func dipOf(bins []int64, expect float64, killBin, endBin int) dipFigures {
	at := func(i int) float64 {
		if i < 0 || i >= len(bins) {
			return 0
		}
		return float64(bins[i])
	}
	width := float64(binWidth / time.Millisecond)
	half := expect / 2
	d := dipFigures{StartMs: -1, LowestPerSec: -1}
	killBin = max(killBin, 0)
	start := -1
	for i := killBin; i < endBin; i++ {
		if at(i) < half {
			d.BelowHalfMs += width
			if start < 0 {
				start = i
			}
		}
	}
	for w := killBin; w+recoverBins <= endBin; w++ {
		sum := 0.0
		for i := w; i < w+recoverBins; i++ {
			sum += at(i)
		}
		if d.LowestPerSec < 0 || sum < d.LowestPerSec {
			d.LowestPerSec = sum
		}
	}
	if start < 0 {
		return d
	}
	d.StartMs, d.LastsMs = float64(start-killBin)*width, -1
	for j := start + 1; j+recoverBins <= endBin; j++ {
		ok := true
		for i := j; i < j+recoverBins; i++ {
			if at(i) < half {
				ok = false
				break
			}
		}
		if ok {
			d.LastsMs = float64(j-start) * width
			break
		}
	}
	return d
}
