package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/replica"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
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
			&cli.StringFlag{Name: "cluster-secret", EnvVars: []string{"RELAY_CLUSTER_SECRET"}, Usage: "embedded NATS: password the cluster's routes authenticate with, the same on every node (at least 16 random bytes; prefer the environment variable or --cluster-secret-file): a server without it cannot join"},
			&cli.StringFlag{Name: "cluster-secret-file", EnvVars: []string{"RELAY_CLUSTER_SECRET_FILE"}, Usage: "file holding --cluster-secret", TakesFile: true},
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
			&cli.DurationFlag{Name: "ack-wait", EnvVars: []string{"RELAY_ACK_WAIT"}, Value: destination.DefaultAckWait, Usage: "how long NATS waits for the ack of an event handed to a replica before it hands it to another: how soon another replica delivers the events of one that died, stopped or lost its connection (3s to 10m; a replica restarts it every third of it while it holds an event, so attempts may take longer; give every replica the same)"},
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
			&cli.StringFlag{Name: "egress-proxy", EnvVars: []string{"RELAY_EGRESS_PROXY"}, Usage: "send deliveries through this HTTP proxy, http://host:port: relay resolves each destination's name, vets every address with the guard and asks the proxy for a tunnel to the address (CONNECT ip:port), never the name; TLS still checks the name. Credentials: in the URL (better in the environment than on the command line) or --egress-proxy-auth-file. HTTP_PROXY and HTTPS_PROXY are ignored"},
			&cli.StringFlag{Name: "egress-proxy-auth-file", EnvVars: []string{"RELAY_EGRESS_PROXY_AUTH_FILE"}, Usage: "a file with the egress proxy's credentials, one line user:password (Basic); never printed", TakesFile: true},
			&cli.StringSliceFlag{Name: "no-proxy", EnvVars: []string{"RELAY_NO_PROXY"}, Usage: "what goes direct rather than through --egress-proxy, as NO_PROXY has it: a host name, .domain (and its subdomains), an address or CIDR range; and dest:NAME (a tenant's: dest:TENANT=NAME) or tenant:ID (repeatable, or comma-separated); the guard applies either way"},
			&cli.StringSliceFlag{Name: "egress-ips", EnvVars: []string{"RELAY_EGRESS_IPS"}, Usage: "the addresses deliveries come from (your proxy's or NAT's), IPs or CIDR ranges, shown by GET /v1/egress and the customer portal for receivers to allowlist (repeatable, or comma-separated)"},
			&cli.BoolFlag{Name: "dangerously-skip-tls-verify", EnvVars: []string{"RELAY_DANGEROUSLY_SKIP_TLS_VERIFY"}, Usage: "do not verify destinations' TLS certificates (anyone on the path can read and forge deliveries)"},
			&cli.StringFlag{Name: "api-addr", EnvVars: []string{"RELAY_API_ADDR"}, Usage: "serve the HTTP API (/v1, docs/api.md) here (empty: off); on a non-loopback address only once an API key exists ('relay api-key create')"},
			&cli.StringFlag{Name: "api-tls-cert", EnvVars: []string{"RELAY_API_TLS_CERT"}, Usage: "serve the HTTP API over TLS with this certificate (PEM file; with --api-tls-key)", TakesFile: true},
			&cli.StringFlag{Name: "api-tls-key", EnvVars: []string{"RELAY_API_TLS_KEY"}, Usage: "the private key of --api-tls-cert (PEM file)", TakesFile: true},
			&cli.StringFlag{Name: "portal-url", EnvVars: []string{"RELAY_PORTAL_URL"}, Usage: "the customer portal's public URL, for the links minted (default: the API's own /portal/, as the request reached it); set it when a proxy serves the portal under another name"},
			&cli.StringSliceFlag{Name: "portal-frame-ancestor", EnvVars: []string{"RELAY_PORTAL_FRAME_ANCESTORS"}, Usage: "an origin (https://app.example.com) whose pages may embed every tenant's customer portal in an iframe (repeatable; each tenant may add its own); none: framing is denied"},
			&cli.IntFlag{Name: "api-max-conns", EnvVars: []string{"RELAY_API_MAX_CONNS"}, Value: replica.DefaultAPIMaxConns, Usage: "most connections the HTTP API and dashboard hold at once (1 to 1000000); at the cap a new connection closes the one idle longest, or waits in the listen queue while none is idle, so the API never takes the descriptors NATS and deliveries need"},
			&cli.DurationFlag{Name: "api-idle-timeout", EnvVars: []string{"RELAY_API_IDLE_TIMEOUT"}, Value: replica.DefaultAPIIdleTimeout, Usage: "how long the HTTP API keeps a keep-alive connection with no request (1s to 1h)"},
			&cli.DurationFlag{Name: "api-body-timeout", EnvVars: []string{"RELAY_API_BODY_TIMEOUT"}, Value: replica.DefaultAPIBodyTimeout, Usage: "how long a request's body (an API call's, a dashboard form's) may take to arrive after its headers (1s to 1h): a client that stalls gets 408 and its connection is closed"},
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"RELAY_METRICS_ADDR"}, Value: "127.0.0.1:9464", Usage: "serve /metrics, /healthz and /readyz here (empty: off)"},
			&cli.BoolFlag{Name: "metrics-tenant-destinations", EnvVars: []string{"RELAY_METRICS_TENANT_DESTINATIONS"}, Usage: "give each tenant's destination metric series of its own (default: all tenants' destinations together are one series, dest=\"(tenants)\", so that the series do not grow with tenants)"},
			&cli.StringFlag{Name: "pprof", EnvVars: []string{"RELAY_PPROF"}, Value: "auto", Usage: "serve Go's profiles at /debug/pprof/ on --metrics-addr: auto (only when that address is loopback), on or off; they show goroutine stacks and the memory's shape to whoever reaches them"},
			&cli.Int64Flag{Name: "gc-heap-floor", EnvVars: []string{"RELAY_GC_HEAP_FLOOR"}, Value: 24 << 20, Usage: "heap size in bytes at which Go's garbage collector runs while relay's live heap is small, for less CPU spent collecting (at most 40 MiB, or 11 times the live heap; 0: Go's default pace; not applied when GOGC is set)"},
			&cli.DurationFlag{Name: "shutdown-grace", EnvVars: []string{"RELAY_SHUTDOWN_GRACE"}, Value: 10 * time.Second, Usage: "how long in-flight deliveries may finish after SIGTERM"},
			otelFlag(),
		},
		Action: action(readRun),
	}
}

// runOpts are the options of 'relay run': the replica's Config, and what
// the command itself does with its flags.
type runOpts struct {
	cfg replica.Config

	// embeddedGiven are the embedded server's flags given (they do
	// nothing with --nats-url).
	embeddedGiven []string
	// clusterSecret and clusterSecretFile are --cluster-secret and
	// --cluster-secret-file, read when relay runs.
	clusterSecret, clusterSecretFile string
	// attemptMaxBytes and logResponseBytes are the flags' values, given
	// or not: the Config reads 0 as "not given" and "default".
	attemptMaxBytes  int64
	logResponseBytes int
	gcHeapFloor      int64
	tracing          tracingOpts
	// proxyAuthFile is --egress-proxy-auth-file, read when relay runs.
	proxyAuthFile string
}

func readRun(c *cli.Context) *runOpts {
	var embedded []string
	for _, f := range []string{"data-dir", "listen", "server-name", "sync-always", "cluster-name", "cluster-listen", "routes", "cluster-secret", "cluster-secret-file"} {
		if c.IsSet(f) {
			embedded = append(embedded, "--"+f)
		}
	}
	return &runOpts{
		embeddedGiven: embedded, clusterSecret: c.String("cluster-secret"), clusterSecretFile: c.String("cluster-secret-file"),
		attemptMaxBytes: c.Int64("attempt-max-bytes"), logResponseBytes: c.Int("log-response-bytes"),
		gcHeapFloor: c.Int64("gc-heap-floor"), tracing: readTracing(c), proxyAuthFile: c.String("egress-proxy-auth-file"),
		cfg: replica.Config{
			NATSURL: c.String("nats-url"), DataDir: c.String("data-dir"), Listen: c.String("listen"), ServerName: c.String("server-name"),
			SyncAlways: c.Bool("sync-always"), ClusterName: c.String("cluster-name"), ClusterListen: c.String("cluster-listen"),
			Routes: c.StringSlice("routes"), Replicas: c.Int("replicas"), EventRetention: c.Duration("event-retention"),
			EventMaxBytes: c.Int64("event-max-bytes"), MaxEventSize: c.Int("max-event-size"), MaxConsumers: c.Int("max-consumers"), MaxInFlight: c.Int("max-in-flight"), DLQRetention: c.Duration("dlq-retention"),
			NoOperatorEvents: !c.Bool("operator-events"), AlertBacklogAge: c.Duration("alert-backlog-age"), AlertDeadLetters: c.Int("alert-dead-letters"),
			NoAttemptLog: !c.Bool("attempt-log"), AttemptRetention: c.Duration("attempt-retention"), AttemptMaxBytes: givenInt64(c, "attempt-max-bytes"),
			// --log-response-bytes 0 keeps none.
			LogResponseBytes: cmp.Or(c.Int("log-response-bytes"), -1),
			DuplicateWindow:  c.Duration("duplicate-window"), RedisURL: c.String("redis-url"), RedisMode: c.String("redis-mode"), RedisReplicas: c.Int("redis-replicas"),
			RedisReplicaWait: c.Duration("redis-replica-wait"), ParkThreshold: c.Duration("park-threshold"), ParkLease: c.Duration("park-lease"),
			AllowNet: c.StringSlice("allow-net"), ConnectTimeout: c.Duration("connect-timeout"), TLSHandshakeTimeout: c.Duration("tls-handshake-timeout"),
			ResponseHeaderTimeout: c.Duration("response-header-timeout"), SkipTLSVerify: c.Bool("dangerously-skip-tls-verify"),
			EgressProxy: c.String("egress-proxy"), NoProxy: c.StringSlice("no-proxy"), EgressIPs: splitCommas(c.StringSlice("egress-ips")),
			MetricsAddr: c.String("metrics-addr"), MetricsTenantDestinations: c.Bool("metrics-tenant-destinations"), Pprof: c.String("pprof"), APIAddr: c.String("api-addr"), APITLSCert: c.String("api-tls-cert"), APITLSKey: c.String("api-tls-key"),
			PortalURL: c.String("portal-url"), PortalFrameAncestors: c.StringSlice("portal-frame-ancestor"),
			APIMaxConns: c.Int("api-max-conns"), APIIdleTimeout: c.Duration("api-idle-timeout"), APIBodyTimeout: c.Duration("api-body-timeout"),
			ShutdownGrace: c.Duration("shutdown-grace"), AckWait: c.Duration("ack-wait"),
		},
	}
}

// Validate checks the flags that need no server: the replica's Config
// (replica.Config.Validate), and the flags only the command reads
// (--gc-heap-floor is checked where it is applied, by applyHeapFloor).
func (o *runOpts) Validate() error {
	if err := o.tracing.Validate(); err != nil {
		return err
	}
	if n := o.logResponseBytes; n < 0 {
		return usagef("--log-response-bytes %d: give 0 to 65536", n)
	}
	if o.attemptMaxBytes < 1<<20 {
		return usagef("--attempt-max-bytes %d: give at least 1048576 (1 MiB)", o.attemptMaxBytes)
	}
	if o.cfg.NATSURL != "" && len(o.embeddedGiven) > 0 {
		return usagef("%s configure the embedded NATS server, which --nats-url leaves out: give those to your NATS server, or leave out --nats-url", strings.Join(o.embeddedGiven, ", "))
	}
	return asUsage(o.cfg.Validate())
}

// Run delivers until ctx ends: the process's own settings (the log, the
// heap floor, tracing, the secret keys), then the replica.
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

	cfg := o.cfg
	cfg.Logger, cfg.TracerProvider, cfg.Conn = log, tp, e.global.conn
	if cfg.SecretKey, cfg.PreviousSecretKeys, err = e.global.secretKeys(); err != nil {
		return err
	}
	if o.proxyAuthFile != "" {
		b, err := os.ReadFile(o.proxyAuthFile)
		if err != nil {
			return fmt.Errorf("--egress-proxy-auth-file: %w", err)
		}
		cfg.EgressProxyAuth = strings.TrimSpace(string(b))
		if cfg.EgressProxyAuth == "" {
			return usagef("--egress-proxy-auth-file %s is empty: give one line, user:password", o.proxyAuthFile)
		}
	}
	if cfg.ClusterSecret, err = keyFrom("cluster-secret", "RELAY_CLUSTER_SECRET", o.clusterSecret, o.clusterSecretFile); err != nil {
		return err
	}
	r, err := replica.New(cfg)
	if err != nil {
		return asUsage(err)
	}
	return asUsage(r.Run(ctx))
}

// asUsage makes a replica's *replica.ConfigError a usage error (exit 2),
// with the same message.
func asUsage(err error) error {
	if replica.IsConfigError(err) {
		return usageError{err.Error()}
	}
	return err
}

// redisLog writes go-redis's messages to relay's log at debug level, in its
// format (text or JSON), instead of go-redis's own lines on stderr.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}

// givenInt64 is the value of flag name when it was given (on the command
// line or in its environment variable), else 0.
func givenInt64(c *cli.Context, name string) int64 {
	if c.IsSet(name) {
		return c.Int64(name)
	}
	return 0
}

// splitCommas is vals with each comma-separated value split, blanks left
// out.
func splitCommas(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}
