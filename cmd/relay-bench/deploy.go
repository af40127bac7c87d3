package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream/embedded"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// scenarioI: the default deployment, as a user runs it (issue 44). 'relay
// run' with its own embedded NATS server, its default log level and
// nothing but the sink's address policy and the API (what make run
// starts: the delivery log, operator events), its destination added with
// the defaults but --concurrency equal to the loop's workers, against the
// minimal loop with an embedded server of its own; each on a data
// directory already holding -i-n events for it, each timed from its
// process's start to the sink's last 2xx: start-up, store recovery and
// relay's unknown-destination check included. -i-rounds rounds alternate
// which goes first, as in (a). Every run starts on a copy of one data
// directory, prepared once: the same events, and no publishing between
// the runs.
func (b *bench) scenarioI(ctx context.Context) ([]*result, error) {
	n := b.opts.iN
	tmpl := filepath.Join(b.tmp, "deploy-template")
	defer os.RemoveAll(tmpl)
	prep := &result{}
	if err := b.prepareDeployData(ctx, prep, tmpl, deployDest, n); err != nil {
		return nil, fmt.Errorf("(i) preparing the data directory: %w", err)
	}
	var out []*result
	for k := 1; k <= b.opts.iRounds; k++ {
		r := &result{Scenario: "i", Title: "default deployment", System: "relay", Round: k, Events: n, LatencyKind: "queue",
			PublishSecs: prep.PublishSecs, PublishRate: prep.PublishRate}
		l := &result{Scenario: "i", Title: "default deployment", System: "minimal loop", Round: k, Events: n, LatencyKind: "queue",
			PublishSecs: prep.PublishSecs, PublishRate: prep.PublishRate}
		runRelay := func() error {
			// -aa: the loop with its own server in relay's place too.
			if err := b.deployRun(ctx, r, tmpl, "i"+strconv.Itoa(k), b.opts.aa); err != nil {
				return fmt.Errorf("(i) relay, round %d: %w", k, err)
			}
			logf("  relay: %d delivered in %.2fs = %.0f/s, peak RSS %.1f MB", r.Delivered, r.Seconds, r.PerSecond, r.ProcRSSMB)
			return nil
		}
		runLoop := func() error {
			if err := b.deployRun(ctx, l, tmpl, "iloop"+strconv.Itoa(k), true); err != nil {
				return fmt.Errorf("(i) minimal loop, round %d: %w", k, err)
			}
			logf("  minimal loop: %d delivered in %.2fs = %.0f/s, peak RSS %.1f MB", l.Delivered, l.Seconds, l.PerSecond, l.ProcRSSMB)
			return nil
		}
		if err := inTurn(k, runRelay, runLoop); err != nil {
			return nil, err
		}
		r.VsLoop = r.PerSecond / l.PerSecond
		out = append(out, r, l)
	}
	return out, nil
}

// deployDest is (i)'s destination.
const deployDest = "i"

// deployRun copies the data directory tmpl (prepareDeployData's, holding
// -i-n events for deployDest) and starts relay, or the minimal loop with
// -loop, on the copy with its own embedded server, and times it from its
// start to the sink's n-th delivery. The bench's own NATS server takes no
// part. run names the copy, the logs and the profiles.
func (b *bench) deployRun(ctx context.Context, r *result, tmpl, run string, loop bool) error {
	n, dest := b.opts.iN, deployDest
	dir := filepath.Join(b.tmp, "deploy-"+run)
	if err := os.CopyFS(dir, os.DirFS(tmpl)); err != nil {
		return fmt.Errorf("copying the data directory: %w", err)
	}
	defer os.RemoveAll(dir)
	natsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	if err := b.sinkReset(ctx); err != nil {
		return err
	}
	m := b.mark()
	start := time.Now()
	var p *proc
	if loop {
		// Ready once it consumes: its start-up is timed all the same.
		args := []string{"loop", "-embedded-dir", dir, "-url", b.sinkURL(dest), "-dest", dest, "-workers", strconv.Itoa(b.opts.loopWorkers)}
		if b.opts.loopCPUProf != "" {
			args = append(args, "-cpuprofile", b.opts.loopCPUProf+"."+run)
		}
		p, err = startReady(ctx, "minimal loop ("+run+")", filepath.Join(b.logDir, "loop-"+run+".log"), args...)
	} else {
		var metrics, api string
		if metrics, err = freeAddr(); err == nil {
			api, err = freeAddr()
		}
		if err != nil {
			return err
		}
		// As make run starts it (its log level too), with a metrics port
		// for the notes.
		args := []string{"run", "--data-dir", dir, "--listen", natsAddr,
			"--allow-net", "127.0.0.0/8", "--api-addr", api, "--metrics-addr", metrics}
		p, _, err = startProc("relay ("+run+")", filepath.Join(b.logDir, "relay-"+run+".log"), childEnv(), false, b.opts.relay, args...)
		if p != nil {
			p.metrics = metrics
		}
	}
	if err != nil {
		return err
	}
	defer p.stop(45 * time.Second)
	var profiled <-chan string
	if !loop {
		profiled = b.profileRelay(ctx, p, run)
	}
	first, err := b.waitDelivered(ctx, int64(n), p, limitFor(n))
	if err != nil {
		return err
	}
	el := time.Since(start)
	r.procFigures(p, 0)
	if err := b.finish(ctx, r, m, start, first, el); err != nil {
		return err
	}
	r.VsLoop = 0 // set by the scenario, against its own loop
	r.Notes = append(r.Notes, "timed from process start: its embedded server's start and store recovery included; its RSS is its server's too")
	if !loop {
		r.Notes = append(r.Notes, b.relayNotes(ctx, p)...)
		if note := logErrors(p.logPath); note != "" {
			r.Notes = append(r.Notes, note)
		}
		if profiled != nil {
			r.Notes = append(r.Notes, <-profiled)
		}
	}
	if err := p.stop(45 * time.Second); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	return nil
}

// prepareDeployData starts an embedded server on dir, sets relay's streams
// up as 'relay run' does, adds dest as 'relay dest add' would (the
// defaults, a signing secret, and the loop's workers as its concurrency)
// and publishes n events to it, then stops the server.
func (b *bench) prepareDeployData(ctx context.Context, r *result, dir, dest string, n int) error {
	s, err := embedded.StartContext(ctx, embedded.Config{DataDir: dir, Port: -1})
	if err != nil {
		return err
	}
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	nc, err := nats.Connect(s.ClientURL(), nats.Name("relay-bench (i) setup"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := stream.Ensure(ctx, js, relayStreams(1)); err != nil {
		return err
	}
	st, err := destination.NewStore(ctx, js, destination.AllowStoringInClear())
	if err != nil {
		return err
	}
	// As 'relay dest add NAME --url U --concurrency 64' makes it (shared,
	// the default for an unordered destination).
	concurrency := b.opts.loopWorkers
	d, _, err := destination.Settings{URLs: []string{b.sinkURL(dest)}, Concurrency: &concurrency}.NewDestination(dest)
	if err != nil {
		return err
	}
	if _, err := st.Add(ctx, d); err != nil {
		return fmt.Errorf("add destination %s: %w", dest, err)
	}
	pub, err := newPublisher(nc)
	if err != nil {
		return err
	}
	logf("  %s: publishing %d events into a new data directory", dest, n)
	pd, err := pub.backlog(ctx, []string{stream.InSubject(dest, "")}, dest+"-", n, b.opts.window)
	if err != nil {
		return err
	}
	r.PublishSecs, r.PublishRate = pd.Seconds(), float64(n)/pd.Seconds()
	return nc.Drain()
}
