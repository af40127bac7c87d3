package replica

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

// The defaults are 'relay run's: a Config with nothing set is valid, and
// has the flags' defaults.
func TestConfigDefaultsAreValid(t *testing.T) {
	t.Parallel()
	cfg := Config{}.WithDefaults()
	require.NoError(t, cfg.Validate())
	require.Equal(t, "127.0.0.1:4222", cfg.Listen)
	require.Equal(t, 2*time.Minute, cfg.DuplicateWindow)
	require.Equal(t, 1024, cfg.MaxInFlight)
	require.Equal(t, DefaultAPIMaxConns, cfg.APIMaxConns)
	require.Equal(t, "single", cfg.RedisMode)
	// What zero means is kept: never, none.
	require.Zero(t, cfg.AlertBacklogAge)
	require.Zero(t, cfg.AlertDeadLetters)
	require.Zero(t, cfg.ResponseHeaderTimeout)
}

// Each bad value is refused with a *ConfigError that names its flag and
// says what to give.
func TestConfigValidateNamesTheBadField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"duplicate window", func(c *Config) { c.DuplicateWindow = 15 * time.Second }, "--duplicate-window 15s must be at least 20s"},
		{"max consumers", func(c *Config) { c.MaxConsumers = 16 }, "--max-consumers 16: give 17 to 1000000"},
		{"tls cert alone", func(c *Config) { c.APIAddr, c.APITLSCert = "127.0.0.1:0", "c.pem" }, "--api-tls-cert and --api-tls-key go together"},
		{"tls without api", func(c *Config) { c.APITLSCert, c.APITLSKey = "c.pem", "k.pem" }, "--api-tls-cert needs --api-addr"},
		{"api max conns", func(c *Config) { c.APIMaxConns = -1 }, "--api-max-conns -1: give 1 to 1000000"},
		{"api idle timeout", func(c *Config) { c.APIIdleTimeout = 2 * time.Hour }, "--api-idle-timeout 2h0m0s: give 1s to 1h"},
		{"api body timeout", func(c *Config) { c.APIBodyTimeout = time.Millisecond }, "--api-body-timeout 1ms: give 1s to 1h"},
		{"backlog age", func(c *Config) { c.AlertBacklogAge = -time.Second }, "--alert-backlog-age -1s"},
		{"dead letters", func(c *Config) { c.AlertDeadLetters = -1 }, "--alert-dead-letters -1"},
		{"response bytes", func(c *Config) { c.LogResponseBytes = 65537 }, "--log-response-bytes 65537: give 0 to 65536"},
		{"attempt retention", func(c *Config) { c.AttemptRetention = time.Second }, "--attempt-retention 1s: give at least 1m"},
		{"attempt max bytes", func(c *Config) { c.AttemptMaxBytes = 1000 }, "--attempt-max-bytes 1000: give at least 1048576"},
		{"ack wait", func(c *Config) { c.AckWait = time.Second }, "--ack-wait 1s: give 3s to 10m"},
		{"max in flight", func(c *Config) { c.MaxInFlight = 100_001 }, "--max-in-flight 100001: give 1 to 100000"},
		{"connect timeout", func(c *Config) { c.ConnectTimeout = -time.Second }, "--connect-timeout -1s: give a positive duration"},
		{"tls handshake", func(c *Config) { c.TLSHandshakeTimeout = time.Hour }, "--tls-handshake-timeout 1h0m0s: give a positive duration, at most 10m"},
		{"response header", func(c *Config) { c.ResponseHeaderTimeout = -time.Second }, "--response-header-timeout -1s"},
		{"event retention", func(c *Config) { c.EventRetention = time.Minute }, "--event-retention 1m0s: give more than --duplicate-window 2m0s"},
		{"dlq retention", func(c *Config) { c.DLQRetention = -time.Second }, "--dlq-retention -1s: give a positive duration"},
		{"replicas", func(c *Config) { c.Replicas = 7 }, "--replicas 7: give 1 to 5"},
		{"shutdown grace", func(c *Config) { c.ShutdownGrace = -time.Second }, "--shutdown-grace -1s"},
		{"max event size", func(c *Config) { c.MaxEventSize = 1 << 30 }, "--max-event-size 1073741824: give 1 to 67108864"},
		{"park threshold", func(c *Config) { c.ParkThreshold = -time.Second }, "--park-threshold -1s: give a positive duration"},
		{"routes", func(c *Config) { c.Routes = []string{"nats://127.0.0.1:6222"} }, "--routes needs --cluster-name"},
		{"listen", func(c *Config) { c.Listen = "4222" }, `--listen "4222": expected HOST:PORT`},
		{"listen port", func(c *Config) { c.Listen = "127.0.0.1:70000" }, `--listen "127.0.0.1:70000": bad port`},
		{"cluster listen", func(c *Config) { c.ClusterName, c.ClusterListen = "c", "x" }, `--listen "x": expected HOST:PORT`},
		{"allow net", func(c *Config) { c.AllowNet = []string{"bad"} }, `--allow-net "bad"`},
		{"egress proxy scheme", func(c *Config) { c.EgressProxy = "socks5://u:hidden@proxy:1080" }, `--egress-proxy: socks5://u:xxxxx@proxy:1080 is not an HTTP proxy's URL`},
		{"egress proxy credentials twice", func(c *Config) { c.EgressProxy, c.EgressProxyAuth = "http://u:p@proxy:3128", "u:p" }, "--egress-proxy has credentials and so has --egress-proxy-auth-file: give them once"},
		{"egress proxy auth", func(c *Config) { c.EgressProxy, c.EgressProxyAuth = "http://proxy:3128", "nocolon" }, "--egress-proxy-auth-file: give one line, user:password"},
		{"no proxy without a proxy", func(c *Config) { c.NoProxy = []string{"dest:x"} }, "--no-proxy names what goes direct rather than through --egress-proxy"},
		{"no proxy entry", func(c *Config) { c.EgressProxy, c.NoProxy = "http://proxy:3128", []string{"dest:a,10.0.0.0/99"} }, `--no-proxy "10.0.0.0/99": not a CIDR range`},
		{"egress ips", func(c *Config) { c.EgressIPs = []string{"203.0.113.300"} }, `--egress-ips "203.0.113.300"`},
		{"short secret key", func(c *Config) { c.SecretKey = []byte("short") }, "the secret key is 5 bytes; use at least 16"},
		{"previous key alone", func(c *Config) { c.PreviousSecretKeys = [][]byte{[]byte("0123456789abcdef")} }, "--previous-secret-key is the old key of a rotation"},
		{"park lease", func(c *Config) { c.RedisURL, c.ParkLease = "redis://127.0.0.1:1", 5*time.Minute }, "--park-lease 5m0s must be shorter than --duplicate-window 2m0s"},
		{"redis mode", func(c *Config) { c.RedisURL, c.RedisMode = "redis://127.0.0.1:1", "ring" }, `--redis-mode "ring": give single, cluster or sentinel`},
		{"redis replicas", func(c *Config) { c.RedisURL, c.RedisReplicas = "redis://127.0.0.1:1", -2 }, "--redis-replicas -2: give 0 or more"},
		{"redis replica wait", func(c *Config) {
			c.RedisURL, c.RedisReplicas, c.RedisReplicaWait = "redis://127.0.0.1:1", 1, 2*time.Second
		}, "--redis-replica-wait 2s: give 1ms to 1s"},
		{"nats twice", func(c *Config) { c.NATSURL, c.JS = "nats://127.0.0.1:4222", streamtest.Start(t).JS }, "give the NATS server once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}.WithDefaults()
			tc.mod(&cfg)
			err := cfg.Validate()
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "want a *ConfigError, got %v", err)
			require.True(t, strings.HasPrefix(err.Error(), tc.want), "got %q, want it to start %q", err, tc.want)
			require.True(t, IsConfigError(err))
		})
	}
}

// Validate reads the listen addresses only where an embedded server is
// started: with a NATS URL they are not used.
func TestConfigValidateIgnoresTheEmbeddedServerWithANATSURL(t *testing.T) {
	t.Parallel()
	cfg := Config{NATSURL: "nats://127.0.0.1:4222", Listen: "nonsense"}.WithDefaults()
	require.NoError(t, cfg.Validate())
}

// AutoRedisReplicas asks for one Redis replica's confirmation with
// sentinel or cluster, none with a single server; a number given is
// taken as it is.
func TestConfigRedisReplicas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		mode string
		want int
	}{
		{AutoRedisReplicas, "single", 0}, {AutoRedisReplicas, "sentinel", 1}, {AutoRedisReplicas, "cluster", 1},
		{0, "sentinel", 0}, {2, "single", 2}, {2, "cluster", 2},
	} {
		cfg := Config{RedisURL: "redis://127.0.0.1:1", RedisMode: tc.mode, RedisReplicas: tc.n}.WithDefaults()
		require.NoError(t, cfg.Validate())
		got, err := cfg.redisReplicas()
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "--redis-replicas %d with %s", tc.n, tc.mode)
	}
	// No replicas: the wait does not matter.
	cfg := Config{RedisURL: "redis://127.0.0.1:1", RedisReplicaWait: time.Hour}.WithDefaults()
	require.NoError(t, cfg.Validate())
}
