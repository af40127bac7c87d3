package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/tenant"
)

// Config is what a replica runs with: the fields of 'relay run's flags,
// each naming its flag. Fields marked Optional have a default that
// WithDefaults fills in where the zero value says nothing else; where
// zero means something ("0: never"), the field says so.
type Config struct {
	// Logger receives the replica's log: what it started, the warnings
	// about its settings, and the engine's lines. Optional, default
	// slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the spans of deliveries, parks, dead letters
	// and the API's publishes. Optional: nil traces nothing.
	TracerProvider trace.TracerProvider

	// NATSURL is the NATS server (URLs comma-separated) to deliver over
	// (--nats-url). Optional: without it and without JS, the replica
	// starts an embedded server (DataDir, Listen and the fields after
	// them).
	NATSURL string
	// Conn is how to connect (the global flags: credentials, TLS, the
	// connection's name); its URL is NATSURL's or the embedded server's.
	// The embedded server takes User, Password and Token from it too.
	// Optional.
	Conn stream.ConnConfig
	// JS is a JetStream context over a connection the caller owns and
	// keeps open, to deliver over instead of NATSURL or an embedded
	// server. With it the caller runs the NATS side: the replica sets up
	// no stream (stream.Ensure must have run), and it neither checks nor
	// records the replicas' address policy (AllowNet still guards its
	// own deliveries). Optional; for tests and benchmarks that run the
	// NATS server themselves.
	JS jetstream.JetStream

	// DataDir is where the embedded server's JetStream stores events
	// (--data-dir, whose default is ./relay-data). Required for an
	// embedded server: without it the server refuses to start.
	DataDir string
	// Listen is the embedded server's HOST:PORT (--listen); port 0 picks
	// a free one. Optional, default "127.0.0.1:4222".
	Listen string
	// SyncAlways makes the embedded server fsync every write
	// (--sync-always). Optional.
	SyncAlways bool
	// ServerName is the embedded server's name, unique in a cluster
	// (--server-name). Optional, default relay-embedded.
	ServerName string
	// ClusterName joins the embedded server to a JetStream cluster of
	// this name (--cluster-name). Optional: without it the server runs on
	// its own.
	ClusterName string
	// ClusterListen is the embedded server's cluster HOST:PORT
	// (--cluster-listen), used with ClusterName. Optional, default
	// "127.0.0.1:6222".
	ClusterListen string
	// Routes are the other cluster nodes' URLs, nats://host:port
	// (--routes). Optional; they need ClusterName.
	Routes []string
	// ClusterSecret is the password the cluster's routes authenticate
	// with (--cluster-secret), the same on every node, at least 16 bytes.
	// Optional, with ClusterName: without it any server that reaches
	// ClusterListen may join the cluster.
	ClusterSecret []byte

	// Replicas of relay's streams and buckets (--replicas), 1 to 5.
	// Optional, default 1.
	Replicas int
	// EventRetention is how long events stay in the log (--event-retention);
	// more than DuplicateWindow. Optional, default 7 days.
	EventRetention time.Duration
	// EventMaxBytes caps the event log in bytes (--event-max-bytes).
	// Optional: 0 or -1, none.
	EventMaxBytes int64
	// MaxEventSize is the largest event accepted, body and headers, in
	// bytes (--max-event-size), 1 to 64 MiB. Optional, default 1 MiB.
	MaxEventSize int
	// MaxConsumers caps the consumers of the events stream
	// (--max-consumers), stream.ReservedConsumers+1 to 1,000,000.
	// Optional, default stream.DefaultMaxConsumers.
	MaxConsumers int
	// DLQRetention is how long dead letters are kept (--dlq-retention).
	// Optional, default 14 days.
	DLQRetention time.Duration
	// DuplicateWindow is how long a re-published event id is dropped
	// (--duplicate-window), at least 20s. Optional, default 2 minutes.
	DuplicateWindow time.Duration
	// AttemptRetention is how long the delivery log keeps an attempt's
	// record (--attempt-retention), at least 1m. Optional, default 7 days.
	AttemptRetention time.Duration
	// AttemptMaxBytes caps the delivery log in bytes (--attempt-max-bytes),
	// at least 1 MiB. Optional: by default 1 GiB, or less if the NATS
	// server's storage is smaller (stream.Config.LogMaxBytes).
	AttemptMaxBytes int64

	// NoAttemptLog records no attempt in the delivery log
	// (--attempt-log=false). Optional.
	NoAttemptLog bool
	// LogResponseBytes is how much of each response body the delivery log
	// keeps (--log-response-bytes), at most 65536. Optional, default
	// relay.DefaultLogResponseBytes; negative: none.
	LogResponseBytes int
	// NoOperatorEvents publishes no operator event
	// (--operator-events=false). Optional.
	NoOperatorEvents bool
	// AlertBacklogAge is the age of a destination's oldest undelivered
	// event past which relay.destination.backlog_stale is emitted
	// (--alert-backlog-age). Optional: 0, never.
	AlertBacklogAge time.Duration
	// AlertDeadLetters is how many dead letters of a destination in a
	// minute make a relay.dead_letters event (--alert-dead-letters).
	// Optional: 0, never.
	AlertDeadLetters int
	// AckWait is how long NATS waits for an event's ack before another
	// replica gets it (--ack-wait), 3s to 10m. Optional, default
	// relay.DefaultAckWait.
	AckWait time.Duration
	// MaxInFlight is the most attempts this replica makes at once
	// (--max-in-flight), 1 to 100,000. Optional, default 1024.
	MaxInFlight int
	// ShutdownGrace is how long in-flight deliveries may finish once the
	// replica stops (--shutdown-grace). Optional, default 10s.
	ShutdownGrace time.Duration
	// AllowNet are the non-public CIDR ranges deliveries may reach
	// (--allow-net). Optional: none, public addresses only.
	AllowNet []string
	// ConnectTimeout bounds a delivery's TCP connect (--connect-timeout),
	// at most 10m. Optional, default 10s.
	ConnectTimeout time.Duration
	// TLSHandshakeTimeout bounds a delivery's TLS handshake
	// (--tls-handshake-timeout), at most 10m. Optional, default 10s.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a response's headers
	// (--response-header-timeout). Optional: 0, only the destination's
	// own timeout.
	ResponseHeaderTimeout time.Duration
	// EgressProxy is the HTTP proxy deliveries go through, with CONNECT to
	// addresses the guard vetted (--egress-proxy),
	// http://[user:password@]host:port. Optional: none, deliveries
	// connect directly.
	EgressProxy string
	// EgressProxyAuth is its credentials, user:password
	// (--egress-proxy-auth-file's content). Optional.
	EgressProxyAuth string
	// NoProxy are what goes direct, not through EgressProxy (--no-proxy):
	// host names, .domains, addresses and CIDR ranges as NO_PROXY has
	// them, dest:NAME and tenant:ID. Optional.
	NoProxy []string
	// EgressIPs are the addresses deliveries come from, as the operator
	// declares them for receivers to allowlist (--egress-ips): each an IP
	// address or a CIDR range. Optional.
	EgressIPs []string
	// SkipTLSVerify does not verify destinations' TLS certificates
	// (--dangerously-skip-tls-verify). Optional. Dangerous.
	SkipTLSVerify bool
	// SecretKey encrypts destination secrets at rest (--secret-key), at
	// least relay.MinKeyLen bytes. Optional: without it they are stored as
	// they are.
	SecretKey []byte
	// PreviousSecretKeys open secrets sealed before a key rotation
	// (--previous-secret-key). Optional; they need SecretKey.
	PreviousSecretKeys [][]byte

	// RedisURL is the Redis that long waits are parked in (--redis-url).
	// Optional: without it every wait stays in JetStream.
	RedisURL string
	// RedisMode is single, cluster or sentinel (--redis-mode). Optional,
	// default single.
	RedisMode string
	// RedisReplicas is how many Redis replicas must confirm each parked
	// event (--redis-replicas). Optional: the zero value asks for none;
	// AutoRedisReplicas (the flag's default) asks for 1 with sentinel or
	// cluster, none with single.
	RedisReplicas int
	// RedisReplicaWait is how long a park waits for RedisReplicas to
	// confirm (--redis-replica-wait), 1ms to 1s. Optional, default 500ms.
	RedisReplicaWait time.Duration
	// ParkThreshold is the shortest wait parked in Redis
	// (--park-threshold). Optional, default 1 minute.
	ParkThreshold time.Duration
	// ParkLease is how long a promoter reserves the due events it claimed
	// (--park-lease), shorter than DuplicateWindow. Optional, default 30s.
	ParkLease time.Duration

	// MetricsAddr is where /metrics, /healthz and /readyz are served
	// (--metrics-addr). Optional: empty, not served (and no metrics are
	// recorded).
	MetricsAddr string
	// MetricsTenantDestinations gives each tenant's destination series of
	// its own (--metrics-tenant-destinations); by default the tenants'
	// destinations are one series together, whatever their number.
	MetricsTenantDestinations bool
	// Pprof says whether Go's profiles are served at /debug/pprof/ on
	// MetricsAddr (--pprof): "auto" (the default) only when that address
	// is loopback, "on", or "off".
	Pprof string
	// APIAddr is where the HTTP API and the dashboard are served
	// (--api-addr). Optional: empty, not served.
	APIAddr string
	// APITLSCert and APITLSKey are PEM files: with both the API is served
	// over TLS (--api-tls-cert, --api-tls-key). Optional; they need
	// APIAddr.
	APITLSCert, APITLSKey string
	// PortalURL is the customer portal's public URL, for the links the
	// API mints (--portal-url). Optional: the API's own /portal/.
	PortalURL string
	// PortalFrameAncestors are the origins that may embed every tenant's
	// portal in an iframe (--portal-frame-ancestor). Optional: none.
	PortalFrameAncestors []string
	// APIMaxConns is the most connections the API holds at once
	// (--api-max-conns), 1 to 1,000,000. Optional, default
	// DefaultAPIMaxConns.
	APIMaxConns int
	// APIIdleTimeout closes an API connection idle this long
	// (--api-idle-timeout), 1s to 1h. Optional, default
	// DefaultAPIIdleTimeout.
	APIIdleTimeout time.Duration
	// APIBodyTimeout bounds the arrival of a request's body
	// (--api-body-timeout), 1s to 1h. Optional, default
	// DefaultAPIBodyTimeout.
	APIBodyTimeout time.Duration

	// Engine, when set, changes the delivery engine's configuration after
	// the replica built it from the fields above, just before the engine
	// is made: for settings no flag sets (tests: OnDelivery,
	// CheckTakeover, a clock). Optional.
	Engine func(*relay.Config)
}

// AutoRedisReplicas as Config.RedisReplicas asks for 1 Redis replica's
// confirmation with sentinel or cluster, none with a single server.
const AutoRedisReplicas = -1

// MinDuplicateWindow is the shortest Config.DuplicateWindow: it must
// outlast the unknown-destination check's takeover (10s of silence,
// relay.Config.CheckTakeover, plus the second of progress not yet
// recorded), with room to spare.
const MinDuplicateWindow = 20 * time.Second

// WithDefaults returns cfg with its unset fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	setDefault(&cfg.Listen, "127.0.0.1:4222")
	setDefault(&cfg.ClusterListen, "127.0.0.1:6222")
	setDefault(&cfg.Pprof, "auto")
	setDefault(&cfg.Replicas, 1)
	setDefault(&cfg.EventRetention, 7*24*time.Hour)
	setDefault(&cfg.MaxEventSize, 1<<20)
	setDefault(&cfg.MaxConsumers, stream.DefaultMaxConsumers)
	setDefault(&cfg.DLQRetention, 14*24*time.Hour)
	setDefault(&cfg.DuplicateWindow, 2*time.Minute)
	setDefault(&cfg.AttemptRetention, 7*24*time.Hour)
	setDefault(&cfg.LogResponseBytes, relay.DefaultLogResponseBytes)
	setDefault(&cfg.AckWait, destination.DefaultAckWait)
	setDefault(&cfg.MaxInFlight, 1024)
	setDefault(&cfg.ShutdownGrace, 10*time.Second)
	setDefault(&cfg.ConnectTimeout, 10*time.Second)
	setDefault(&cfg.TLSHandshakeTimeout, 10*time.Second)
	setDefault(&cfg.RedisMode, "single")
	setDefault(&cfg.RedisReplicaWait, 500*time.Millisecond)
	setDefault(&cfg.ParkThreshold, time.Minute)
	setDefault(&cfg.ParkLease, 30*time.Second)
	setDefault(&cfg.APIMaxConns, DefaultAPIMaxConns)
	setDefault(&cfg.APIIdleTimeout, DefaultAPIIdleTimeout)
	setDefault(&cfg.APIBodyTimeout, DefaultAPIBodyTimeout)
	return cfg
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate checks cfg, with its defaults filled in, without any server:
// a *ConfigError naming the flag of the first bad value.
func (cfg Config) Validate() error {
	if dw := cfg.DuplicateWindow; dw < MinDuplicateWindow {
		return invalid("--duplicate-window %s must be at least %s: a replica that takes the unknown-destination check over from a crashed one (after 10s of silence) writes again the dead letters of the last second the crashed one had not recorded, and only the duplicate window drops them", dw, MinDuplicateWindow)
	}
	if n := cfg.MaxConsumers; n <= stream.ReservedConsumers || n > 1_000_000 {
		return invalid("--max-consumers %d: give %d to 1000000 (relay keeps %d for its own readers)", n, stream.ReservedConsumers+1, stream.ReservedConsumers)
	}
	if (cfg.APITLSCert == "") != (cfg.APITLSKey == "") {
		return invalid("--api-tls-cert and --api-tls-key go together: give both, or neither")
	}
	if cfg.APITLSCert != "" && cfg.APIAddr == "" {
		return invalid("--api-tls-cert needs --api-addr")
	}
	for _, o := range cfg.PortalFrameAncestors {
		if _, err := tenant.ValidateOrigin(o); err != nil {
			return invalid("--portal-frame-ancestor %q: %v", o, err)
		}
	}
	if u := cfg.PortalURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
			return invalid("--portal-url %q: give the portal's absolute http(s) URL, such as https://hooks.example.com/portal/", u)
		}
	}
	if err := cfg.apiLimits().Validate(); err != nil {
		return err
	}
	if cfg.AlertBacklogAge < 0 {
		return invalid("--alert-backlog-age %s: give a duration, or 0 for never", cfg.AlertBacklogAge)
	}
	if cfg.AlertDeadLetters < 0 {
		return invalid("--alert-dead-letters %d: give a count, or 0 for never", cfg.AlertDeadLetters)
	}
	if n := cfg.LogResponseBytes; n > 64<<10 {
		return invalid("--log-response-bytes %d: give 0 to 65536", n)
	}
	if cfg.AttemptRetention < time.Minute {
		return invalid("--attempt-retention %s: give at least 1m", cfg.AttemptRetention)
	}
	if n := cfg.AttemptMaxBytes; n != 0 && n < 1<<20 {
		return invalid("--attempt-max-bytes %d: give at least 1048576 (1 MiB)", n)
	}
	if cfg.AckWait < 3*time.Second || cfg.AckWait > 10*time.Minute {
		return invalid("--ack-wait %s: give 3s to 10m", cfg.AckWait)
	}
	if n := cfg.MaxInFlight; n < 1 || n > 100_000 {
		return invalid("--max-in-flight %d: give 1 to 100000", n)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"connect-timeout", cfg.ConnectTimeout}, {"tls-handshake-timeout", cfg.TLSHandshakeTimeout}} {
		if d.v <= 0 || d.v > 10*time.Minute {
			return invalid("--%s %s: give a positive duration, at most 10m (a delivery's own timeout bounds it too)", d.flag, d.v)
		}
	}
	if cfg.ResponseHeaderTimeout < 0 {
		return invalid("--response-header-timeout %s: give a duration, or 0 for none", cfg.ResponseHeaderTimeout)
	}
	if cfg.EventRetention <= cfg.DuplicateWindow {
		return invalid("--event-retention %s: give more than --duplicate-window %s (the events stream keeps them at least that long)", cfg.EventRetention, cfg.DuplicateWindow)
	}
	if cfg.DLQRetention <= 0 {
		return invalid("--dlq-retention %s: give a positive duration", cfg.DLQRetention)
	}
	if cfg.Replicas < 1 || cfg.Replicas > 5 {
		return invalid("--replicas %d: give 1 to 5 (JetStream's most), 3 in a NATS cluster of 3", cfg.Replicas)
	}
	if cfg.ShutdownGrace < 0 {
		return invalid("--shutdown-grace %s: give a duration, or 0 to stop at once", cfg.ShutdownGrace)
	}
	if n := cfg.MaxEventSize; n < 1 || n > 64<<20 {
		return invalid("--max-event-size %d: give 1 to 67108864 bytes (at most the server's max_payload)", n)
	}
	if cfg.Pprof != "auto" && cfg.Pprof != "on" && cfg.Pprof != "off" {
		return invalid("--pprof %q: give auto (profiles only on a loopback --metrics-addr), on or off", cfg.Pprof)
	}
	if cfg.ParkThreshold <= 0 {
		return invalid("--park-threshold %s: give a positive duration", cfg.ParkThreshold)
	}
	if cfg.JS != nil && cfg.NATSURL != "" {
		return invalid("give the NATS server once: a NATS URL (--nats-url) or a JetStream context, not both")
	}
	if len(cfg.Routes) > 0 && cfg.ClusterName == "" {
		return invalid("--routes needs --cluster-name: without it the embedded server runs on its own")
	}
	if len(cfg.ClusterSecret) > 0 && cfg.ClusterName == "" {
		return invalid("--cluster-secret needs --cluster-name: without it the embedded server runs on its own")
	}
	if n := len(cfg.ClusterSecret); n > 0 && n < destination.MinKeyLen {
		return invalid("the cluster secret is %d bytes; use at least %d random bytes (openssl rand -base64 32)", n, destination.MinKeyLen)
	}
	if cfg.embedded() {
		if _, _, err := splitListen(cfg.Listen); err != nil {
			return err
		}
		if cfg.ClusterName != "" {
			if _, _, err := splitListen(cfg.ClusterListen); err != nil {
				return err
			}
		}
	}
	if _, err := egress.ParseAllowNets(cfg.AllowNet); err != nil {
		return &ConfigError{err.Error()}
	}
	if _, err := cfg.proxy(); err != nil {
		return err
	}
	for _, a := range cfg.EgressIPs {
		if _, err := netip.ParseAddr(a); err == nil {
			continue
		}
		if _, err := netip.ParsePrefix(a); err != nil {
			return invalid("--egress-ips %q: give an IP address or a CIDR range (203.0.113.7, 198.51.100.0/28)", a)
		}
	}
	if len(cfg.SecretKey) > 0 && len(cfg.SecretKey) < destination.MinKeyLen {
		return invalid("the secret key is %d bytes; use at least %d random bytes (openssl rand -base64 32)", len(cfg.SecretKey), destination.MinKeyLen)
	}
	if len(cfg.PreviousSecretKeys) > 0 && len(cfg.SecretKey) == 0 {
		return invalid("--previous-secret-key is the old key of a rotation: give the new one too (--secret-key or --secret-key-file)")
	}
	if cfg.RedisURL == "" {
		return nil
	}
	if cfg.ParkLease >= cfg.DuplicateWindow {
		return invalid("--park-lease %s must be shorter than --duplicate-window %s, or a promoter crash could deliver an event twice", cfg.ParkLease, cfg.DuplicateWindow)
	}
	if err := CheckRedisMode(cfg.RedisMode); err != nil {
		return err
	}
	_, err := cfg.redisReplicas()
	return err
}

// embedded reports whether the replica starts an embedded NATS server.
func (cfg Config) embedded() bool { return cfg.NATSURL == "" && cfg.JS == nil }

// Streams are the settings of relay's streams and buckets that the
// replica sets up (stream.Ensure) as it starts.
func (cfg Config) Streams() stream.Config {
	return stream.Config{
		Replicas:        cfg.Replicas,
		EventRetention:  cfg.EventRetention,
		EventMaxBytes:   cfg.EventMaxBytes,
		LogRetention:    cfg.AttemptRetention,
		LogMaxBytes:     cfg.AttemptMaxBytes,
		MaxMsgSize:      int32(cfg.MaxEventSize),
		MaxConsumers:    cfg.MaxConsumers,
		DLQRetention:    cfg.DLQRetention,
		DuplicateWindow: cfg.DuplicateWindow,
	}
}

func (cfg Config) apiLimits() apiLimits {
	return apiLimits{maxConns: cfg.APIMaxConns, idleTimeout: cfg.APIIdleTimeout, bodyTimeout: cfg.APIBodyTimeout}
}

// CheckRedisMode checks a Redis mode (--redis-mode): single, cluster or
// sentinel.
func CheckRedisMode(m string) error {
	switch m {
	case "single", "cluster", "sentinel":
		return nil
	}
	return invalid("--redis-mode %q: give single, cluster or sentinel", m)
}

// redisReplicas is RedisReplicas with AutoRedisReplicas resolved, checked
// with RedisReplicaWait.
func (cfg Config) redisReplicas() (int, error) {
	n := cfg.RedisReplicas
	if n < AutoRedisReplicas {
		return 0, invalid("--redis-replicas %d: give 0 or more", n)
	}
	if n == AutoRedisReplicas {
		n = 0
		if cfg.RedisMode == "sentinel" || cfg.RedisMode == "cluster" {
			n = 1
		}
	}
	if wait := cfg.RedisReplicaWait; n > 0 && (wait < time.Millisecond || wait > time.Second) {
		return 0, invalid("--redis-replica-wait %s: give 1ms to 1s (a park must finish within relay's 2s for it)", wait)
	}
	return n, nil
}

// splitListen reads a --listen address; port 0 becomes -1, nats-server's
// "pick a free port".
func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, invalid("--listen %q: expected HOST:PORT", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, invalid("--listen %q: bad port", addr)
	}
	if port == 0 {
		port = -1 // nats-server: pick a free port
	}
	return host, port, nil
}

// ConfigError is a setting the replica cannot run with: a bad value of a
// Config field (Validate), or one the servers refuse as it starts (an
// address policy other than the running replicas', an API on a public
// address with no API key, a TLS certificate that does not load). Its
// message names the flag of 'relay run' that sets it.
type ConfigError struct{ msg string }

// proxy is the egress proxy of EgressProxy, EgressProxyAuth and NoProxy;
// nil without one.
func (cfg Config) proxy() (*egress.Proxy, error) {
	if cfg.EgressProxy == "" {
		switch {
		case len(cfg.NoProxy) > 0:
			return nil, invalid("--no-proxy names what goes direct rather than through --egress-proxy: give --egress-proxy too, or leave --no-proxy out")
		case cfg.EgressProxyAuth != "":
			return nil, invalid("--egress-proxy-auth-file is the credentials of --egress-proxy: give --egress-proxy too")
		}
		return nil, nil
	}
	p, err := egress.ParseProxyURL(cfg.EgressProxy)
	if err != nil {
		return nil, invalid("--egress-proxy: %v", err)
	}
	if cfg.EgressProxyAuth != "" {
		if p.User != "" {
			return nil, invalid("--egress-proxy has credentials and so has --egress-proxy-auth-file: give them once (the file keeps them out of the process list)")
		}
		user, pass, ok := strings.Cut(strings.TrimSpace(cfg.EgressProxyAuth), ":")
		if !ok || user == "" {
			return nil, invalid("--egress-proxy-auth-file: give one line, user:password")
		}
		p.User, p.Password = user, pass
	}
	for _, e := range cfg.NoProxy {
		for _, e := range strings.Split(e, ",") {
			e = strings.TrimSpace(e)
			if err := egress.ValidateNoProxy(e); err != nil {
				return nil, invalid("--no-proxy %v", err)
			}
			p.NoProxy = append(p.NoProxy, e)
		}
	}
	return p, nil
}

func (e *ConfigError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &ConfigError{fmt.Sprintf(format, args...)}
}

// IsConfigError reports whether err is, or wraps, a *ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}
