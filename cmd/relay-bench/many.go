package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/tenant"
	"github.com/relaydev/relay/webhook"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// scenarioH: many destinations (-dests), as deployed by default: 'relay
// run' with its own embedded NATS server, so that the RSS measured is relay
// and its server together, and the stop includes the server's. The
// destinations are added while a first relay runs (it creates their
// consumers); the figures are those of a second relay started on that data:
// time to ready, RSS, deliveries/s of -n events spread over the
// destinations and published while it runs, and the graceful stop.
func (b *bench) scenarioH(ctx context.Context) ([]*result, error) {
	n, nd := b.opts.n, b.opts.dests
	r := &result{Scenario: "h", Title: strconv.Itoa(nd) + " destinations", System: "relay", Events: n, LatencyKind: "queue"}
	if nt := b.opts.tenants; nt > 0 {
		r.Title = fmt.Sprintf("%d tenants, %d destinations", nt, nd)
	}
	if b.opts.shared {
		r.Title += ", shared"
	}
	dir := filepath.Join(b.tmp, "h-data")
	natsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	start := func(name string) (*proc, error) {
		metrics, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := []string{"--log-level", "info", "run", "--data-dir", dir, "--listen", natsAddr, "--metrics-addr", metrics,
			"--allow-net", "127.0.0.0/8", "--max-consumers", strconv.Itoa(nd + 2*stream.ReservedConsumers)}
		p, _, err := startProc("relay ("+name+")", filepath.Join(b.logDir, "relay-"+name+".log"), childEnv(), false, b.opts.relay, args...)
		if p != nil {
			p.metrics = metrics
		}
		return p, err
	}
	ready := func(p *proc) error {
		return waitFor(ctx, p, 10*time.Minute, 20*time.Millisecond, "relay ready (/readyz)", func(ctx context.Context) (bool, error) {
			code, _, err := b.opsGet(ctx, p, "/readyz")
			return code == http.StatusOK, err
		})
	}

	// First run: set up, add the destinations, let relay create their
	// consumers.
	logf("  starting relay with its embedded NATS server to add %d destinations", nd)
	p1, err := start("h-setup")
	if err != nil {
		return nil, err
	}
	defer p1.stop(5 * time.Minute)
	if err := ready(p1); err != nil {
		return nil, err
	}
	nc, err := nats.Connect("nats://"+natsAddr, nats.Name("relay-bench (h)"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	// Secrets in the clear: Add then skips its check that no other
	// destination's secret is encrypted, a read of every destination.
	st, err := destination.NewStore(ctx, js, destination.AllowStoringInClear())
	if err != nil {
		return nil, err
	}
	dests := make([]string, nd)
	for i := range dests {
		dests[i] = "h" + strconv.Itoa(i)
	}
	if nt := b.opts.tenants; nt > 0 {
		// Destination i is tenant (i mod nt)'s: nd/nt each.
		ts, err := tenant.Open(ctx, js, nil)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		for i := range nt {
			if _, _, err := ts.Put(ctx, tenant.Tenant{ID: "t" + strconv.Itoa(i)}); err != nil {
				return nil, fmt.Errorf("add tenant t%d: %w", i, err)
			}
		}
		logf("  added %d tenants in %.1fs", nt, time.Since(t0).Seconds())
		for i := range dests {
			dests[i] = stream.DestRef("t"+strconv.Itoa(i%nt), "d"+strconv.Itoa(i/nt))
		}
	}
	addStart := time.Now()
	var next atomic.Int64
	var lastAdds atomic.Int64 // ns spent on the last 100 adds
	var wg sync.WaitGroup
	// One at a time: the Store then counts the destinations' consumers
	// once, not once per Add.
	const adders = 1
	errs := make(chan error, adders)
	for range adders {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= nd {
					return
				}
				t0 := time.Now()
				actx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := st.Add(actx, destination.Destination{Name: dests[i], URL: b.sinkURL(dests[i]), Secret: webhook.GenerateSecret(), Shared: b.opts.shared})
				cancel()
				if err != nil {
					errs <- fmt.Errorf("add destination %s: %w", dests[i], err)
					return
				}
				if i >= nd-100 {
					lastAdds.Add(int64(time.Since(t0)))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	addSecs := time.Since(addStart).Seconds()
	logf("  added %d destinations in %.1fs (the last 100: %.1f ms each, one at a time)", nd, addSecs, float64(lastAdds.Load())/100/1e6)
	if err := waitFor(ctx, p1, 10*time.Minute, 100*time.Millisecond, "consumers created", func(ctx context.Context) (bool, error) {
		s, err := js.Stream(ctx, stream.EventsStream)
		if err != nil {
			return false, err
		}
		if b.opts.shared {
			return true, nil // no consumer of their own
		}
		return s.CachedInfo().State.Consumers >= nd, nil
	}); err != nil {
		return nil, err
	}
	nc.Close()
	t0 := time.Now()
	if err := p1.stop(5 * time.Minute); err != nil {
		return nil, err
	}
	firstStop := time.Since(t0).Seconds()
	logf("  consumers created; first relay stopped in %.1fs", firstStop)

	// Second run: the measured one.
	if err := b.sinkReset(ctx); err != nil {
		return nil, err
	}
	t0 = time.Now()
	p, err := start("h")
	if err != nil {
		return nil, err
	}
	defer p.stop(5 * time.Minute)
	if err := ready(p); err != nil {
		return nil, err
	}
	readySecs := time.Since(t0).Seconds()
	rssReady, _ := procStatusKB(p.pid(), "VmRSS:")
	logf("  ready in %.1fs, RSS %.0f MB", readySecs, float64(rssReady)/1024)
	if code, body, err := b.opsGet(ctx, p, "/debug/pprof/heap"); err == nil && code == http.StatusOK {
		_ = os.WriteFile(filepath.Join(b.opts.out, fmt.Sprintf("h-%d-heap.pb.gz", nd)), body, 0o644)
	}
	_, gor, _ := b.opsGet(ctx, p, "/metrics")
	nc, err = nats.Connect("nats://"+natsAddr, nats.Name("relay-bench (h) publisher"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	pub, err := newPublisher(nc)
	if err != nil {
		return nil, err
	}
	m, start0 := b.mark(), time.Now()
	cpu0, _ := p.sample()
	subjects := make([]string, len(dests))
	for i, d := range dests {
		subjects[i] = stream.InSubject(d, "")
	}
	pd, err := pub.backlog(ctx, subjects, "h-", n, b.opts.window)
	if err != nil {
		return nil, err
	}
	r.PublishSecs, r.PublishRate = pd.Seconds(), float64(n)/pd.Seconds()
	first, err := b.waitDelivered(ctx, int64(n), p, limitFor(n))
	if err != nil {
		return nil, err
	}
	el := time.Since(start0)
	r.procFigures(p, cpu0)
	_, page, _ := b.opsGet(ctx, p, "/metrics") // after the deliveries: every destination's series made
	r.Notes = append(r.Notes, fmt.Sprintf("/metrics after the deliveries: %d lines of series, %d distinct dest labels", seriesLines(page), destLabelCount(page)))
	if code, body, err := b.opsGet(ctx, p, "/debug/pprof/heap"); err == nil && code == http.StatusOK {
		_ = os.WriteFile(filepath.Join(b.opts.out, fmt.Sprintf("h-%d-heap-delivered.pb.gz", nd)), body, 0o644)
	}
	if err := b.finish(ctx, r, m, start0, first, el); err != nil {
		return nil, err
	}
	nc.Close()
	t0 = time.Now()
	stopErr := p.stop(5 * time.Minute)
	stopSecs := time.Since(t0).Seconds()
	r.Dests, r.ReadySecs, r.StopSecs, r.ReadyRSSMB = nd, readySecs, stopSecs, float64(rssReady)/1024
	r.Notes = append(r.Notes,
		fmt.Sprintf("relay run with its embedded NATS server, --max-consumers %d, destinations shared: %v; events published to the destinations directly, round-robin, while relay ran", nd+2*stream.ReservedConsumers, b.opts.shared),
		fmt.Sprintf("ready %.1fs after start (%s), RSS at ready %.0f MB, peak %.0f MB (relay and its NATS server, one process)", readySecs, logSpans(p.logPath), r.ReadyRSSMB, r.ProcRSSMB),
		fmt.Sprintf("graceful stop (SIGTERM to exit) %.1fs; the first relay, which created the consumers, stopped in %.1fs", stopSecs, firstStop),
		fmt.Sprintf("%d destinations added in %.1fs, one at a time; the last 100 took %.1f ms each", nd, addSecs, float64(lastAdds.Load())/100/1e6),
		"goroutines at ready: "+metricValue(gor, "go_goroutines"))
	if stopErr != nil {
		r.Notes = append(r.Notes, stopErr.Error())
	}
	logf("  relay: %d delivered in %.2fs = %.0f/s; stopped in %.1fs", r.Delivered, r.Seconds, r.PerSecond, stopSecs)
	return []*result{r}, nil
}

// seriesLines counts the sample lines of a /metrics page.
func seriesLines(page []byte) int {
	n := 0
	for line := range strings.SplitSeq(string(page), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}

// destLabelCount counts the distinct dest label values of a /metrics page.
func destLabelCount(page []byte) int {
	seen := map[string]bool{}
	for line := range strings.SplitSeq(string(page), "\n") {
		if _, rest, ok := strings.Cut(line, `dest="`); ok {
			v, _, _ := strings.Cut(rest, `"`)
			seen[v] = true
		}
	}
	return len(seen)
}

// opsGet GETs path from relay process p's --metrics-addr.
func (b *bench) opsGet(ctx context.Context, p *proc, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// metricValue is the value of the unlabelled metric name in a /metrics
// page, "?" if absent.
func metricValue(page []byte, name string) string {
	for line := range strings.Lines(string(page)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return v
		}
	}
	return "?"
}

// logSpans says, from relay's log, how long its embedded NATS server took
// to start (recovering the stored consumers) and how long relay then took
// until "relay running" (its consumers created or looked up).
func logSpans(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var first, nats, running time.Time
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		ts, ok := logTime(line)
		if !ok {
			continue
		}
		if first.IsZero() {
			first = ts
		}
		switch {
		case strings.Contains(line, `msg="embedded NATS started"`):
			nats = ts
		case strings.Contains(line, `msg="relay running"`):
			running = ts
		}
	}
	if first.IsZero() || nats.IsZero() || running.IsZero() {
		return "log spans unknown"
	}
	return fmt.Sprintf("embedded NATS up %.1fs after the first log line, relay running %.1fs after that", nats.Sub(first).Seconds(), running.Sub(nats).Seconds())
}

// logTime is the time= of one of relay's text log lines.
func logTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(v, " ")
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

var errNoDests = errors.New("-dests: give 1 to 100000 destinations")
