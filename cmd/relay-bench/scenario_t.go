package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// scenarioT: fairness between tenants. Tenant B publishes at -t-rate
// (100/s) to a destination answering at once, and its publish-to-2xx
// latency is measured on one relay: with tenant A idle; then with A
// holding a backlog of -t-backlog (100,000) events to a destination that
// answers in 1s and -t-failing (10,000) for one that answers 500, as a
// user's destinations are set by default (the breaker pauses the failing
// one, and its events wait in retry); then, as the worst case, with A's
// failing destination's breaker off, so that all its events are attempted
// and retried over and over. The target: B's p99 with A loaded (by
// default) within 2x of its p99 with A idle. Relay runs as the other
// scenarios run it; the destinations have relay's default concurrency
// (16). A's endpoints are served by the bench's own process, not the
// sink, so the sink's figures are B's alone.
func (b *bench) scenarioT(ctx context.Context) ([]*result, error) {
	ctx, cancel := context.WithCancel(ctx) // A's endpoints end with the scenario
	defer cancel()
	slow, _, err := serveBench(ctx, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	})
	if err != nil {
		return nil, err
	}
	fail := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }
	failing, failingHits, err := serveBench(ctx, fail)
	if err != nil {
		return nil, err
	}
	storm, stormHits, err := serveBench(ctx, fail)
	if err != nil {
		return nil, err
	}
	for _, d := range []destination.Destination{
		{Name: stream.DestRef("A", "slow"), URL: slow, Concurrency: destination.DefaultConcurrency},
		{Name: stream.DestRef("A", "failing"), URL: failing, Concurrency: destination.DefaultConcurrency, Retry: destination.RetryPolicy{MaxAttempts: 1000}},
		{Name: stream.DestRef("A", "storm"), URL: storm, Concurrency: destination.DefaultConcurrency, BreakerThreshold: -1, Retry: destination.RetryPolicy{MaxAttempts: 1000}},
		{Name: stream.DestRef("B", "idle"), Concurrency: destination.DefaultConcurrency},
		{Name: stream.DestRef("B", "loaded"), Concurrency: destination.DefaultConcurrency},
		{Name: stream.DestRef("B", "storm"), Concurrency: destination.DefaultConcurrency},
	} {
		d.Shared = b.opts.shared // make bench: shared destinations, as thousands of tenants' would be
		if err := b.addDest(ctx, d); err != nil {
			return nil, err
		}
	}
	p, err := b.startRelay("t")
	if err != nil {
		return nil, err
	}
	defer p.stop(20 * time.Second)
	rate, dur := b.opts.tRate, b.opts.tDuration
	title := fmt.Sprintf("fairness: tenant B at %.0f/s", rate)
	if b.opts.shared {
		title += ", shared destinations"
	}
	measure := func(system, dest string) (*result, error) {
		r := &result{Scenario: "t", Title: title, System: system, Rate: rate, LatencyKind: "publish-to-delivery"}
		if err := b.atRateMeasured(ctx, r, stream.DestRef("B", dest), rate, dur, p); err != nil {
			return nil, fmt.Errorf("(t) %s: %w", system, err)
		}
		logf("  tenant B, %s: p50 %.2fms p99 %.2fms max %.2fms", system, r.P50ms, r.P99ms, r.Maxms)
		return r, nil
	}
	idle, err := measure("relay, tenant A idle", "idle")
	if err != nil {
		return nil, err
	}

	logf("  tenant A: %d events to a 1s endpoint, %d to a failing one", b.opts.tBacklog, b.opts.tFailing)
	if err := b.publishMany(ctx, stream.DestRef("A", "slow"), "a-slow-", b.opts.tBacklog); err != nil {
		return nil, err
	}
	if err := b.publishMany(ctx, stream.DestRef("A", "failing"), "a-failing-", b.opts.tFailing); err != nil {
		return nil, err
	}
	// Until the failing destination is paused by its breaker (or every
	// event had its first attempt): its events wait in retry.
	if err := b.waitFor(ctx, 5*time.Minute, "tenant A's failing destination paused or all attempted", func() bool {
		d, err := b.store.Get(ctx, stream.DestRef("A", "failing"))
		return failingHits.Load() >= int64(b.opts.tFailing) || err == nil && d.PauseReason == destination.PauseCircuitOpen
	}); err != nil {
		return nil, err
	}
	loaded, err := measure("relay, tenant A loaded", "loaded")
	if err != nil {
		return nil, err
	}
	loaded.Notes = append(loaded.Notes,
		fmt.Sprintf("tenant A meanwhile: %d events waiting for a 1s endpoint, %d for one answering 500 (its breaker at relay's default: it answered %d requests by the end)", b.opts.tBacklog, b.opts.tFailing, failingHits.Load()),
		fmt.Sprintf("B's p99 with A loaded / with A idle: %.2f (target at most 2)", loaded.P99ms/idle.P99ms))

	// The worst case: a failing destination without a breaker
	// (information, with -t-storm).
	if !b.opts.tStorm {
		loaded.Notes = append(loaded.Notes, "the run with tenant A's failing destination's breaker off is left out (-t-storm runs it)")
		return []*result{idle, loaded}, nil
	}
	if err := b.publishMany(ctx, stream.DestRef("A", "storm"), "a-storm-", b.opts.tFailing); err != nil {
		return nil, err
	}
	if err := b.waitFor(ctx, 5*time.Minute, "tenant A's breakerless destination's first attempts", func() bool {
		return stormHits.Load() >= int64(b.opts.tFailing)
	}); err != nil {
		return nil, err
	}
	before := stormHits.Load()
	worst, err := measure("relay, tenant A loaded, its breaker off", "storm")
	if err != nil {
		return nil, err
	}
	worst.Notes = append(worst.Notes,
		fmt.Sprintf("tenant A meanwhile: the above, and %d events in retry to a 500 with its breaker off (-breaker-threshold -1): %d attempts of theirs in this measurement", b.opts.tFailing, stormHits.Load()-before),
		fmt.Sprintf("B's p99 / with A idle: %.2f (information: the target is with relay's defaults)", worst.P99ms/idle.P99ms))
	return []*result{idle, loaded, worst}, nil
}

// publishMany publishes n events for dest, their ids prefix and a number.
func (b *bench) publishMany(ctx context.Context, dest, prefix string, n int) error {
	for i := range n {
		if err := b.pub.publish(dest, prefix+strconv.Itoa(i)); err != nil {
			return err
		}
		if i%2000 == 1999 { // within the publisher's window of async publishes
			if err := b.pub.wait(ctx); err != nil {
				return err
			}
		}
	}
	return b.pub.wait(ctx)
}

// waitFor polls cond every 100ms until it holds, or fails after limit.
func (b *bench) waitFor(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s", limit, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// serveBench serves h on a loopback port of the bench's process until ctx
// ends, and returns its URL and the count of the requests it answered.
func serveBench(ctx context.Context, h http.HandlerFunc) (string, *atomic.Int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(w, r)
		hits.Add(1)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("bench endpoint: %v", err)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return "http://" + ln.Addr().String() + "/", &hits, nil
}
