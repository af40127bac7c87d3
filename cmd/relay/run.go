package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/api"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
	"github.com/relaydev/relay/ui"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "deliver events (starts an embedded NATS server unless --nats-url is set)",
		Description: `Consumes every destination's events and delivers them. Any number of
'relay run' processes can share one NATS server or cluster. On SIGINT or SIGTERM
relay stops pulling, lets in-flight deliveries finish within --shutdown-grace,
hands the rest back to JetStream, and exits 0.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", EnvVars: []string{"RELAY_DATA_DIR"}, Value: "./relay-data", Usage: "embedded NATS: where JetStream stores events"},
			&cli.StringFlag{Name: "listen", EnvVars: []string{"RELAY_LISTEN"}, Value: "127.0.0.1:4222", Usage: "embedded NATS: address to listen on (port 0 picks a free one)"},
			&cli.BoolFlag{Name: "sync-always", EnvVars: []string{"RELAY_SYNC_ALWAYS"}, Usage: "embedded NATS: fsync every write (survives power loss; much slower)"},
			&cli.StringFlag{Name: "server-name", EnvVars: []string{"RELAY_SERVER_NAME"}, Usage: "embedded NATS: server name, unique in a cluster (default relay-embedded)"},
			&cli.StringFlag{Name: "cluster-name", EnvVars: []string{"RELAY_CLUSTER_NAME"}, Usage: "embedded NATS: join a JetStream cluster of this name"},
			&cli.StringFlag{Name: "cluster-listen", EnvVars: []string{"RELAY_CLUSTER_LISTEN"}, Value: "127.0.0.1:6222", Usage: "embedded NATS: cluster address to listen on"},
			&cli.StringSliceFlag{Name: "routes", EnvVars: []string{"RELAY_ROUTES"}, Usage: "embedded NATS: the other nodes' cluster URLs, nats://host:port (repeatable)"},
			&cli.IntFlag{Name: "replicas", EnvVars: []string{"RELAY_REPLICAS"}, Value: 1, Usage: "replicas of relay's streams (3 in a NATS cluster)"},
			&cli.DurationFlag{Name: "event-retention", EnvVars: []string{"RELAY_EVENT_RETENTION"}, Value: 7 * 24 * time.Hour, Usage: "how long events stay in the log, delivered or not (must exceed the longest delivery delay)"},
			&cli.Int64Flag{Name: "event-max-bytes", EnvVars: []string{"RELAY_EVENT_MAX_BYTES"}, Value: -1, Usage: "cap of the event log in bytes (-1: none); when full, publishes are refused, undelivered events are never dropped"},
			&cli.IntFlag{Name: "max-event-size", EnvVars: []string{"RELAY_MAX_EVENT_SIZE"}, Value: 1 << 20, Usage: "largest event accepted, body and headers, in bytes (at most the server's max_payload)"},
			&cli.DurationFlag{Name: "dlq-retention", EnvVars: []string{"RELAY_DLQ_RETENTION"}, Value: 14 * 24 * time.Hour, Usage: "how long dead letters are kept"},
			&cli.IntFlag{Name: "max-consumers", EnvVars: []string{"RELAY_MAX_CONSUMERS"}, Value: stream.DefaultMaxConsumers, Usage: fmt.Sprintf("most consumers of the events stream: one per destination, 1 + --partitions per ordered one, and %d kept for relay's own readers; 'relay dest add' refuses a destination that does not fit (each costs the NATS server about 53 KB and time at start and stop)", stream.ReservedConsumers)},
			&cli.BoolFlag{Name: "attempt-log", EnvVars: []string{"RELAY_ATTEMPT_LOG"}, Value: true, Usage: "record every attempt in the delivery log ('relay attempts', 'relay events show'); --attempt-log=false: none"},
			&cli.DurationFlag{Name: "attempt-retention", EnvVars: []string{"RELAY_ATTEMPT_RETENTION"}, Value: 7 * 24 * time.Hour, Usage: "how long the delivery log keeps an attempt's record"},
			&cli.Int64Flag{Name: "attempt-max-bytes", EnvVars: []string{"RELAY_ATTEMPT_MAX_BYTES"}, Value: stream.DefaultLogMaxBytes, Usage: "cap of the delivery log in bytes; when full, the oldest records go first (not given: 1 GiB, or less if the NATS server's storage is smaller)"},
			&cli.IntFlag{Name: "log-response-bytes", EnvVars: []string{"RELAY_LOG_RESPONSE_BYTES"}, Value: relay.DefaultLogResponseBytes, Usage: "how much of each response body the delivery log keeps (0: none, at most 65536)"},
			&cli.BoolFlag{Name: "operator-events", EnvVars: []string{"RELAY_OPERATOR_EVENTS"}, Value: true, Usage: "publish operator events (relay.destination.breaker_opened, relay.dead_letters, ...: docs/operator-events.md); subscribe a destination with --type 'relay.>'"},
			&cli.DurationFlag{Name: "alert-backlog-age", EnvVars: []string{"RELAY_ALERT_BACKLOG_AGE"}, Value: 5 * time.Minute, Usage: "emit relay.destination.backlog_stale when a destination's oldest undelivered event is older than this (0: never)"},
			&cli.IntFlag{Name: "alert-dead-letters", EnvVars: []string{"RELAY_ALERT_DEAD_LETTERS"}, Value: 1, Usage: "emit relay.dead_letters for a destination with at least this many dead letters in a minute (0: never)"},
			&cli.DurationFlag{Name: "ack-wait", EnvVars: []string{"RELAY_ACK_WAIT"}, Value: relay.DefaultAckWait, Usage: "how long NATS waits for the ack of an event handed to a replica before it hands it to another: how soon another replica delivers the events of one that died, stopped or lost its connection (3s to 10m; a replica restarts it every third of it while it holds an event, so attempts may take longer; give every replica the same)"},
			&cli.IntFlag{Name: "max-in-flight", EnvVars: []string{"RELAY_MAX_IN_FLIGHT"}, Value: 1024, Usage: "most attempts this replica makes at once, all destinations together (each also stays within its --concurrency): bounds its goroutines, sockets and memory however many destinations there are"},
			&cli.DurationFlag{Name: "duplicate-window", EnvVars: []string{"RELAY_DUPLICATE_WINDOW"}, Value: 2 * time.Minute, Usage: "how long a re-published event id is dropped as a duplicate"},
			&cli.StringFlag{Name: "redis-url", EnvVars: []string{"RELAY_REDIS_URL"}, Usage: "Redis for long waits: redis://[user:password@]host:port[/db] or rediss:// (TLS); without it every wait stays in JetStream"},
			&cli.StringFlag{Name: "redis-mode", EnvVars: []string{"RELAY_REDIS_MODE"}, Value: "single", Usage: "single, cluster or sentinel (then --redis-url is read as go-redis's cluster or failover URL)"},
			&cli.IntFlag{Name: "redis-replicas", EnvVars: []string{"RELAY_REDIS_REPLICAS"}, Value: -1, DefaultText: "1 with sentinel or cluster, 0 with single", Usage: "Redis replicas that must confirm each parked event (WAIT) before relay acks it in JetStream; an event not confirmed in time waits in JetStream instead, so a failover loses none"},
			&cli.DurationFlag{Name: "redis-replica-wait", EnvVars: []string{"RELAY_REDIS_REPLICA_WAIT"}, Value: 500 * time.Millisecond, Usage: "how long a park waits for --redis-replicas to confirm (1ms to 1s)"},
			&cli.DurationFlag{Name: "park-threshold", EnvVars: []string{"RELAY_PARK_THRESHOLD"}, Value: time.Minute, Usage: "waits this long or longer are parked in Redis"},
			&cli.DurationFlag{Name: "park-lease", EnvVars: []string{"RELAY_PARK_LEASE"}, Value: 30 * time.Second, Usage: "how long a promoter reserves the due events it claimed (must be below --duplicate-window)"},
			&cli.StringSliceFlag{Name: "allow-net", EnvVars: []string{"RELAY_ALLOW_NET"}, Usage: "let deliveries reach this CIDR range although it is loopback, private or otherwise non-public (repeatable)"},
			&cli.DurationFlag{Name: "connect-timeout", EnvVars: []string{"RELAY_CONNECT_TIMEOUT"}, Value: 10 * time.Second, Usage: "TCP connect timeout of a delivery"},
			&cli.DurationFlag{Name: "tls-handshake-timeout", EnvVars: []string{"RELAY_TLS_HANDSHAKE_TIMEOUT"}, Value: 10 * time.Second, Usage: "TLS handshake timeout of a delivery"},
			&cli.DurationFlag{Name: "response-header-timeout", EnvVars: []string{"RELAY_RESPONSE_HEADER_TIMEOUT"}, Usage: "wait for response headers (0: only the destination's total timeout)"},
			&cli.BoolFlag{Name: "dangerously-skip-tls-verify", EnvVars: []string{"RELAY_DANGEROUSLY_SKIP_TLS_VERIFY"}, Usage: "do not verify destinations' TLS certificates (anyone on the path can read and forge deliveries)"},
			&cli.StringFlag{Name: "api-addr", EnvVars: []string{"RELAY_API_ADDR"}, Usage: "serve the HTTP API (/v1, docs/api.md) here (empty: off); on a non-loopback address only once an API key exists ('relay api-key create')"},
			&cli.StringFlag{Name: "api-tls-cert", EnvVars: []string{"RELAY_API_TLS_CERT"}, Usage: "serve the HTTP API over TLS with this certificate (PEM file; with --api-tls-key)", TakesFile: true},
			&cli.StringFlag{Name: "api-tls-key", EnvVars: []string{"RELAY_API_TLS_KEY"}, Usage: "the private key of --api-tls-cert (PEM file)", TakesFile: true},
			&cli.IntFlag{Name: "api-max-conns", EnvVars: []string{"RELAY_API_MAX_CONNS"}, Value: defaultAPIMaxConns, Usage: "most connections the HTTP API and dashboard hold at once (1 to 1000000); at the cap a new connection closes the one idle longest, or waits in the listen queue while none is idle, so the API never takes the descriptors NATS and deliveries need"},
			&cli.DurationFlag{Name: "api-idle-timeout", EnvVars: []string{"RELAY_API_IDLE_TIMEOUT"}, Value: defaultAPIIdleTimeout, Usage: "how long the HTTP API keeps a keep-alive connection with no request (1s to 1h)"},
			&cli.DurationFlag{Name: "api-body-timeout", EnvVars: []string{"RELAY_API_BODY_TIMEOUT"}, Value: defaultAPIBodyTimeout, Usage: "how long a request's body (an API call's, a dashboard form's) may take to arrive after its headers (1s to 1h): a client that stalls gets 408 and its connection is closed"},
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"RELAY_METRICS_ADDR"}, Value: "127.0.0.1:9464", Usage: "serve /metrics, /healthz and /readyz here (empty: off)"},
			&cli.Int64Flag{Name: "gc-heap-floor", EnvVars: []string{"RELAY_GC_HEAP_FLOOR"}, Value: 24 << 20, Usage: "heap size in bytes at which Go's garbage collector runs while relay's live heap is small, for less CPU spent collecting (at most 40 MiB, or 11 times the live heap; 0: Go's default pace; not applied when GOGC is set)"},
			&cli.DurationFlag{Name: "shutdown-grace", EnvVars: []string{"RELAY_SHUTDOWN_GRACE"}, Value: 10 * time.Second, Usage: "how long in-flight deliveries may finish after SIGTERM"},
			otelFlag(),
		},
		Action: action(readRun),
	}
}

// runOpts are the options of 'relay run'.
type runOpts struct {
	natsURL                                    string // the global flag: without it, start an embedded server
	dataDir, listen, serverName                string
	syncAlways                                 bool
	clusterName, clusterListen                 string
	routes                                     []string
	replicas                                   int
	eventRetention                             time.Duration
	eventMaxBytes                              int64
	maxEventSize                               int
	maxConsumers, maxInFlight                  int
	attemptLog, operatorEvents                 bool
	alertBacklogAge                            time.Duration
	alertDeadLetters                           int
	attemptRetention                           time.Duration
	attemptMaxBytes                            int64
	attemptMaxBytesGiven                       int64 // 0 unless --attempt-max-bytes was given: then the server's storage may shrink it
	logResponseBytes                           int
	dlqRetention, duplicateWindow              time.Duration
	redis                                      redisOpts
	redisReplicas                              int
	redisReplicaWait, parkThreshold, parkLease time.Duration
	allowNet                                   []string
	connectTimeout, tlsHandshakeTimeout        time.Duration
	responseHeaderTimeout                      time.Duration
	skipTLSVerify                              bool
	metricsAddr                                string
	apiAddr, apiTLSCert, apiTLSKey             string
	apiLimits                                  apiLimits
	gcHeapFloor                                int64
	shutdownGrace, ackWait                     time.Duration
	tracing                                    tracingOpts

	// embeddedGiven are the embedded server's flags given (they do
	// nothing with --nats-url).
	embeddedGiven []string

	// Validate fills these in.
	host, clusterHost  string
	port, clusterPort  int
	allow              []netip.Prefix
	confirmingReplicas int
	replicaWait        time.Duration
}

func readRun(c *cli.Context) *runOpts {
	var embedded []string
	for _, f := range []string{"data-dir", "listen", "server-name", "sync-always", "cluster-name", "cluster-listen", "routes"} {
		if c.IsSet(f) {
			embedded = append(embedded, "--"+f)
		}
	}
	return &runOpts{
		embeddedGiven: embedded,
		natsURL:       c.String("nats-url"), dataDir: c.String("data-dir"), listen: c.String("listen"), serverName: c.String("server-name"),
		syncAlways: c.Bool("sync-always"), clusterName: c.String("cluster-name"), clusterListen: c.String("cluster-listen"),
		routes: c.StringSlice("routes"), replicas: c.Int("replicas"), eventRetention: c.Duration("event-retention"),
		eventMaxBytes: c.Int64("event-max-bytes"), maxEventSize: c.Int("max-event-size"), maxConsumers: c.Int("max-consumers"), maxInFlight: c.Int("max-in-flight"), dlqRetention: c.Duration("dlq-retention"),
		operatorEvents: c.Bool("operator-events"), alertBacklogAge: c.Duration("alert-backlog-age"), alertDeadLetters: c.Int("alert-dead-letters"),
		attemptLog: c.Bool("attempt-log"), attemptRetention: c.Duration("attempt-retention"), attemptMaxBytes: c.Int64("attempt-max-bytes"), attemptMaxBytesGiven: givenInt64(c, "attempt-max-bytes"), logResponseBytes: c.Int("log-response-bytes"),
		duplicateWindow: c.Duration("duplicate-window"), redis: readRedis(c), redisReplicas: c.Int("redis-replicas"),
		redisReplicaWait: c.Duration("redis-replica-wait"), parkThreshold: c.Duration("park-threshold"), parkLease: c.Duration("park-lease"),
		allowNet: c.StringSlice("allow-net"), connectTimeout: c.Duration("connect-timeout"), tlsHandshakeTimeout: c.Duration("tls-handshake-timeout"),
		responseHeaderTimeout: c.Duration("response-header-timeout"), skipTLSVerify: c.Bool("dangerously-skip-tls-verify"),
		metricsAddr: c.String("metrics-addr"), apiAddr: c.String("api-addr"), apiTLSCert: c.String("api-tls-cert"), apiTLSKey: c.String("api-tls-key"), gcHeapFloor: c.Int64("gc-heap-floor"), shutdownGrace: c.Duration("shutdown-grace"), ackWait: c.Duration("ack-wait"),
		tracing: readTracing(c), apiLimits: readAPILimits(c),
	}
}

// Validate checks the flags that need no server (--gc-heap-floor is
// checked where it is applied, by applyHeapFloor).
func (o *runOpts) Validate() (err error) {
	if dw := o.duplicateWindow; dw < minDuplicateWindow {
		return usagef("--duplicate-window %s must be at least %s: a replica that takes the unknown-destination check over from a crashed one (after 10s of silence) writes again the dead letters of the last second the crashed one had not recorded, and only the duplicate window drops them", dw, minDuplicateWindow)
	}
	if n := o.maxConsumers; n <= stream.ReservedConsumers || n > 1_000_000 {
		return usagef("--max-consumers %d: give %d to 1000000 (relay keeps %d for its own readers)", n, stream.ReservedConsumers+1, stream.ReservedConsumers)
	}
	if err := o.tracing.Validate(); err != nil {
		return err
	}
	if (o.apiTLSCert == "") != (o.apiTLSKey == "") {
		return usagef("--api-tls-cert and --api-tls-key go together: give both, or neither")
	}
	if o.apiTLSCert != "" && o.apiAddr == "" {
		return usagef("--api-tls-cert needs --api-addr")
	}
	if err := o.apiLimits.Validate(); err != nil {
		return err
	}
	if o.alertBacklogAge < 0 {
		return usagef("--alert-backlog-age %s: give a duration, or 0 for never", o.alertBacklogAge)
	}
	if o.alertDeadLetters < 0 {
		return usagef("--alert-dead-letters %d: give a count, or 0 for never", o.alertDeadLetters)
	}
	if n := o.logResponseBytes; n < 0 || n > 64<<10 {
		return usagef("--log-response-bytes %d: give 0 to 65536", n)
	}
	if o.attemptRetention < time.Minute {
		return usagef("--attempt-retention %s: give at least 1m", o.attemptRetention)
	}
	if o.attemptMaxBytes < 1<<20 {
		return usagef("--attempt-max-bytes %d: give at least 1048576 (1 MiB)", o.attemptMaxBytes)
	}
	if o.ackWait < 3*time.Second || o.ackWait > 10*time.Minute {
		return usagef("--ack-wait %s: give 3s to 10m", o.ackWait)
	}
	if n := o.maxInFlight; n < 1 || n > 100_000 {
		return usagef("--max-in-flight %d: give 1 to 100000", n)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"connect-timeout", o.connectTimeout}, {"tls-handshake-timeout", o.tlsHandshakeTimeout}} {
		if d.v <= 0 || d.v > 10*time.Minute {
			return usagef("--%s %s: give a positive duration, at most 10m (a delivery's own timeout bounds it too)", d.flag, d.v)
		}
	}
	if o.responseHeaderTimeout < 0 {
		return usagef("--response-header-timeout %s: give a duration, or 0 for none", o.responseHeaderTimeout)
	}
	if o.eventRetention <= o.duplicateWindow {
		return usagef("--event-retention %s: give more than --duplicate-window %s (the events stream keeps them at least that long)", o.eventRetention, o.duplicateWindow)
	}
	if o.dlqRetention <= 0 {
		return usagef("--dlq-retention %s: give a positive duration", o.dlqRetention)
	}
	if o.replicas < 1 || o.replicas > 5 {
		return usagef("--replicas %d: give 1 to 5 (JetStream's most), 3 in a NATS cluster of 3", o.replicas)
	}
	if o.shutdownGrace < 0 {
		return usagef("--shutdown-grace %s: give a duration, or 0 to stop at once", o.shutdownGrace)
	}
	if n := o.maxEventSize; n < 1 || n > 64<<20 {
		return usagef("--max-event-size %d: give 1 to 67108864 bytes (at most the server's max_payload)", n)
	}
	if o.parkThreshold <= 0 {
		return usagef("--park-threshold %s: give a positive duration", o.parkThreshold)
	}
	if o.natsURL != "" && len(o.embeddedGiven) > 0 {
		return usagef("%s configure the embedded NATS server, which --nats-url leaves out: give those to your NATS server, or leave out --nats-url", strings.Join(o.embeddedGiven, ", "))
	}
	if len(o.routes) > 0 && o.clusterName == "" {
		return usagef("--routes needs --cluster-name: without it the embedded server runs on its own")
	}
	if o.natsURL == "" {
		if o.host, o.port, err = splitListen(o.listen); err != nil {
			return err
		}
		if o.clusterName != "" {
			if o.clusterHost, o.clusterPort, err = splitListen(o.clusterListen); err != nil {
				return err
			}
		}
	}
	if o.allow, err = relay.ParseAllowNets(o.allowNet); err != nil {
		return usageError{err.Error()}
	}
	if o.redis.url == "" {
		return nil
	}
	if o.parkLease >= o.duplicateWindow {
		return usagef("--park-lease %s must be shorter than --duplicate-window %s, or a promoter crash could deliver an event twice", o.parkLease, o.duplicateWindow)
	}
	mode, err := redisMode(o.redis.mode)
	if err != nil {
		return err
	}
	o.confirmingReplicas, o.replicaWait, err = redisReplicas(o.redisReplicas, mode, o.redisReplicaWait)
	return err
}

// Run delivers until ctx ends.
func (o *runOpts) Run(ctx context.Context, e *env) error {
	log, err := e.logger()
	if err != nil {
		return err
	}
	// go-redis's own messages (each failed dial, a Sentinel's switch to
	// a new primary) go through relay's log, at debug: relay logs what a
	// Redis failure does to events itself.
	redis.SetLogger(redisLog{log})
	floor, err := applyHeapFloor(log, o.gcHeapFloor, os.Getenv("GOGC"))
	if err != nil {
		return err
	}
	if floor != nil {
		defer floor.stop()
	}
	tp, stopTracing, err := o.tracing.start(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing() // last: after relay stopped, its spans flushed

	url := o.natsURL
	if url == "" {
		s, err := o.startEmbedded(ctx, e, log)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				// SIGINT or SIGTERM while it started: a stop, not a
				// failure.
				log.Info("stopped before relay started", "reason", err)
				return nil
			}
			return err
		}
		defer func() {
			s.Shutdown()
			s.WaitForShutdown()
		}()
		url = s.ClientURL()
		log.Info("embedded NATS started", "url", url, "data_dir", o.dataDir, "sync_always", o.syncAlways)
	}
	ccfg := e.global.connConfig(url)
	ccfg.Logf = func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) }
	nc, err := stream.Connect(ccfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ensureRetrying(setupCtx, log, js, stream.Config{
		Replicas:        o.replicas,
		EventRetention:  o.eventRetention,
		EventMaxBytes:   o.eventMaxBytes,
		LogRetention:    o.attemptRetention,
		LogMaxBytes:     o.attemptMaxBytesGiven,
		MaxMsgSize:      int32(o.maxEventSize),
		MaxConsumers:    o.maxConsumers,
		DLQRetention:    o.dlqRetention,
		DuplicateWindow: o.duplicateWindow,
	}); err != nil {
		return fmt.Errorf("set up streams: %w", err)
	}
	if o.attemptMaxBytesGiven == 0 && o.attemptLog {
		if ls, err := js.Stream(setupCtx, stream.LogStream); err == nil {
			if got := ls.CachedInfo().Config.MaxBytes; got > 0 && got < stream.DefaultLogMaxBytes {
				log.Warn("the delivery log is smaller than its default: the NATS server's storage is small (give --attempt-max-bytes to choose)", "max_bytes", got, "default", int64(stream.DefaultLogMaxBytes))
			}
		}
	}
	key, previous, err := e.global.secretKeys()
	if err != nil {
		return err
	}
	if previous != nil {
		log.Info("secrets sealed with the previous secret key open too, until 'relay dest rekey' seals them with the current one")
	}
	if key == nil {
		log.Warn("destination secrets are stored unencrypted in JetStream: set RELAY_SECRET_KEY or --secret-key-file to encrypt them")
	}
	allow := o.allow
	policy := relay.NetPolicy{Allow: allow}
	if len(allow) > 0 {
		log.Warn("address policy: deliveries may reach these non-public ranges", "allow_net", policy.String())
	} else {
		log.Info("address policy: deliveries reach public addresses only (--allow-net opens a range)")
	}
	// Every replica must run with the same policy; 'relay dest add'
	// checks URLs against the one recorded here.
	if err := relay.AgreeNetPolicy(setupCtx, js, policy); err != nil {
		var pe *relay.NetPolicyError
		if errors.As(err, &pe) {
			return usageError{err.Error()}
		}
		return err
	}
	if o.skipTLSVerify {
		log.Warn("TLS certificates of destinations are NOT verified (--dangerously-skip-tls-verify)")
	}
	cfg := relay.Config{JS: js, Logger: log, NetPolicy: &policy, SecretKey: key, PreviousSecretKeys: previous, ShutdownGrace: o.shutdownGrace, ParkThreshold: o.parkThreshold, MaxInFlight: o.maxInFlight, AckWait: o.ackWait,
		NoAttemptLog: !o.attemptLog, NoOperatorEvents: !o.operatorEvents, AlertBacklogAge: o.alertBacklogAge, AlertDeadLetters: o.alertDeadLetters, LogResponseBytes: cmp.Or(o.logResponseBytes, -1),
		TracerProvider: tp,
		HTTPClient: relay.NewHTTPClient(relay.HTTPOptions{
			Guard:                 relay.NetGuard{Allow: allow},
			ConnectTimeout:        o.connectTimeout,
			TLSHandshakeTimeout:   o.tlsHandshakeTimeout,
			ResponseHeaderTimeout: o.responseHeaderTimeout,
			InsecureSkipVerify:    o.skipTLSVerify,
		})}
	var promoter *schedule.Promoter
	if u := o.redis.url; u != "" {
		replicas, wait := o.confirmingReplicas, o.replicaWait
		st, err := schedule.Dial(setupCtx, u, o.redis.mode)
		if err != nil {
			return err
		}
		defer st.Client().Close()
		if replicas > 0 {
			if st, err = st.WithReplicas(replicas, wait); err != nil {
				return usageError{err.Error() + " (--redis-replica-wait, or read_timeout in --redis-url)"}
			}
			if n, err := st.ConnectedReplicas(setupCtx); err != nil {
				log.Warn("cannot read how many replicas the Redis primary has", "err", err)
			} else if n < replicas {
				log.Warn("the Redis primary has fewer replicas than --redis-replicas: until more connect, long waits stay in JetStream", "connected", n, "redis_replicas", replicas)
			}
		}
		cfg.Schedule = st
		promoter = &schedule.Promoter{Store: st, JS: js, Lease: o.parkLease, Logger: log, TracerProvider: tp}
		log.Info("long waits are parked in Redis", "threshold", cfg.ParkThreshold, "replicas_confirming", replicas)
	} else {
		log.Info("no --redis-url: every retry wait is a delayed nak in JetStream, and each waiting event holds one of its destination's 10000 ack-pending slots")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = relay.NewMetrics(reg)
	reg.MustRegister(relay.NewStateCollector(js, cfg.Schedule))
	// Set once relay.New returned: until then, and until it runs, not
	// ready.
	var running atomic.Pointer[relay.Relay]
	if addr := o.metricsAddr; addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", addr, err)
		}
		srv := &http.Server{Handler: relay.OpsHandler(reg, func(ctx context.Context) error {
			if err := relay.Ready(ctx, nc, js, cfg.Schedule); err != nil {
				return err
			}
			r := running.Load()
			if r == nil {
				return errors.New("starting")
			}
			return r.Serving()
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	}
	if o.apiAddr != "" {
		stop, err := o.serveAPI(setupCtx, js, log, tp, relay.WithSecretKey(key, previous...))
		if err != nil {
			return err
		}
		defer stop()
	}
	r, err := relay.New(setupCtx, cfg)
	if err != nil {
		return err
	}
	running.Store(r)
	var wg sync.WaitGroup
	if promoter != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = promoter.Run(ctx)
		}()
	}
	if err := r.Run(ctx); err != nil {
		return err
	}
	wg.Wait()
	if err := nc.Flush(); err != nil {
		log.Warn("flushing the NATS connection", "err", err)
	}
	return nil
}

// startEmbedded starts the embedded NATS server of --data-dir and --listen.
func (o *runOpts) startEmbedded(ctx context.Context, e *env, log *slog.Logger) (embeddedServer, error) {
	ecfg := embedded.Config{
		Name:       o.serverName,
		DataDir:    o.dataDir,
		Host:       o.host,
		Port:       o.port,
		SyncAlways: o.syncAlways,
		User:       e.global.conn.User,
		Password:   e.global.conn.Password,
		Token:      e.global.conn.Token,
		Logf: func(format string, args ...any) {
			log.Debug(fmt.Sprintf(format, args...))
		},
		Recovering: func(waited time.Duration) {
			log.Info("embedded NATS is still recovering its JetStream store; the larger the store, the longer this takes", "waited", waited.Round(time.Second), "data_dir", o.dataDir)
		},
	}
	if o.clusterName != "" {
		ecfg.ClusterName, ecfg.ClusterHost, ecfg.ClusterPort, ecfg.Routes = o.clusterName, o.clusterHost, o.clusterPort, o.routes
	}
	s, err := embedded.StartContext(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// embeddedServer is what relay run uses of the embedded NATS server.
type embeddedServer interface {
	ClientURL() string
	Shutdown()
	WaitForShutdown()
}

// ensureRetrying sets up the streams, retrying while JetStream is not ready
// (a cluster still electing its leaders answers with errors for a while).
func ensureRetrying(ctx context.Context, log *slog.Logger, js jetstream.JetStream, cfg stream.Config) error {
	for {
		err := stream.Ensure(ctx, js, cfg)
		if err == nil {
			return nil
		}
		if errors.Is(err, stream.ErrIncompatible) || cfg.WithDefaults().Validate() != nil {
			return err
		}
		log.Warn("JetStream not ready; retrying", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, usagef("--listen %q: expected HOST:PORT", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, usagef("--listen %q: bad port", addr)
	}
	if port == 0 {
		port = -1 // nats-server: pick a free port
	}
	return host, port, nil
}

// minDuplicateWindow is the shortest --duplicate-window relay run accepts:
// it must outlast the unknown-destination check's takeover (10s of silence,
// relay.Config.CheckTakeover, plus the second of progress not yet
// recorded), with room to spare.
const minDuplicateWindow = 20 * time.Second

// redisReplicas checks --redis-replicas n (-1: 1 with sentinel or cluster,
// 0 with a single server) and --redis-replica-wait.
func redisReplicas(n int, mode string, wait time.Duration) (int, time.Duration, error) {
	if n < -1 {
		return 0, 0, usagef("--redis-replicas %d: give 0 or more", n)
	}
	if n == -1 {
		n = 0
		if mode == "sentinel" || mode == "cluster" {
			n = 1
		}
	}
	if n > 0 && (wait < time.Millisecond || wait > time.Second) {
		return 0, 0, usagef("--redis-replica-wait %s: give 1ms to 1s (a park must finish within relay's 2s for it)", wait)
	}
	return n, wait, nil
}

// redisLog writes go-redis's messages to relay's log at debug level, in its
// format (text or JSON), instead of go-redis's own lines on stderr.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}

// serveAPI serves the HTTP API on --api-addr until stop is called; its
// destination store is opened with secretKey, as relay's. It refuses a
// non-loopback address while no API key exists: the API would be open to
// the network with no way in but to create a key.
func (o *runOpts) serveAPI(ctx context.Context, js jetstream.JetStream, log *slog.Logger, tp trace.TracerProvider, secretKey relay.StoreOption) (stop func(), err error) {
	keys, err := api.OpenKeys(ctx, js)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.apiAddr)
	if err != nil {
		return nil, fmt.Errorf("--api-addr %s: %w", o.apiAddr, err)
	}
	if ap, perr := netip.ParseAddrPort(ln.Addr().String()); perr != nil || !ap.Addr().IsLoopback() {
		all, err := keys.List(ctx)
		if err != nil {
			ln.Close()
			return nil, err
		}
		if len(all) == 0 {
			ln.Close()
			return nil, usagef("--api-addr %s is not a loopback address and no API key exists: create one first ('relay api-key create --name N --scope admin'), or serve the API on 127.0.0.1", o.apiAddr)
		}
	}
	prod, err := relay.NewProducer(ctx, js)
	if err != nil {
		ln.Close()
		return nil, err
	}
	prod.TraceWith(tp)
	dests, err := relay.NewStore(ctx, js, secretKey)
	if err != nil {
		ln.Close()
		return nil, err
	}
	letters, err := dlq.Open(ctx, js)
	if err != nil {
		ln.Close()
		return nil, err
	}
	apiSrv := api.NewServer(api.Config{JS: js, Keys: keys, Producer: prod, Dests: dests, DeadLetters: letters.WithTracerProvider(tp), Logger: log, BodyTimeout: o.apiLimits.bodyTimeout})
	dash, err := ui.New(ctx, ui.Config{API: apiSrv, JS: js, Secure: o.apiTLSCert != "", Logger: log})
	if err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", dash)
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("/", apiSrv)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln = o.apiLimits.bound(srv, ln, o.maxInFlight, log)
	scheme := "http"
	if o.apiTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.apiTLSCert, o.apiTLSKey)
		if err != nil {
			ln.Close()
			return nil, usagef("--api-tls-cert/--api-tls-key: %v", err)
		}
		scheme = "https"
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		srv.Handler = withHSTS(srv.Handler)
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	log.Info("serving the HTTP API and the dashboard", "url", scheme+"://"+ln.Addr().String()+"/v1", "document", scheme+"://"+ln.Addr().String()+"/v1/openapi.json", "dashboard", scheme+"://"+ln.Addr().String()+"/ui/")
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// givenInt64 is the value of flag name when it was given (on the command
// line or in its environment variable), else 0.
func givenInt64(c *cli.Context, name string) int64 {
	if c.IsSet(name) {
		return c.Int64(name)
	}
	return 0
}
