package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/api"
	"github.com/relaydev/relay/stream"
)

// The systems of scenario (p), one result each per round.
const (
	pDirect = "direct JetStream"
	pSingle = "HTTP API, single"
	pBatch  = "HTTP API, batch"
	// The floor (issue 44): a minimal net/http handler that reads the JSON
	// body and publishes asynchronously, 202 after the ack (apiFloor).
	pFloor      = "minimal handler, single"
	pFloorBatch = "minimal handler, batch"
)

// scenarioP: publishing over relay's HTTP API against direct JetStream
// publishing (issue 29). Each round publishes -p-n events of 1 KiB three
// ways, each to a paused destination of its own (so nothing is delivered
// and no id is a duplicate), each with a fresh 'relay run --api-addr'
// running: the bench's async JetStream publisher (relay only runs its
// unknown-destination check), POST /v1/events one event per request from
// -p-clients goroutines, and POST /v1/events:batch with -p-batch events
// per request from -p-batch-clients goroutines. Each is timed from the
// first request to the last acknowledgment, and must leave exactly -p-n
// new messages on its destination's subjects. -a-rounds rounds, the order
// reversed in every other one; the targets use the median of the rounds'
// ratios to direct publishing.
func (b *bench) scenarioP(ctx context.Context) ([]*result, error) {
	var out []*result
	for k := 1; k <= b.opts.aRounds; k++ {
		modes := []string{pDirect, pFloor, pSingle, pFloorBatch, pBatch}
		if k%2 == 0 {
			slices.Reverse(modes)
		}
		got := map[string]*result{}
		for _, mode := range modes {
			r, err := b.publishRun(ctx, mode, k)
			if err != nil {
				return nil, fmt.Errorf("(p) %s, round %d: %w", mode, k, err)
			}
			logf("  %s: %d events in %.2fs = %.0f/s, relay CPU %.3f s/1k, peak RSS %.0f MB", mode, r.Events, r.Seconds, r.PerSecond, r.ProcCPUPer1, r.ProcRSSMB)
			got[mode] = r
		}
		direct := got[pDirect]
		for mode, floor := range map[string]string{pSingle: pFloor, pBatch: pFloorBatch} {
			r, f := got[mode], got[floor]
			r.VsDirect = r.PerSecond / direct.PerSecond
			r.VsFloor = r.PerSecond / f.PerSecond
			f.VsDirect = f.PerSecond / direct.PerSecond
			r.Notes = append(r.Notes, fmt.Sprintf("%.0f%% of the minimal handler (%.0f/s), %.0f%% of direct JetStream publishing (%.0f/s) in this round", 100*r.VsFloor, f.PerSecond, 100*r.VsDirect, direct.PerSecond))
		}
		out = append(out, direct, got[pFloor], got[pSingle], got[pFloorBatch], got[pBatch])
	}
	return out, nil
}

// publishRun measures one mode of (p) in round k on a destination of its
// own, with a relay process of its own serving the API, on a new NATS
// server: on one server, publishing got slower round by round (direct
// publishing's CPU per event went from 0.017 to 0.032 ms over three rounds,
// as the stream and its duplicate window filled).
func (b *bench) publishRun(ctx context.Context, mode string, k int) (*result, error) {
	n := b.opts.pN
	if err := b.freshNATS(ctx); err != nil {
		return nil, err
	}
	keys, err := api.OpenKeys(ctx, b.js)
	if err != nil {
		return nil, err
	}
	key, _, err := keys.Create(ctx, "bench", api.ScopePublish)
	if err != nil {
		return nil, fmt.Errorf("(p) create an API key: %w", err)
	}
	r := &result{Scenario: "p", Title: "publish", System: mode, Round: k, Events: n}
	short := map[string]string{pDirect: "direct", pSingle: "single", pBatch: "batch", pFloor: "floor", pFloorBatch: "floorbatch"}[mode]
	dest := "p" + strconv.Itoa(k) + "-" + short
	if err := b.addPausedDest(ctx, dest); err != nil {
		return nil, err
	}
	if err := b.settleUnrouted(ctx); err != nil {
		return nil, err
	}
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	b.relayArgs = []string{"--api-addr", apiAddr}
	name := "p-" + short + strconv.Itoa(k)
	p, err := b.startRelay(name)
	b.relayArgs = nil
	if err != nil {
		return nil, err
	}
	defer p.stop(20 * time.Second)
	profiled := b.profileRelay(ctx, p, name)
	base := "http://" + apiAddr
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		Proxy: nil, MaxIdleConns: 2 * max(b.opts.pClients, b.opts.pBClients), MaxIdleConnsPerHost: 2 * max(b.opts.pClients, b.opts.pBClients),
		IdleConnTimeout: 90 * time.Second,
	}}
	defer hc.CloseIdleConnections()
	if err := waitFor(ctx, p, time.Minute, 20*time.Millisecond, "relay's API answers GET /v1/openapi.json", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/openapi.json", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("status %d", resp.StatusCode)
	}); err != nil {
		return nil, err
	}
	// The unknown-destination check catches up with what earlier runs
	// published before the measurement, not in it.
	if err := b.waitCheckCaughtUp(ctx, p, 5*time.Minute); err != nil {
		return nil, err
	}
	measured := p // whose CPU and RSS the result gives
	if mode == pFloor || mode == pFloorBatch {
		floorAddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		fp, err := startReady(ctx, "api floor", filepath.Join(b.logDir, "floor-"+name+".log"), "api-floor", "-nats-url", b.natsURL, "-addr", floorAddr)
		if err != nil {
			return nil, err
		}
		defer fp.stop(20 * time.Second)
		base, measured = "http://"+floorAddr, fp
	}
	before, err := b.destCount(ctx, dest)
	if err != nil {
		return nil, err
	}
	prefix := dest + "-"
	cpu0, _ := measured.sample()
	m := b.mark()
	start := time.Now()
	var lat []time.Duration
	var conns int64
	switch mode {
	case pDirect:
		_, err = b.pub.backlog(ctx, []string{stream.InSubject(dest, "")}, prefix, n, b.opts.window)
	case pSingle, pFloor:
		r.Requests = int64(n)
		lat, conns, err = postAll(ctx, hc, base+"/v1/events", key, b.opts.pClients, n, 1, func(from, _ int) []byte {
			return appendEvent(nil, dest, prefix+strconv.Itoa(from), time.Now().UnixNano())
		}, nil)
	case pBatch, pFloorBatch:
		per := b.opts.pBatch
		r.Requests = int64((n + per - 1) / per)
		lat, conns, err = postAll(ctx, hc, base+"/v1/events:batch", key, b.opts.pBClients, n, per, func(from, to int) []byte {
			return batchBody(dest, prefix, from, to, time.Now().UnixNano())
		}, checkBatchAnswer)
	}
	el := time.Since(start)
	if err != nil {
		return nil, err
	}
	r.procFigures(measured, cpu0)
	b.finishPublish(r, m, el)
	if len(lat) > 0 {
		r.LatencyKind = "request"
		r.P50ms, r.P99ms, r.Maxms = latencyMs(lat)
	}
	after, err := b.destCount(ctx, dest)
	if err != nil {
		return nil, err
	}
	if stored := after - before; stored != uint64(n) {
		return nil, fmt.Errorf("%d events published, but %s's subjects hold %d new messages", n, dest, stored)
	}
	r.Delivered = int64(n) // stored, not delivered: figures per 1,000 count events stored
	if r.ProcCPU > 0 {
		r.ProcCPUPer1 = r.ProcCPU / float64(n) * 1000
	}
	switch {
	case k > 1:
	case mode == pDirect:
		r.Notes = append(r.Notes, fmt.Sprintf("the bench's async JetStream publisher (Nats-Msg-Id, at most %d unacknowledged); relay ran with its API idle, its CPU its unknown-destination check's. "+
			"In (p) deliveries/s is events stored per second (acknowledged, from the first request), CPU s/1k per 1,000 events stored", b.opts.window))
	case mode == pSingle:
		r.Notes = append(r.Notes, fmt.Sprintf("POST /v1/events, one event per request, from %d client goroutines in the bench process on keep-alive connections; latency columns: request to its 202", b.opts.pClients))
	case mode == pBatch:
		r.Notes = append(r.Notes, fmt.Sprintf("POST /v1/events:batch, %d events per request, from %d client goroutines; latency columns: request to its 202", b.opts.pBatch, b.opts.pBClients))
	case mode == pFloor, mode == pFloorBatch:
		r.Notes = append(r.Notes, "the floor: a minimal net/http handler (relay-bench api-floor, a process of its own) that reads the JSON body and publishes asynchronously, 202 after JetStream's ack; the same requests as relay's API gets; relay ran with its API idle; CPU s/1k is the handler's")
	}
	if mode != pDirect {
		r.Notes = append(r.Notes, fmt.Sprintf("%d requests on %d TCP connections", r.Requests, conns))
	}
	if note := logErrors(p.logPath); note != "" {
		r.Notes = append(r.Notes, note)
	}
	// Leave the next run nothing to check.
	if err := b.waitCheckCaughtUp(ctx, p, 5*time.Minute); err != nil {
		return nil, err
	}
	if profiled != nil {
		r.Notes = append(r.Notes, <-profiled)
	}
	if err := p.stop(20 * time.Second); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	return r, nil
}

// finishPublish fills in what finish does for a measurement with no
// deliveries: the CPU used since m, the NATS messages, the rate.
func (b *bench) finishPublish(r *result, m cpuMark, el time.Duration) {
	s, _ := b.sink.sample()
	r.BenchCPU = selfCPU() - m.bench
	r.SinkCPU = s - m.sink
	r.SystemCPU = systemBusy() - m.system
	r.NATSMsgs = b.natsMsgs() - m.natsMsgs
	r.Seconds = el.Seconds()
	r.PerSecond = float64(r.Events) / el.Seconds()
}

// destCount is how many messages the events stream holds on dest's
// subjects.
func (b *bench) destCount(ctx context.Context, dest string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, f := range stream.DestFilters(dest) {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return 0, fmt.Errorf("count %s's messages (%s): %w", dest, f, err)
		}
		for _, c := range info.State.Subjects {
			total += c
		}
	}
	return total, nil
}

// postAll POSTs n events to url in requests of per events (the last may
// have fewer), from clients goroutines, with key. body makes the request
// body of events [from, to). Each answer must be 202, and pass check if
// given, or postAll stops and fails naming the status and the body. It
// returns each request's time to its answer, and how many connections
// the requests opened (keep-alive: about one per client).
func postAll(ctx context.Context, hc *http.Client, url, key string, clients, n, per int, body func(from, to int) []byte, check func([]byte, int) error) ([]time.Duration, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var conns atomic.Int64
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{ConnectDone: func(_, _ string, err error) {
		if err == nil {
			conns.Add(1)
		}
	}})
	reqs := (n + per - 1) / per
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	all := make([]time.Duration, 0, reqs)
	var wg sync.WaitGroup
	for range min(clients, reqs) {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for {
				i := int(next.Add(1)) - 1
				if i >= reqs || ctx.Err() != nil {
					return
				}
				from, to := i*per, min((i+1)*per, n)
				t0 := time.Now()
				err := postEvents(ctx, hc, url, key, body(from, to), to-from, check)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("events %d to %d: %w", from, to-1, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, 0, first
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return all, conns.Load(), nil
}

// postEvents sends one publish request and reads its answer, which must be
// 202 (and pass check, if given, for the count events sent).
func postEvents(ctx context.Context, hc *http.Client, url, key string, body []byte, count int, check func([]byte, int) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("POST %s: reading the answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST %s: status %d, not 202: %s", url, resp.StatusCode, clip(ans, 512))
	}
	if check != nil {
		if err := check(ans, count); err != nil {
			return fmt.Errorf("POST %s: %w", url, err)
		}
	}
	return nil
}

// checkBatchAnswer fails unless a batch's 202 answer says all count events
// were stored, none failed, none a duplicate.
func checkBatchAnswer(ans []byte, count int) error {
	var a struct {
		Stored  *int `json:"stored"`
		Failed  *int `json:"failed"`
		Results []struct {
			Duplicate *bool `json:"duplicate"`
		} `json:"results"`
	}
	if err := json.Unmarshal(ans, &a); err != nil {
		return fmt.Errorf("answer is not a batch's: %w: %s", err, clip(ans, 512))
	}
	if a.Stored == nil || a.Failed == nil || *a.Stored != count || *a.Failed != 0 || len(a.Results) != count {
		return fmt.Errorf("%d events sent, answer: %s", count, clip(ans, 512))
	}
	for i, x := range a.Results {
		if x.Duplicate != nil && *x.Duplicate {
			return fmt.Errorf("event %d of the batch was a duplicate: nothing stored", i)
		}
	}
	return nil
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// appendEvent appends the JSON of one event of POST /v1/events (or of a
// batch) to b: {"dest":...,"id":...,"data":<makeBody>}. dest and id are the
// bench's own, letters, digits and '-', so they need no escaping.
func appendEvent(b []byte, dest, id string, ts int64) []byte {
	b = append(b, `{"dest":"`...)
	b = append(b, dest...)
	b = append(b, `","id":"`...)
	b = append(b, id...)
	b = append(b, `","data":`...)
	b = append(b, makeBody(ts, id)...)
	return append(b, '}')
}

// batchBody is the body of POST /v1/events:batch with events [from, to)
// for dest, ids prefix<i>: {"events":[...]}.
func batchBody(dest, prefix string, from, to int, ts int64) []byte {
	b := make([]byte, 0, (to-from)*(bodySize+len(dest)+len(prefix)+40)+16)
	b = append(b, `{"events":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = appendEvent(b, dest, prefix+strconv.Itoa(i), ts)
	}
	return append(b, "]}"...)
}

// latencyMs is the median, 99th percentile (nearest rank, as the sink's)
// and largest of d, in ms.
func latencyMs(d []time.Duration) (p50, p99, maxMs float64) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	v := make([]int64, len(d))
	for i, x := range d {
		v[i] = int64(x)
	}
	slices.Sort(v)
	return float64(percentile(v, 0.50)) / 1e6, float64(percentile(v, 0.99)) / 1e6, float64(v[len(v)-1]) / 1e6
}

// publishTargets judge (p) (issue 44): events/s of POST /v1/events, and of
// POST /v1/events:batch, at least 80% of the minimal handler's (apiFloor)
// taking the same requests, each on the median of the rounds' ratios. A
// note gives the ratio to direct JetStream publishing, as information.
func (r *report) publishTargets() []target {
	single := target{Name: "publish over HTTP", Want: "(p) POST /v1/events >= 80% of a minimal handler publishing to JetStream, events/s", Status: "n/a", Got: "(p) not run"}
	batch := target{Name: "publish batches over HTTP", Want: "(p) POST /v1/events:batch >= 80% of the minimal handler taking batches", Status: "n/a", Got: "(p) not run"}
	floors := map[string]map[int]*result{pFloor: {}, pFloorBatch: {}} // by round
	for _, x := range r.Results {
		if x.Scenario == "p" && floors[x.System] != nil {
			floors[x.System][x.Round] = x
		}
	}
	judge := func(t *target, system, floor string, want float64) {
		var rates, floorRates, ratios, direct []float64
		for _, x := range r.Results {
			if x.Scenario != "p" || x.System != system {
				continue
			}
			f := floors[floor][x.Round]
			if f == nil || x.VsFloor == 0 {
				continue
			}
			rates, floorRates, ratios = append(rates, x.PerSecond), append(floorRates, f.PerSecond), append(ratios, x.VsFloor)
			direct = append(direct, x.VsDirect)
		}
		if len(ratios) == 0 {
			return
		}
		ratio := median(ratios)
		t.Got = fmt.Sprintf("median of %d rounds %.0f%% (%s); medians %.0f/s vs %.0f/s", len(ratios), 100*ratio, percents(ratios), median(rates), median(floorRates))
		t.Status = passMiss(ratio >= want)
		t.Note = fmt.Sprintf("of direct JetStream publishing: %.0f%% (median), information only", 100*median(direct))
	}
	judge(&single, pSingle, pFloor, 0.8)
	judge(&batch, pBatch, pFloorBatch, 0.8)
	return []target{single, batch}
}
