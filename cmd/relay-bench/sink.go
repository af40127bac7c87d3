package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The sink is the receiving end of every benchmark run. It runs as its own
// process (relay-bench sink), so that its CPU is neither relay's nor the
// bench's.
//
//	POST /d/<name>[?fail=P]  a delivery for destination <name>; answered 204,
//	                         or 503 for P percent of requests (chosen by a
//	                         hash of webhook-id and the request's attempt
//	                         number, so the choice is deterministic)
//	GET  /count              "delivered requests" since the last reset
//	GET  /stats[?bins=1]     sinkStats as JSON; with bins=1 also the new
//	                         deliveries per 100 ms since the reset
//	POST /reset              forget everything
//
// A body is expected to start with {"ts":<unix nanoseconds of the publish>;
// the latency of a 2xx answer is the time of its arrival minus ts.
//
// A delivery is a (destination, webhook-id) pair: an event fanned out to
// several subscribers reaches each with the same webhook-id, and each copy
// is a delivery of its own; a duplicate is a second 2xx for the same pair.

// sinkStats is what GET /stats answers.
type sinkStats struct {
	Delivered  int64            `json:"delivered"`  // distinct (destination, webhook-id) pairs answered 2xx
	Requests   int64            `json:"requests"`   // every POST /d/...
	Duplicates int64            `json:"duplicates"` // 2xx answers for a pair already answered 2xx
	Failed     int64            `json:"failed"`     // answered 503
	P50ms      float64          `json:"p50_ms"`
	P99ms      float64          `json:"p99_ms"`
	Maxms      float64          `json:"max_ms"`
	Samples    int              `json:"latency_samples"`
	Conns      int64            `json:"connections"` // TCP connections accepted
	Late       lateSpells       `json:"late"`        // answers over lateAfter
	ByDest     map[string]int64 `json:"by_dest"`     // Delivered, per destination
	// MaxGapMs is the longest time between two new deliveries (a second
	// 2xx for a pair does not count), and MaxGapEndNs when the one that
	// ended it arrived (Unix ns; 0 without two deliveries).
	MaxGapMs    float64 `json:"max_gap_ms"`
	MaxGapEndNs int64   `json:"max_gap_end_unix_ns,omitempty"`
	// LastDuplicateNs is when the last duplicate arrived (Unix ns; 0
	// without one).
	LastDuplicateNs int64 `json:"last_duplicate_unix_ns,omitempty"`
	// With ?bins=1: new deliveries per binWidth since the reset, the first
	// bin starting at BinsStartNs (Unix ns).
	Bins        []int64 `json:"per_100ms,omitempty"`
	BinsStartNs int64   `json:"bins_start_unix_ns,omitempty"`
}

// binWidth is the width of the sink's delivery histogram (GET /stats?bins=1),
// and maxBins bounds it: an hour.
const (
	binWidth = 100 * time.Millisecond
	maxBins  = 36_000
)

type idState struct {
	requests  uint32
	delivered bool
}

type sinkServer struct {
	mu         sync.Mutex
	requests   int64
	delivered  int64
	duplicates int64
	failed     int64
	conns      atomic.Int64
	byDest     map[string]int64
	ids        map[uint64]idState // FNV-64a of destination, NUL, webhook-id
	lat        []int64            // nanoseconds, 2xx answers only
	pub        []int64            // the publish time of each lat, Unix ns
	resetAt    int64              // Unix ns of the last reset (or the start)
	bins       []int64            // new deliveries per binWidth since resetAt
	lastNew    int64              // Unix ns of the last new delivery
	maxGap     int64              // the longest time between two new deliveries
	maxGapEnd  int64
	lastDup    int64 // Unix ns of the last duplicate
}

func newSinkServer() *sinkServer {
	return &sinkServer{byDest: map[string]int64{}, ids: map[uint64]idState{}, lat: make([]int64, 0, 1<<16), pub: make([]int64, 0, 1<<16), resetAt: time.Now().UnixNano()}
}

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func (s *sinkServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if dest, ok := strings.CutPrefix(r.URL.Path, "/d/"); ok && r.Method == http.MethodPost {
		s.deliver(w, r, dest)
		return
	}
	switch {
	case r.URL.Path == "/count" && r.Method == http.MethodGet:
		s.mu.Lock()
		d, n := s.delivered, s.requests
		s.mu.Unlock()
		fmt.Fprintf(w, "%d %d\n", d, n)
	case r.URL.Path == "/stats" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.stats(r.URL.Query().Get("bins") == "1"))
	case r.URL.Path == "/reset" && r.Method == http.MethodPost:
		s.mu.Lock()
		s.requests, s.delivered, s.duplicates, s.failed = 0, 0, 0, 0
		s.byDest = map[string]int64{}
		s.ids = map[uint64]idState{}
		s.lat, s.pub = s.lat[:0], s.pub[:0]
		s.resetAt, s.bins, s.lastNew, s.maxGap, s.maxGapEnd, s.lastDup = time.Now().UnixNano(), s.bins[:0], 0, 0, 0, 0
		s.conns.Store(0)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func (s *sinkServer) deliver(w http.ResponseWriter, r *http.Request, dest string) {
	bp := bodyPool.Get().(*[]byte)
	body := (*bp)[:0]
	var err error
	for {
		if len(body) == cap(body) {
			body = slices.Grow(body, cap(body))
		}
		var n int
		n, err = r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err != nil {
			break
		}
	}
	if !errors.Is(err, io.EOF) {
		*bp = body
		bodyPool.Put(bp)
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	now := time.Now().UnixNano()
	ts := parseTS(body)
	*bp = body
	bodyPool.Put(bp)

	failPct := 0
	if q := r.URL.RawQuery; q != "" {
		if v, ok := strings.CutPrefix(q, "fail="); ok {
			failPct, _ = strconv.Atoi(v)
		}
	}
	id := r.Header.Get("webhook-id")
	key := deliveryKey(dest, id)

	s.mu.Lock()
	st := s.ids[key]
	st.requests++
	status := http.StatusNoContent
	if failPct > 0 && failHash(id, st.requests)%100 < uint64(failPct) {
		status = http.StatusServiceUnavailable
	}
	s.requests++
	if status == http.StatusNoContent {
		if st.delivered {
			s.duplicates++
			s.lastDup = now
		} else {
			st.delivered = true
			s.delivered++
			s.byDest[dest]++
			s.newDelivery(now)
		}
		if ts > 0 {
			s.lat = append(s.lat, now-ts)
			s.pub = append(s.pub, ts)
		}
	} else {
		s.failed++
	}
	s.ids[key] = st
	s.mu.Unlock()
	w.WriteHeader(status)
}

// newDelivery records the arrival of a new delivery at now (Unix ns) in the
// histogram and the longest gap. Called with s.mu held.
func (s *sinkServer) newDelivery(now int64) {
	if i := (now - s.resetAt) / int64(binWidth); i >= 0 && i < maxBins {
		for int64(len(s.bins)) <= i {
			s.bins = append(s.bins, 0)
		}
		s.bins[i]++
	}
	if s.lastNew != 0 && now-s.lastNew > s.maxGap {
		s.maxGap, s.maxGapEnd = now-s.lastNew, now
	}
	s.lastNew = now
}

// deliveryKey identifies a delivery: one destination's copy of an event.
func deliveryKey(dest, id string) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, dest)
	_, _ = h.Write([]byte{0})
	_, _ = io.WriteString(h, id)
	return h.Sum64()
}

// failHash decides deterministically whether attempt n of id fails.
func failHash(id string, n uint32) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, id)
	_, _ = io.WriteString(h, "#")
	_, _ = io.WriteString(h, strconv.FormatUint(uint64(n), 10))
	return h.Sum64()
}

// parseTS reads the publish time from a body that starts with {"ts":N.
func parseTS(b []byte) int64 {
	const prefix = `{"ts":`
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return 0
	}
	var v int64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int64(c-'0')
	}
	return v
}

func (s *sinkServer) stats(bins bool) sinkStats {
	s.mu.Lock()
	st := sinkStats{Delivered: s.delivered, Requests: s.requests, Duplicates: s.duplicates, Failed: s.failed, Conns: s.conns.Load(), ByDest: make(map[string]int64, len(s.byDest)),
		MaxGapMs: ms(s.maxGap), MaxGapEndNs: s.maxGapEnd, LastDuplicateNs: s.lastDup}
	if bins {
		st.Bins, st.BinsStartNs = slices.Clone(s.bins), s.resetAt
	}
	for k, v := range s.byDest {
		st.ByDest[k] = v
	}
	lat := slices.Clone(s.lat)
	st.Late = late(lat, s.pub)
	s.mu.Unlock()
	slices.Sort(lat)
	st.Samples = len(lat)
	st.P50ms = ms(percentile(lat, 0.50))
	st.P99ms = ms(percentile(lat, 0.99))
	if len(lat) > 0 {
		st.Maxms = ms(lat[len(lat)-1])
	}
	return st
}

// lateAfter: an answer later than this after its publish is late (the
// (b) target's bound).
const lateAfter = 10 * time.Millisecond

// lateSpells groups the late answers by publish time: a spell is a run of
// late events published less than 50 ms apart. Many events in one short
// spell are a stall somewhere; spells spread over the run are queueing.
type lateSpells struct {
	Events int `json:"events"`
	Spells int `json:"spells"`
	// The spell with the most events: when its first event was published
	// (seconds after the first event of the run), over how long, and how
	// late its latest answer was.
	WorstEvents int     `json:"worst_events,omitempty"`
	WorstAtSecs float64 `json:"worst_at_seconds,omitempty"`
	WorstOverMs float64 `json:"worst_over_ms,omitempty"`
	WorstMaxMs  float64 `json:"worst_max_ms,omitempty"`
}

func (ls lateSpells) String() string {
	if ls.Events == 0 {
		return fmt.Sprintf("no answer later than %s after its publish", lateAfter)
	}
	return fmt.Sprintf("answers later than %s after the publish: %d, in %d spells (late events published less than 50ms apart); "+
		"the largest: %d events published over %.1fms from %.2fs into the run, the latest answered %.1fms after its publish",
		lateAfter, ls.Events, ls.Spells, ls.WorstEvents, ls.WorstOverMs, ls.WorstAtSecs, ls.WorstMaxMs)
}

// late reads the spells of lat (latencies, ns) and pub (publish times).
func late(lat, pub []int64) lateSpells {
	type ev struct{ pub, lat int64 }
	var evs []ev
	first := int64(0)
	for i, l := range lat {
		if first == 0 || pub[i] < first {
			first = pub[i]
		}
		if l > int64(lateAfter) {
			evs = append(evs, ev{pub[i], l})
		}
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Compare(a.pub, b.pub) })
	ls := lateSpells{Events: len(evs)}
	const gap = int64(50 * time.Millisecond)
	for i := 0; i < len(evs); {
		j, worst := i+1, evs[i].lat
		for ; j < len(evs) && evs[j].pub-evs[j-1].pub < gap; j++ {
			worst = max(worst, evs[j].lat)
		}
		ls.Spells++
		if j-i > ls.WorstEvents {
			ls.WorstEvents, ls.WorstAtSecs = j-i, float64(evs[i].pub-first)/1e9
			ls.WorstOverMs, ls.WorstMaxMs = ms(evs[j-1].pub-evs[i].pub), ms(worst)
		}
		i = j
	}
	return ls
}

// percentile is the nearest-rank percentile of sorted v.
func percentile(v []int64, p float64) int64 {
	if len(v) == 0 {
		return 0
	}
	i := int(p*float64(len(v))+0.999999) - 1
	return v[min(max(i, 0), len(v)-1)]
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// runSink is the hidden subcommand "sink": it prints the address it listens
// on as the first line of stdout, then serves until SIGTERM/SIGINT or until
// its stdin is closed (the bench process went away).
func runSink(args []string) error {
	fs := flag.NewFlagSet("relay-bench sink", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (loopback only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", *addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %q: the sink listens on loopback only", *addr)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, ln.Addr().String())
	if err := out.Flush(); err != nil {
		return err
	}
	ss := newSinkServer()
	srv := &http.Server{
		Handler: ss,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				ss.conns.Add(1)
			}
		},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
