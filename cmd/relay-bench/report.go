package main

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/relaydev/relay/stream"
)

type machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	MemTotalMB int64  `json:"mem_total_mb"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Kernel     string `json:"kernel"`
}

type target struct {
	Name   string `json:"name"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	Status string `json:"status"` // PASS, MISS or n/a
	Note   string `json:"note,omitempty"`
}

type report struct {
	Date          string    `json:"date"`
	Command       string    `json:"command"`
	Argv          []string  `json:"argv"`
	Machine       machine   `json:"machine"`
	GoVersion     string    `json:"go_version"`
	RelayBinary   string    `json:"relay_binary"`
	RelayBuild    string    `json:"relay_build"`
	RelayCommand  string    `json:"relay_command"`
	NATSVersion   string    `json:"nats_server_version"`
	Options       optsJSON  `json:"options"`
	Seconds       float64   `json:"seconds"`
	LoadStart     string    `json:"loadavg_start"`
	LoadEnd       string    `json:"loadavg_end"`
	Results       []*result `json:"results"`
	DeadLetters   int64     `json:"dead_letters"`
	EventsInStore int64     `json:"events_in_stream"`
	Targets       []target  `json:"targets"`
}

type optsJSON struct {
	N            int     `json:"n"`
	Backlog      int     `json:"backlog"`
	FailN        int     `json:"fail_n"`
	RedisN       int     `json:"redis_n"`
	Scenarios    string  `json:"scenarios"`
	Rate         float64 `json:"rate"`
	Duration     string  `json:"duration"`
	LoopDuration string  `json:"loop_duration"`
	TDuration    string  `json:"t_duration"`
	Tick         string  `json:"tick"`
	Concurrency  int     `json:"concurrency"`
	LoopWorkers  int     `json:"loop_workers"`
	LoopInBench  bool    `json:"loop_in_bench"`
	SharedNATS   bool    `json:"shared_nats"`
	ARounds      int     `json:"a_rounds"`
	ALive        bool    `json:"a_live"`
	AA           bool    `json:"aa,omitempty"`                // relay's rows of (a), (b) and (i) are the minimal loop
	LoopCPUProf  bool    `json:"loop_cpu_profiled,omitempty"` // profiling adds to the loop's CPU
	Window       int     `json:"window"`
	GSubscribers []int   `json:"g_subscribers"`
	GDeliveries  int     `json:"g_deliveries"`
	RelayProf    bool    `json:"relay_cpu_profiled,omitempty"` // profiling adds to relay's CPU
	KeysN        int     `json:"keys_n"`
	KeysDrain    int     `json:"keys_drain"`
	PN           int     `json:"p_n"`
	PClients     int     `json:"p_clients"`
	PBatch       int     `json:"p_batch"`
	PBClients    int     `json:"p_batch_clients"`
	RN           int     `json:"r_n"`
	RRounds      int     `json:"r_rounds"`
	RRateShare   float64 `json:"r_rate_share"`
	RDuration    string  `json:"r_duration"`
	RDown        string  `json:"r_down"`
}

func newReport(o options) *report {
	r := &report{
		Date:        time.Now().UTC().Format(time.RFC3339),
		Command:     "relay-bench " + strings.Join(os.Args[1:], " "),
		Argv:        os.Args,
		Machine:     machineInfo(),
		GoVersion:   runtime.Version(),
		RelayBinary: o.relay,
		RelayCommand: o.relay + " --nats-url <embedded server> --log-level warn run --allow-net 127.0.0.0/8 --metrics-addr 127.0.0.1:<a free port>" +
			" (environment without RELAY_* variables)",
		Options: optsJSON{N: o.n, Backlog: o.backlog, FailN: o.failN, RedisN: o.redisN, Scenarios: strings.Join(o.scenarios, ","),
			Rate: o.rate, Duration: o.duration.String(), LoopDuration: o.loopDuration.String(), TDuration: o.tDuration.String(), Tick: o.tick.String(), Concurrency: o.concurrency,
			LoopWorkers: o.loopWorkers, LoopInBench: o.loopInBench, SharedNATS: o.sharedNATS, ARounds: o.aRounds, ALive: o.aLive, AA: o.aa, LoopCPUProf: o.loopCPUProf != "", Window: o.window,
			GSubscribers: o.gSubscribers, GDeliveries: o.gDeliveries, RelayProf: o.relayProf != "", KeysN: o.keysN, KeysDrain: o.keysDrain,
			PN: o.pN, PClients: o.pClients, PBatch: o.pBatch, PBClients: o.pBClients,
			RN: o.rN, RRounds: o.rRounds, RRateShare: o.rRateShare, RDuration: o.rDuration.String(), RDown: o.rDown.String()},
	}
	if bi, err := buildinfo.ReadFile(o.relay); err == nil {
		r.RelayBuild = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				r.RelayBuild += " " + s.Value
			case "vcs.modified":
				if s.Value == "true" {
					r.RelayBuild += " (modified)"
				}
			}
		}
	}
	return r
}

func natsVersion() string { return server.VERSION }

func machineInfo() machine {
	m := machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				m.MemTotalMB = kb / 1024
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// checkDLQ adds to the report how many dead letters the current server holds
// (none expected) and how many events.
func (b *bench) checkDLQ(ctx context.Context, r *report) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := b.js.Stream(cctx, stream.DLQStream)
	if err != nil {
		return fmt.Errorf("dead-letter stream: %w", err)
	}
	info, err := s.Info(cctx)
	if err != nil {
		return err
	}
	r.DeadLetters += int64(info.State.Msgs)
	if s, err := b.js.Stream(cctx, stream.EventsStream); err == nil {
		if info, err := s.Info(cctx); err == nil {
			r.EventsInStore += int64(info.State.Msgs)
		}
	}
	return nil
}

func (r *report) find(scenario, system string) *result {
	for _, x := range r.Results {
		if x.Scenario == scenario && x.System == system {
			return x
		}
	}
	return nil
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// evaluate compares the results with the targets, and flags measurements
// that other processes on the machine disturbed.
func (r *report) evaluate() {
	for _, x := range r.Results {
		x.OtherCPU = max(x.SystemCPU-x.ProcCPU-x.SinkCPU-x.BenchCPU-x.RedisCPU-x.NodesCPU, 0)
		if share := x.OtherCPU / (x.Seconds * float64(r.Machine.CPUs)); share > 0.10 {
			x.Notes = append(x.Notes, fmt.Sprintf("DISTURBED: other processes used %.0f%% of the machine's CPU during this measurement", 100*share))
		}
	}
	relayA := r.throughputTargets()
	r.Targets = append(r.Targets, r.deploymentTarget())
	r.Targets = append(r.Targets, r.latencyTargets()...)
	r.Targets = append(r.Targets, r.fairnessTarget())
	r.Targets = append(r.Targets, r.clusterTargets()...)

	d := r.find("d", "relay")
	t := target{Name: "backlog", Want: "(d) 1,000,000-event backlog drained, relay peak RSS < 64 MB", Status: "n/a", Got: "(d) not run"}
	if d != nil {
		t.Got = fmt.Sprintf("%d drained at %.0f/s, peak RSS %.1f MB", d.Delivered, d.PerSecond, d.ProcRSSMB)
		t.Status = passMiss(d.Delivered >= int64(d.Events) && d.ProcRSSMB < 64)
		if d.Events < 1_000_000 {
			t.Note = fmt.Sprintf("backlog was %d, not 1,000,000: not the target's size", d.Events)
		}
	}
	r.Targets = append(r.Targets, t)

	for _, x := range r.Results {
		if x.Scenario != "e" || x.Title == refTitle {
			continue
		}
		t := target{Name: x.Title, Want: "(e) " + x.Title + ": deliveries/s >= 90% of relay's with one destination", Status: "n/a", Got: "no reference run"}
		if x.RefRate > 0 {
			t.Got = fmt.Sprintf("%.0f/s vs %.0f/s (one destination, the runs before and after) = %.0f%%, peak RSS %.0f MB", x.PerSecond, x.RefRate, 100*x.PerSecond/x.RefRate, x.ProcRSSMB)
			if relayA > 0 {
				t.Got += fmt.Sprintf("; %.0f%% of (a)'s median", 100*x.PerSecond/relayA)
			}
			t.Status = passMiss(x.PerSecond >= 0.9*x.RefRate)
		}
		r.Targets = append(r.Targets, t)
	}

	k1, kn := r.find("k", "relay, one key"), r.find("k", "relay, a key per event")
	t = target{Name: "order keys", Want: "a key per event costs NATS + relay <= 100 MB more than one key (k)", Status: "n/a", Got: "(k) not run"}
	if k1 != nil && kn != nil {
		nats := (kn.NATSRSSMB - kn.NATSBaseMB) - (k1.NATSRSSMB - k1.NATSBaseMB)
		rel := kn.ProcRSSMB - k1.ProcRSSMB
		t.Got = fmt.Sprintf("%+.0f MB (NATS server %+.0f MB: %.0f -> %.0f MB vs %.0f -> %.0f MB; relay peak RSS %+.0f MB: %.0f vs %.0f MB)",
			nats+rel, nats, kn.NATSBaseMB, kn.NATSRSSMB, k1.NATSBaseMB, k1.NATSRSSMB, rel, kn.ProcRSSMB, k1.ProcRSSMB)
		t.Status = passMiss(nats+rel <= 100)
		if r.Options.KeysN < 1_000_000 {
			t.Note = fmt.Sprintf("%d events, not 1,000,000: not the target's size", r.Options.KeysN)
		}
	}
	r.Targets = append(r.Targets, t)
	r.Targets = append(r.Targets, r.fanOutTarget(relayA))
	r.Targets = append(r.Targets, r.logTargets()...)
	r.Targets = append(r.Targets, r.publishTargets()...)
}

// throughputTargets judge (a): relay's deliveries/s at least 95% of the
// minimal loop's and its CPU per delivery within 1.05x of the loop's (the
// medians of the rounds' ratios). It returns relay's median rate.
func (r *report) throughputTargets() float64 {
	var relays, ratios, cpus []float64
	for _, x := range r.Results {
		if x.Scenario != "a" || x.System != "relay" {
			continue
		}
		relays = append(relays, x.PerSecond)
		ratios = append(ratios, x.VsLoop)
		if l := r.findRound("a", "minimal loop", x.Round); l != nil && l.ProcCPUPer1 > 0 {
			cpus = append(cpus, x.ProcCPUPer1/l.ProcCPUPer1)
		}
	}
	t := target{Name: "throughput", Want: "(a) relay >= 95% of the minimal loop", Status: "n/a", Got: "(a) not run"}
	if len(ratios) > 0 {
		ratio := median(ratios)
		t.Got = fmt.Sprintf("median of %d rounds %.0f%% (%s); relay %.0f/s", len(ratios), 100*ratio, percents(ratios), median(relays))
		t.Status = passMiss(ratio >= 0.95)
	}
	c := target{Name: "CPU per delivery", Want: "(a) relay's CPU s/1k <= 1.05x the minimal loop's", Status: "n/a", Got: "(a) not run, or the loop ran in the bench process"}
	if len(cpus) > 0 {
		ratio := median(cpus)
		c.Got = fmt.Sprintf("median of %d rounds %.2fx (%s)", len(cpus), ratio, times(cpus))
		c.Status = passMiss(ratio <= 1.05)
	}
	r.Targets = append(r.Targets, t, c)
	return median(relays)
}

// deploymentTarget judges (i): relay run with its embedded server at
// least 90% of the minimal loop with its own (median of the rounds).
func (r *report) deploymentTarget() target {
	var ratios, rss []float64
	for _, x := range r.Results {
		if x.Scenario == "i" && x.System == "relay" {
			ratios = append(ratios, x.VsLoop)
			rss = append(rss, x.ProcRSSMB)
		}
	}
	t := target{Name: "default deployment", Want: "(i) relay run as a user runs it (embedded NATS, default log level, --concurrency = the loop's workers) >= 90% of the loop with its own", Status: "n/a", Got: "(i) not run"}
	if len(ratios) > 0 {
		ratio := median(ratios)
		t.Got = fmt.Sprintf("median of %d rounds %.0f%% (%s); relay's peak RSS, its server's included, %.0f MB (median)", len(ratios), 100*ratio, percents(ratios), median(rss))
		t.Status = passMiss(ratio >= 0.9)
	}
	return t
}

// clusterTargets judge (r): two relay replicas on the cluster against the
// minimal loop on it, by the medians of the rounds' ratios: throughput at
// least 85%, p99 at half the loop's throughput at most 1.5x; and after
// the node restart nothing lost and no event (a copy included) later
// than 30 s after its publish.
func (r *report) clusterTargets() []target {
	const relay, loop = "relay, 2 replicas", "minimal loop"
	tp := target{Name: "cluster throughput", Want: "(r) two relay replicas on a 3-node R3 cluster >= 85% of the minimal loop on it", Status: "n/a", Got: "(r) not run"}
	lat := target{Name: "cluster latency", Want: "(r) relay's p99 at half the loop's throughput <= 1.5x the loop's", Status: "n/a", Got: "(r) not run"}
	back := target{Name: "cluster node restart", Want: "(r) the node leading the events stream and the consumer SIGKILLed and restarted: nothing lost, every event and copy within 30 s of its publish", Status: "n/a", Got: "(r) not run"}
	var ratios, p99s []float64
	for _, x := range r.Results {
		if x.Scenario != "r" || x.System != relay {
			continue
		}
		l := r.findRoundTitle("r", x.Title, loop, x.Round)
		switch {
		case x.Title == "cluster throughput" && x.VsLoop > 0:
			ratios = append(ratios, x.VsLoop)
		case x.Title == "cluster latency" && l != nil && l.P99ms > 0:
			p99s = append(p99s, x.P99ms/l.P99ms)
		}
	}
	if len(ratios) > 0 {
		m := median(ratios)
		tp.Got, tp.Status = fmt.Sprintf("median of %d rounds %.0f%% (%s)", len(ratios), 100*m, percents(ratios)), passMiss(m >= 0.85)
	}
	if len(p99s) > 0 {
		m := median(p99s)
		lat.Got, lat.Status = fmt.Sprintf("median of %d rounds %.2fx (%s)", len(p99s), m, times(p99s)), passMiss(m <= 1.5)
		if s := r.Options.RRateShare; s != 0 && s != 0.5 {
			lat.Got += fmt.Sprintf("; at %.0f%% of the loop's throughput, not the target's 50%%", 100*s)
			lat.Status = "n/a"
		}
	}
	if x := r.findRoundTitle("r", "cluster node restart", relay, 0); x != nil && x.Restart != nil {
		f := x.Restart
		back.Got = fmt.Sprintf("lost %d, %d copies, the longest publish-to-2xx %.1f s (%s)", f.Lost, x.Duplicates, f.LongestMs/1000, f.lastCopy())
		if l := r.findRoundTitle("r", "cluster node restart", loop, 0); l != nil && l.Restart != nil {
			back.Got += fmt.Sprintf("; the loop (AckWait 30 s): lost %d, the longest %.1f s", l.Restart.Lost, l.Restart.LongestMs/1000)
		}
		back.Status = passMiss(f.Lost == 0 && f.LongestMs < 30_000)
	}
	return []target{tp, lat, back}
}

// latencyTargets judge each rate of (b): relay's p99 at most 1.1x the
// minimal loop's at the same rate.
func (r *report) latencyTargets() []target {
	var out []target
	for _, x := range r.Results {
		if x.Scenario != "b" || x.System != "relay" {
			continue
		}
		t := target{Name: x.Title, Want: "(b) relay p99 <= 1.1x the minimal loop's at " + f0(x.Rate) + "/s", Status: "n/a", Got: "the loop did not run (-loop-duration 0)"}
		var l *result
		for _, y := range r.Results {
			if y.Scenario == "b" && y.System == "minimal loop" && y.Title == x.Title {
				l = y
			}
		}
		if l != nil && l.P99ms > 0 {
			t.Got = fmt.Sprintf("p50/p99/max relay %.2f/%.2f/%.1f ms, loop %.2f/%.2f/%.1f ms: %.2fx", x.P50ms, x.P99ms, x.Maxms, l.P50ms, l.P99ms, l.Maxms, x.P99ms/l.P99ms)
			t.Status = passMiss(x.P99ms <= 1.1*l.P99ms)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		out = append(out, target{Name: "latency", Want: "(b) relay p99 <= 1.1x the minimal loop's at the same rate", Status: "n/a", Got: "(b) not run"})
	}
	return out
}

// fairnessTarget judges (t): tenant B's p99 with tenant A loaded within
// 2x of its p99 with A idle.
func (r *report) fairnessTarget() target {
	t := target{Name: "fairness between tenants", Want: "(t) tenant B's p99 with A's backlog and retries <= 2x with A idle", Status: "n/a", Got: "(t) not run"}
	idle, loaded := r.find("t", "relay, tenant A idle"), r.find("t", "relay, tenant A loaded")
	if idle != nil && loaded != nil && idle.P99ms > 0 {
		t.Got = fmt.Sprintf("p50/p99/max A idle %.2f/%.2f/%.1f ms, A loaded %.2f/%.2f/%.1f ms: %.2fx", idle.P50ms, idle.P99ms, idle.Maxms, loaded.P50ms, loaded.P99ms, loaded.Maxms, loaded.P99ms/idle.P99ms)
		t.Status = passMiss(loaded.P99ms <= 2*idle.P99ms)
	}
	return t
}

// findRoundTitle is findRound among the results titled title.
func (r *report) findRoundTitle(scenario, title, system string, round int) *result {
	for _, x := range r.Results {
		if x.Scenario == scenario && x.Title == title && x.System == system && x.Round == round {
			return x
		}
	}
	return nil
}

func (r *report) findRound(scenario, system string, round int) *result {
	for _, x := range r.Results {
		if x.Scenario == scenario && x.System == system && x.Round == round {
			return x
		}
	}
	return nil
}

func percents(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return strings.Join(s, ", ")
}

func times(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2fx", x)
	}
	return strings.Join(s, ", ")
}

// logTargets judge (l): the delivery log costs at most 10% of
// deliveries/s (medians of the rounds, log on over log off), and relay's
// peak RSS does not grow with the records written (the 4x backlog's peak
// within 10% of the largest peak of the rounds with the log on).
func (r *report) logTargets() []target {
	cost := target{Name: "delivery log cost", Want: "(l) log on >= 90% of log off, deliveries/s", Status: "n/a", Got: "(l) not run"}
	mem := target{Name: "delivery log memory", Want: "(l) peak RSS with 4x the records <= 1.1x that with 1x", Status: "n/a", Got: "(l) not run"}
	var ons, offs []float64
	peak := 0.0
	var big *result
	for _, x := range r.Results {
		switch {
		case x.Scenario != "l":
		case x.System == "relay, log on":
			ons = append(ons, x.PerSecond)
			peak = max(peak, x.ProcRSSMB)
		case x.System == "relay, log off":
			offs = append(offs, x.PerSecond)
		case x.System == "relay, log on, 4x backlog":
			big = x
		}
	}
	if len(ons) > 0 && len(offs) > 0 {
		on, off := median(ons), median(offs)
		cost.Got = fmt.Sprintf("medians of %d rounds %.0f/s on vs %.0f/s off = %.0f%%", len(ons), on, off, 100*on/off)
		cost.Status = passMiss(on >= 0.9*off)
	}
	if big != nil && peak > 0 {
		mem.Got = fmt.Sprintf("%.0f MB with %d records vs %.0f MB with %d", big.ProcRSSMB, big.Events, peak, big.Events/4)
		mem.Status = passMiss(big.ProcRSSMB <= 1.1*peak)
	}
	return []target{cost, mem}
}

// fanOutTarget judges (g) with 10 subscribers: deliveries/s at least 80% of
// relayA, (a)'s median relay rate.
func (r *report) fanOutTarget(relayA float64) target {
	t := target{Name: "fan-out", Want: "(g) 10 subscribers: deliveries/s >= 80% of (a)'s relay rate", Status: "n/a", Got: "(a) or (g) with 10 subscribers not run"}
	var g *result
	for _, x := range r.Results {
		if x.Scenario == "g" && x.Subscribers == 10 {
			g = x
		}
	}
	if g == nil || relayA <= 0 {
		return t
	}
	ratio := g.PerSecond / relayA
	t.Got = fmt.Sprintf("%s: %.0f deliveries/s (%d events x 10) vs %.0f/s (median of (a)) = %.0f%%", g.Title, g.PerSecond, g.Events, relayA, 100*ratio)
	t.Status = passMiss(ratio >= 0.8)
	return t
}

func (r *report) write(dir string, stdout io.Writer) error {
	var sb strings.Builder
	r.text(&sb)
	fmt.Fprint(stdout, sb.String())
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(sb.String()), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwritten: %s, %s\n", filepath.Join(dir, "report.txt"), filepath.Join(dir, "report.json"))
	return nil
}

func (x *result) label() string {
	switch {
	case x.Scenario == "f":
		return "(f) redis list sequential"
	case x.Scenario == "b":
		return fmt.Sprintf("(b) latency @ %.0f/s: %s", x.Rate, x.System)
	case x.Scenario == "d":
		return fmt.Sprintf("(d) backlog %d: %s", x.Events, x.System)
	case x.Scenario == "g":
		return fmt.Sprintf("(g) %s to %d: %s", x.Title, x.Subscribers, x.System)
	case x.Scenario == "r" && x.Rate > 0:
		return fmt.Sprintf("(r) %s @ %.0f/s: %s", x.Title, x.Rate, x.System)
	}
	if x.Round > 0 {
		return fmt.Sprintf("(%s) %s %d: %s", x.Scenario, x.Title, x.Round, x.System)
	}
	return fmt.Sprintf("(%s) %s: %s", x.Scenario, x.Title, x.System)
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "-"
}

func (r *report) text(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "relay end-to-end benchmark\n\n")
	fmt.Fprintf(w, "date:     %s\n", r.Date)
	fmt.Fprintf(w, "command:  %s\n", r.Command)
	fmt.Fprintf(w, "machine:  %d CPUs (%s), %s/%s, kernel %s, %d MB RAM\n", m.CPUs, m.CPUModel, m.OS, m.Arch, m.Kernel, m.MemTotalMB)
	fmt.Fprintf(w, "go:       %s (bench); relay binary %s built with %s\n", r.GoVersion, r.RelayBinary, r.RelayBuild)
	servers := "a new one with no data for each scenario"
	if r.Options.SharedNATS {
		servers = "one for all scenarios (-shared-nats)"
	}
	fmt.Fprintf(w, "nats:     nats-server %s, embedded in the bench process (file storage), %s\n", r.NATSVersion, servers)
	fmt.Fprintf(w, "relay:    %s\n", r.RelayCommand)
	where := "in a process of its own"
	if r.Options.LoopInBench {
		where = "in the bench process"
	}
	fmt.Fprintf(w, "setup:    1 KiB JSON events; relay destinations with concurrency %d and a signing secret; minimal loop with %d workers, %s;\n", r.Options.Concurrency, r.Options.LoopWorkers, where)
	fmt.Fprintf(w, "          relay, NATS, the sink and the publisher share the machine's %d CPUs; all traffic on 127.0.0.1\n", m.CPUs)
	fmt.Fprintf(w, "run time: %.0fs; load average at start %s, at end %s\n\n", r.Seconds, r.LoadStart, r.LoadEnd)
	if r.Options.AA {
		fmt.Fprintf(w, "A/A CHECK (-aa): every row of (a), (b) and (i) named relay is the minimal loop run again in relay's place;\n")
		fmt.Fprintf(w, "their ratios and targets measure the bench's spread on this machine, not relay\n\n")
	}

	rows := [][]string{{"scenario", "events", "requests", "dups", "seconds", "deliveries/s", "p50 ms", "p99 ms", "max ms", "CPU s/1k", "RSS MB", "vs loop (a)", "vs relay (a)"}}
	for _, x := range r.Results {
		hasProc := x.ProcCPU > 0
		rows = append(rows, []string{
			x.label(), strconv.Itoa(x.Events), strconv.FormatInt(x.Requests, 10), strconv.FormatInt(x.Duplicates, 10),
			f2(x.Seconds), f0(x.PerSecond), f2(x.P50ms), f2(x.P99ms), f2(x.Maxms),
			orDash(hasProc, strconv.FormatFloat(x.ProcCPUPer1, 'f', 3, 64)), orDash(hasProc, f1(x.ProcRSSMB)), orDash(x.VsLoop > 0, fmt.Sprintf("%.2f", x.VsLoop)),
			orDash(x.VsRelayA > 0, fmt.Sprintf("%.2f", x.VsRelayA)),
		})
	}
	table(w, rows)
	fmt.Fprintf(w, "\nLatency is the sink's receipt of a 2xx request minus the publish time in the body. In (b) that is\n")
	fmt.Fprintf(w, "publish-to-delivery at a steady rate (what is due published every %s); everywhere else the events were published before the consumer\n", r.Options.Tick)
	fmt.Fprintf(w, "started, so it is mostly time spent waiting in the backlog. Seconds run from the start of the relay\n")
	fmt.Fprintf(w, "process (start-up included) or of the baseline's consumer until the sink has every delivery.\n")
	fmt.Fprintf(w, "A delivery is one destination's copy of an event, counted once per (destination, webhook-id): in (g) each\n")
	fmt.Fprintf(w, "typed event is delivered to every subscriber, and deliveries/s, CPU s/1k and dups count deliveries, not events.\n")
	fmt.Fprintf(w, "vs relay (a): deliveries/s over (a)'s median relay rate in this run.\n")
	fmt.Fprintf(w, "CPU and RSS are utime+stime and peak RSS from /proc of the relay process, or of the baseline's process (the\n")
	fmt.Fprintf(w, "minimal loop unless -loop-in-bench, the Redis-list sender); for (b), CPU during the measured window only.\n")
	fmt.Fprintf(w, "Sink connections: TCP connections the sink accepted in the interval ((b) reuses those of its warm-up).\n\n")

	rows = [][]string{{"CPU seconds in the measured interval", "relay/baseline", "sink", "bench+NATS", "redis", "other processes", "machine busy %", "NATS msgs/delivery", "relay+sink+NATS s/1k", "first delivery ms", "sink connections", "publish/s before", "NATS nodes"}}
	for _, x := range r.Results {
		busy := 100 * x.SystemCPU / (x.Seconds * float64(r.Machine.CPUs))
		rows = append(rows, []string{x.label(), orDash(x.ProcCPU > 0, f2(x.ProcCPU)), f2(x.SinkCPU), f2(x.BenchCPU),
			orDash(x.Scenario == "f", f2(x.RedisCPU)), f2(x.OtherCPU), f0(busy), orDash(x.NATSMsgs > 0 && x.Delivered > 0, f2(float64(x.NATSMsgs)/float64(x.Delivered))),
			orDash(x.Delivered > 0, strconv.FormatFloat((x.ProcCPU+x.SinkCPU+x.BenchCPU+x.RedisCPU+x.NodesCPU)/float64(x.Delivered)*1000, 'f', 3, 64)), orDash(x.FirstMs > 0, f0(x.FirstMs)), orDash(x.Scenario != "b", strconv.FormatInt(x.Conns, 10)), orDash(x.PublishRate > 0, f0(x.PublishRate)), orDash(x.Scenario == "r", f2(x.NodesCPU))})
	}
	table(w, rows)
	fmt.Fprintf(w, "\n(bench+NATS is the bench process: the embedded NATS server, the sink polling, and the minimal loop with -loop-in-bench.\n")
	fmt.Fprintf(w, "Other processes is the machine's busy CPU time (/proc/stat) minus the columns before it: anything else running\n")
	fmt.Fprintf(w, "on the machine, plus the kernel's share of loopback traffic that /proc/<pid>/stat does not charge to a process.\n")
	fmt.Fprintf(w, "NATS msgs/delivery: messages into and out of the embedded server in the interval, all connections, per delivery:\n")
	fmt.Fprintf(w, "the events and their acks, publishes and their acks when publishing is in the interval ((g): the router's copies),\n")
	fmt.Fprintf(w, "pull requests, and the rest. relay+sink+NATS s/1k: the CPU of the columns before other processes, per 1,000\n")
	fmt.Fprintf(w, "deliveries: on a CPU-bound machine, what sets the rate; less disturbed by other work than deliveries/s.\n")
	fmt.Fprintf(w, "In (r), NATS is the three nodes' processes (the last column, also taken out of other processes and counted in\n")
	fmt.Fprintf(w, "relay+sink+NATS; msgs/delivery counts their routes too), and bench+NATS is the bench process alone.)\n")
	r.clusterText(w)
	var notes []string
	for _, x := range r.Results {
		for _, n := range x.Notes {
			notes = append(notes, x.label()+": "+n)
		}
	}
	notes = append(notes, fmt.Sprintf("dead letters after the run: %d; events in RELAY_EVENTS: %d (summed over the scenarios' servers)", r.DeadLetters, r.EventsInStore))
	fmt.Fprintf(w, "\nnotes:\n")
	for _, n := range notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
	fmt.Fprintf(w, "\ntargets:\n")
	for _, t := range r.Targets {
		fmt.Fprintf(w, "  %-4s  %-62s %s", t.Status, t.Want, t.Got)
		if t.Note != "" {
			fmt.Fprintf(w, "  (%s)", t.Note)
		}
		fmt.Fprintln(w)
	}
}

// clusterText prints (r) beside the figures of one server (R1): (a)'s
// medians and (b), when they ran.
func (r *report) clusterText(w io.Writer) {
	rows := r.clusterRows()
	if rows == nil {
		return
	}
	fmt.Fprintf(w, "\n(r) a 3-node NATS cluster (three relay-bench nats-node processes, file storage, R3 streams and consumers),\n")
	fmt.Fprintf(w, "relay as two replicas (run --replicas 3), beside one server (R1: (a)'s medians, (b)); for a node restart, the\n")
	fmt.Fprintf(w, "node leading the events stream and the consumer SIGKILLed %s into the run and started again %s later, -r-duration %s in all:\n\n", rKillAfter, r.Options.RDown, r.Options.RDuration)
	table(w, rows)
	fmt.Fprintf(w, "\n(CPU s/1k: relay's processes, both replicas summed, or the loop's; NATS s/1k: the three nodes, or with R1 the bench\n")
	fmt.Fprintf(w, "process that embeds the server. x R1: deliveries/s over R1's. Longest gap: the longest time without a new delivery;\n")
	fmt.Fprintf(w, "new leader: from the kill to the events stream's new leader, from the nodes' logs;\n")
	fmt.Fprintf(w, "below half: the 100 ms periods after the kill with fewer deliveries than half the publish rate; recovered: from\n")
	fmt.Fprintf(w, "the first of those until the start of a second whose every 100 ms had half or more; drained: from the end of\n")
	fmt.Fprintf(w, "publishing until the sink had every event; longest wait: the longest publish-to-2xx, copies included.\n")
	fmt.Fprintf(w, "Throughput and latency are medians of %d rounds each.)\n", max(r.Options.RRounds, 1))
}

// clusterRows are clusterText's table, nil without (r).
func (r *report) clusterRows() [][]string {
	find := func(title, system string) *result {
		for _, x := range r.Results {
			if x.Scenario == "r" && x.Title == title && x.System == system {
				return x
			}
		}
		return nil
	}
	// medians of (r)'s rounds of title for system, of each of f's figures.
	medians := func(title, system string, f func(*result) []float64) []float64 {
		var cols [][]float64
		for _, x := range r.Results {
			if x.Scenario != "r" || x.Title != title || x.System != system {
				continue
			}
			for i, v := range f(x) {
				if i == len(cols) {
					cols = append(cols, nil)
				}
				cols[i] = append(cols[i], v)
			}
		}
		if cols == nil {
			return nil
		}
		out := make([]float64, len(cols))
		for i, c := range cols {
			out[i] = median(c)
		}
		return out
	}
	per1k := func(cpu float64, x *result) float64 { return cpu / float64(x.Delivered) * 1000 }
	rows := [][]string{{"", "deliveries/s", "x R1", "CPU s/1k", "NATS s/1k", "p50 ms", "p99 ms", "@ rate/s", "restart: lost", "dups", "longest gap ms", "new leader s", "below half ms", "recovered ms", "drained s", "longest wait s"}}
	var r1 = map[string]float64{}
	for _, sys := range []string{"relay", "minimal loop"} {
		var rates, cpus, nats []float64
		for _, x := range r.Results {
			if x.Scenario == "a" && x.System == sys && x.Delivered > 0 {
				rates = append(rates, x.PerSecond)
				cpus = append(cpus, per1k(x.ProcCPU, x))
				nats = append(nats, per1k(x.BenchCPU, x))
			}
		}
		row := []string{sys + ", R1", "-", "", "-", "-", "-", "-", "-", "", "", "", "", "", "", "", ""}
		if len(rates) > 0 {
			r1[sys] = median(rates)
			row[1], row[3], row[4] = f0(r1[sys]), strconv.FormatFloat(median(cpus), 'f', 3, 64), strconv.FormatFloat(median(nats), 'f', 3, 64)
		}
		if b := r.find("b", sys); b != nil {
			row[5], row[6], row[7] = f2(b.P50ms), f2(b.P99ms), f0(b.Rate)
		}
		if len(rates) > 0 || r.find("b", sys) != nil {
			rows = append(rows, row)
		}
	}
	found := false
	for _, sys := range []string{"relay, 2 replicas", "minimal loop"} {
		row := []string{sys + ", R3", "-", "", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"}
		if m := medians("cluster throughput", sys, func(x *result) []float64 {
			if x.Delivered == 0 {
				return nil
			}
			return []float64{x.PerSecond, per1k(x.ProcCPU, x), per1k(x.NodesCPU, x)}
		}); m != nil {
			found = true
			row[1], row[3], row[4] = f0(m[0]), strconv.FormatFloat(m[1], 'f', 3, 64), strconv.FormatFloat(m[2], 'f', 3, 64)
			base := r1["relay"]
			if sys == "minimal loop" {
				base = r1[sys]
			}
			if base > 0 {
				row[2] = fmt.Sprintf("%.2f", m[0]/base)
			}
		}
		if m := medians("cluster latency", sys, func(x *result) []float64 { return []float64{x.P50ms, x.P99ms, x.Rate} }); m != nil {
			found = true
			row[5], row[6], row[7] = f2(m[0]), f2(m[1]), f0(m[2])
		}
		if x := find("cluster node restart", sys); x != nil && x.Restart != nil {
			found = true
			f := x.Restart
			row[8], row[9], row[10] = strconv.FormatInt(f.Lost, 10), strconv.FormatInt(x.Duplicates, 10), f0(f.MaxGapMs)
			row[11] = orDash(f.ElectedSecs >= 0, f1(f.ElectedSecs))
			row[12], row[13], row[14], row[15] = f0(f.Dip.BelowHalfMs), f0(f.Dip.LastsMs), f1(f.AllDeliveredSecs), f1(f.LongestMs/1000)
			switch {
			case f.Dip.StartMs < 0:
				row[13] = "no dip"
			case f.Dip.LastsMs < 0:
				row[13] = "not before the end"
			}
		}
		rows = append(rows, row)
	}
	if !found {
		return nil
	}
	return rows
}

// table prints rows with the first column left-aligned and the others
// right-aligned.
func table(w io.Writer, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	for _, r := range rows {
		var sb strings.Builder
		for i, c := range r {
			if i == 0 {
				sb.WriteString(c + strings.Repeat(" ", width[i]-len(c)))
			} else {
				sb.WriteString("  " + strings.Repeat(" ", width[i]-len(c)) + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(sb.String(), " "))
	}
}
