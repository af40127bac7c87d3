// Command relay-bench is relay's end-to-end benchmark. It runs an embedded
// NATS server in its own process, a sink (itself, re-executed as a hidden
// "sink" subcommand) and, per measurement, a fresh 'relay run' process, and
// compares relay with two baselines, each also a process of its own: a
// minimal JetStream consumer loop (hidden subcommand "loop") and a Redis
// list worked one event at a time ("redis-sender").
//
//	go build -o bin/relay ./cmd/relay
//	go run ./cmd/relay-bench -relay bin/relay -out bench-results
//
// A quick smoke run: add -n 2000 -backlog 20000.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relaydev/relay/api"
)

type options struct {
	relay        string
	out          string
	n            int
	backlog      int
	failN        int
	redisN       int
	scenarios    []string
	rate         float64
	duration     time.Duration
	loopDuration time.Duration
	tick         time.Duration
	concurrency  int
	loopWorkers  int
	window       int
	cpuProfile   string
	loopInBench  bool
	sharedNATS   bool
	aRounds      int
	// iRounds and iN are (i)'s rounds and events per round.
	iRounds, iN  int
	aLive        bool
	aa           bool
	loopCPUProf  string
	gSubscribers []int
	gDeliveries  int
	relayProf    string
	relayProfFor time.Duration
	keysN        int
	keysDrain    int
	dests        int
	shared       bool
	relayExtra   []string
	pN           int
	pClients     int
	pBatch       int
	pBClients    int
	rN           int
	rRounds      int
	rRateShare   float64
	rDuration    time.Duration
	rDown        time.Duration
	tenants      int
	tRate        float64
	tDuration    time.Duration
	tStorm       bool
	tBacklog     int
	tFailing     int
}

var allScenarios = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "k", "l", "p", "r", "t"}

// defaultScenarios are those run without -scenarios: (h) takes minutes at
// 10,000 destinations and (r) several at its default size; they are run on
// purpose.
var defaultScenarios = []string{"a", "i", "b", "c", "d", "e", "f", "g", "k", "l", "p", "t"}

// children are the hidden subcommands the bench starts itself as.
var children = map[string]func(args []string) error{
	"sink":         runSink,
	"loop":         runLoopProc,
	"redis-sender": runRedisSender,
	"nats-node":    runNATSNode,
	"api-floor":    runAPIFloor,
}

func main() {
	if len(os.Args) > 1 {
		if child, ok := children[os.Args[1]]; ok {
			if err := child(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "relay-bench %s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			return
		}
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "relay-bench:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "relay-bench: error:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("relay-bench", flag.ContinueOnError)
	fs.StringVar(&o.relay, "relay", "", "path of the relay binary to benchmark (go build -o bin/relay ./cmd/relay); required")
	fs.StringVar(&o.out, "out", "bench-results", "directory for report.txt, report.json and logs/")
	fs.IntVar(&o.n, "n", 50_000, "events of scenarios (a) and (e)")
	fs.IntVar(&o.backlog, "backlog", 1_000_000, "events of scenario (d), published before relay starts")
	fs.IntVar(&o.failN, "fail-n", 0, "events of scenario (c) (0: min(-n, 20000))")
	fs.IntVar(&o.redisN, "redis-n", 0, "events of scenario (f) (0: min(-n, 10000))")
	sc := fs.String("scenarios", strings.Join(defaultScenarios, ","), "comma-separated scenarios to run: a throughput, b latency, c 10% 503, d backlog, e 100 destinations, f redis list, g fan-out, h -dests destinations (relay with its own embedded NATS), i the default deployment (relay run and the loop, each with its own embedded NATS, timed from process start), k order keys, l the delivery log's cost, p publishing over the HTTP API, r a 3-node NATS cluster (R3) with two relay replicas")
	fs.IntVar(&o.keysN, "keys-n", 1_000_000, "events of scenario (k), published once with one order key and once with a key each")
	fs.IntVar(&o.keysDrain, "keys-drain", 10_000, "events of scenario (k) relay delivers while its RSS is measured")
	fs.IntVar(&o.pN, "p-n", 0, "events of scenario (p) per mode and round (0: -n, at most 30,000)")
	fs.IntVar(&o.pClients, "p-clients", 64, "scenario (p): client goroutines sending POST /v1/events, one event per request")
	fs.IntVar(&o.pBatch, "p-batch", 100, "scenario (p): events per POST /v1/events:batch (1 to 1000)")
	fs.IntVar(&o.pBClients, "p-batch-clients", 8, "scenario (p): client goroutines sending POST /v1/events:batch")
	fs.IntVar(&o.dests, "dests", 1000, "destinations of scenario (h)")
	fs.Func("relay-arg", "an argument added to every 'relay run' of the bench, after the bench's own (repeatable: -relay-arg=--max-in-flight=256)", func(v string) error {
		o.relayExtra = append(o.relayExtra, v)
		return nil
	})
	fs.IntVar(&o.rN, "r-n", 100_000, "events of each of scenario (r)'s throughput rounds, published to the cluster before relay or the minimal loop starts")
	fs.IntVar(&o.rRounds, "r-rounds", 5, "rounds of scenario (r)'s throughput and latency runs, each relay and the minimal loop; the targets use the medians")
	fs.DurationVar(&o.rDuration, "r-duration", 15*time.Second, "how long scenario (r) publishes at -r-rate-share of the minimal loop's throughput (its rounds' median), for each latency round and again for the node-restart runs")
	fs.Float64Var(&o.rRateShare, "r-rate-share", 0.5, "scenario (r): the latency and node-restart runs' rate, as a share of the minimal loop's throughput (the target is set at 0.5)")
	fs.DurationVar(&o.rDown, "r-down", 3*time.Second, "scenario (r): how long the killed node (the leader of the events stream and of the consumer, SIGKILLed 4s into the node-restart run) stays down")
	fs.BoolVar(&o.shared, "shared", false, "scenarios (g) and (h): add the destinations shared (dest add --shared), served by relay's shared consumer")
	fs.Float64Var(&o.rate, "rate", 0, "publish rate of scenario (b) per second (0: half of (a)'s relay rate)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long scenario (b) publishes at each rate (50,000 latencies at 5,000/s)")
	fs.BoolVar(&o.tStorm, "t-storm", false, "scenario (t): also measure tenant B with tenant A's failing destination's breaker off (information, about 20 s)")
	fs.DurationVar(&o.tDuration, "t-duration", 20*time.Second, "how long scenario (t) publishes tenant B's events in each of its runs")
	fs.IntVar(&o.tenants, "tenants", 0, "scenario (h): spread -dests over this many tenants (0: destinations of no tenant)")
	fs.Float64Var(&o.tRate, "t-rate", 100, "scenario (t): tenant B's events per second")
	fs.IntVar(&o.tBacklog, "t-backlog", 100_000, "scenario (t): tenant A's backlog to a 1s endpoint")
	fs.IntVar(&o.tFailing, "t-failing", 10_000, "scenario (t): tenant A's events in retry to a failing endpoint")
	fs.DurationVar(&o.loopDuration, "loop-duration", 0, "how long the minimal loop's reference run of scenario (b) publishes (default: as long as -duration; 0: skip it)")
	fs.DurationVar(&o.tick, "tick", 10*time.Millisecond, "scenario (b)'s publisher publishes what is due once per tick: at 10ms and 10000/s, bursts of 100 events")
	fs.IntVar(&o.concurrency, "concurrency", 64, "concurrency of relay's destinations")
	fs.IntVar(&o.loopWorkers, "loop-workers", 64, "worker goroutines of the minimal loop")
	fs.IntVar(&o.window, "window", 20_000, "unacknowledged async publishes at most while publishing a backlog")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (embedded NATS, publisher; with -loop-in-bench also the minimal loop, whose goroutines carry the label part=minimal-loop) to this file")
	fs.IntVar(&o.iRounds, "i-rounds", 5, "rounds of scenario (i), each relay and the minimal loop; the target uses the median")
	fs.IntVar(&o.iN, "i-n", 300_000, "events of each round of scenario (i)")
	fs.IntVar(&o.aRounds, "a-rounds", 3, "rounds of scenario (a), each relay and the minimal loop (and of (l) and (p)); the targets use the median")
	fs.BoolVar(&o.aa, "aa", false, "an A/A check of the bench itself: in (a), (b) and (i), run the minimal loop again in relay's place, so that the ratios show how far two runs of the same program move apart on this machine (the report's relay rows of those scenarios are then the minimal loop)")
	fs.BoolVar(&o.aLive, "a-live", false, "in (a), start relay and the minimal loop first and publish while they run, instead of publishing the backlog before they start")
	fs.StringVar(&o.loopCPUProf, "loop-cpuprofile", "", "write a CPU profile of each minimal-loop process to this file, suffixed with .<destination>")
	gSubs := fs.String("g-subscribers", "10", "scenario (g): the subscriber counts to measure, comma-separated, each a run of its own")
	fs.IntVar(&o.gDeliveries, "g-deliveries", 0, "scenario (g): deliveries per run, events x subscribers (0: -n); each run publishes this divided by its subscribers")
	fs.StringVar(&o.relayProf, "relay-cpuprofile", "", "fetch a CPU profile of each measured relay process from its /debug/pprof/profile, from its start, to this file suffixed with .<run> (a, a2, g10, ...)")
	fs.DurationVar(&o.relayProfFor, "relay-cpuprofile-for", 20*time.Second, "how long each -relay-cpuprofile profile runs; relay is stopped only once it is written, so make it longer than the measurement")
	fs.BoolVar(&o.sharedNATS, "shared-nats", false, "run all scenarios on one embedded NATS server, as before the fourth round, instead of a new one (no data) for each")
	fs.BoolVar(&o.loopInBench, "loop-in-bench", false, "run the minimal loop inside the bench process (with the embedded NATS server) instead of as a process of its own")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	loopDurationSet := false
	fs.Visit(func(f *flag.Flag) { loopDurationSet = loopDurationSet || f.Name == "loop-duration" })
	if !loopDurationSet {
		// The same window for both: a p99 over a longer run has more
		// chances to meet a slow spell of the machine.
		o.loopDuration = o.duration
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q (see -h)", fs.Args())
	}
	if o.relay == "" {
		return o, errors.New("-relay is required: go build -o bin/relay ./cmd/relay, then -relay bin/relay")
	}
	if st, err := os.Stat(o.relay); err != nil {
		return o, fmt.Errorf("-relay %s: %w (build it with: go build -o bin/relay ./cmd/relay)", o.relay, err)
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		return o, fmt.Errorf("-relay %s is not an executable file", o.relay)
	}
	if o.failN == 0 {
		o.failN = min(o.n, 20_000)
	}
	if o.redisN == 0 {
		o.redisN = min(o.n, 10_000)
	}
	if o.pN == 0 {
		// (p) runs five systems in each of three rounds: 30,000 events
		// keep make bench under 10 minutes.
		o.pN = min(o.n, 30_000)
	}
	for name, v := range map[string]int{"-n": o.n, "-backlog": o.backlog, "-fail-n": o.failN, "-redis-n": o.redisN, "-keys-n": o.keysN, "-keys-drain": o.keysDrain, "-window": o.window, "-loop-workers": o.loopWorkers, "-p-n": o.pN, "-r-n": o.rN} {
		if v < 1 || v > 100_000_000 {
			return o, fmt.Errorf("%s %d: give a count from 1 to 100000000", name, v)
		}
	}
	if o.gDeliveries == 0 {
		o.gDeliveries = o.n
	}
	if o.gDeliveries < 1 || o.gDeliveries > 100_000_000 {
		return o, fmt.Errorf("-g-deliveries %d: give a count from 1 to 100000000", o.gDeliveries)
	}
	for s := range strings.SplitSeq(*gSubs, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		k, err := strconv.Atoi(s)
		if err != nil || k < 1 || k > 500 {
			return o, fmt.Errorf("-g-subscribers: %q is not a subscriber count from 1 to 500", s)
		}
		if o.gDeliveries < k {
			return o, fmt.Errorf("-g-deliveries %d is fewer than %d subscribers: each run publishes -g-deliveries / subscribers events, at least one", o.gDeliveries, k)
		}
		if !slices.Contains(o.gSubscribers, k) {
			o.gSubscribers = append(o.gSubscribers, k)
		}
	}
	if len(o.gSubscribers) == 0 {
		return o, errors.New("-g-subscribers: none given")
	}
	if o.relayProfFor < time.Second || o.relayProfFor > 10*time.Minute {
		return o, fmt.Errorf("-relay-cpuprofile-for %s: give 1s to 10m", o.relayProfFor)
	}
	if o.dests < 1 || o.dests > 100_000 {
		return o, errNoDests
	}
	if o.loopCPUProf != "" && o.loopInBench {
		return o, errors.New("-loop-cpuprofile profiles the minimal loop's own process; with -loop-in-bench use -cpuprofile (label part=minimal-loop)")
	}
	if o.pClients < 1 || o.pClients > 1024 {
		return o, fmt.Errorf("-p-clients %d: give 1 to 1024", o.pClients)
	}
	if o.pBClients < 1 || o.pBClients > 1024 {
		return o, fmt.Errorf("-p-batch-clients %d: give 1 to 1024", o.pBClients)
	}
	if o.pBatch < 1 || o.pBatch > api.MaxBatch {
		return o, fmt.Errorf("-p-batch %d: give 1 to %d", o.pBatch, api.MaxBatch)
	}
	if o.iRounds < 1 || o.iRounds > 20 {
		return o, fmt.Errorf("-i-rounds %d: give 1 to 20", o.iRounds)
	}
	if o.rRounds < 1 || o.rRounds > 20 {
		return o, fmt.Errorf("-r-rounds %d: give 1 to 20", o.rRounds)
	}
	if o.rRateShare <= 0 || o.rRateShare > 1 {
		return o, fmt.Errorf("-r-rate-share %g: give more than 0, up to 1", o.rRateShare)
	}
	if o.iN < 1 {
		return o, fmt.Errorf("-i-n %d: give 1 or more", o.iN)
	}
	if o.aRounds < 1 || o.aRounds > 20 {
		return o, fmt.Errorf("-a-rounds %d: give 1 to 20", o.aRounds)
	}
	if o.concurrency < 1 || o.concurrency > 1024 {
		return o, fmt.Errorf("-concurrency %d: give 1 to 1024", o.concurrency)
	}
	if o.rate < 0 || o.rate > 1e6 {
		return o, fmt.Errorf("-rate %g: give 0 (auto) or a rate up to 1000000/s", o.rate)
	}
	if o.duration < time.Second || o.duration > time.Hour {
		return o, fmt.Errorf("-duration %s: give 1s to 1h", o.duration)
	}
	if o.tDuration < time.Second || o.tDuration > time.Hour {
		return o, fmt.Errorf("-t-duration %s: give 1s to 1h", o.tDuration)
	}
	if o.tick < 100*time.Microsecond || o.tick > time.Second {
		return o, fmt.Errorf("-tick %s: give 100µs to 1s", o.tick)
	}
	if o.rDown < time.Second || o.rDown > time.Minute {
		return o, fmt.Errorf("-r-down %s: give 1s to 1m", o.rDown)
	}
	if minDur := rKillAfter + o.rDown + 3*time.Second; o.rDuration < minDur || o.rDuration > time.Hour {
		return o, fmt.Errorf("-r-duration %s: give %s (the kill at %s, -r-down, then 3s) to 1h", o.rDuration, minDur, rKillAfter)
	}
	if o.loopDuration < 0 || o.loopDuration > time.Hour {
		return o, fmt.Errorf("-loop-duration %s: give 0 to 1h", o.loopDuration)
	}
	for s := range strings.SplitSeq(*sc, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(allScenarios, s) {
			return o, fmt.Errorf("-scenarios: unknown scenario %q (choose from %s)", s, strings.Join(allScenarios, ","))
		}
		if !slices.Contains(o.scenarios, s) {
			o.scenarios = append(o.scenarios, s)
		}
	}
	if len(o.scenarios) == 0 {
		return o, errors.New("-scenarios: none given")
	}
	// Always in the order a..h, k, l, r: (b), (r) and the targets use (a)'s
	// figures.
	slices.SortFunc(o.scenarios, func(a, b string) int { return strings.Compare(a, b) })
	return o, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	if o.relayProf != "" {
		if err := os.MkdirAll(filepath.Dir(o.relayProf), 0o755); err != nil {
			return fmt.Errorf("-relay-cpuprofile: %w", err)
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	rep := newReport(o)
	logf("relay-bench: scenarios %s; starting embedded NATS and the sink", strings.Join(o.scenarios, ","))
	b, err := newBench(ctx, o)
	if err != nil {
		return err
	}
	defer b.close()
	b.rep = rep
	rep.NATSVersion = natsVersion()
	steps := map[string]func(context.Context) ([]*result, error){
		"a": b.scenarioA, "b": b.scenarioB, "c": b.scenarioC, "d": b.scenarioD, "e": b.scenarioE, "f": b.scenarioF, "g": b.scenarioG, "h": b.scenarioH, "i": b.scenarioI, "k": b.scenarioK, "l": b.scenarioL, "p": b.scenarioP,
		"r": b.scenarioR, "t": b.scenarioT,
	}
	rep.LoadStart = loadAvg()
	started := time.Now()
	for i, s := range o.scenarios {
		if i > 0 && !o.sharedNATS {
			// What the last scenario left in the server is not the next
			// one's to carry: a new server, with no data, for each.
			if err := b.checkDLQ(ctx, rep); err != nil {
				return err
			}
			logf("new embedded NATS server for scenario (%s)", s)
			if err := b.restartNATS(ctx); err != nil {
				return err
			}
		}
		logf("scenario (%s)", s)
		rs, err := steps[s](ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted during scenario (%s)", s)
			}
			return err
		}
		rep.Results = append(rep.Results, rs...)
	}
	rep.Seconds = time.Since(started).Seconds()
	rep.LoadEnd = loadAvg()
	if err := b.checkDLQ(ctx, rep); err != nil {
		return err
	}
	rep.evaluate()
	return rep.write(o.out, os.Stdout)
}
