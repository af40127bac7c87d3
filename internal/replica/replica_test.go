package replica

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// stopped replica leaves nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logged is the first submatch of re in log, or fails the test.
func logged(t *testing.T, log *syncLog, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(log.String())
	require.NotNil(t, m, "no %s in the log:\n%s", re, log)
	return m[1]
}

// A replica of an embedded server starts everything 'relay run' starts:
// the server, the metrics server (ready once the engine runs), the API,
// and the engine, which delivers; once its context ends, Run stops it all
// and returns nil.
func TestReplicaDeliversAndStops(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case got <- string(body):
		default:
		}
	}))
	defer sink.Close()
	logs := &syncLog{}
	delivered := make(chan relay.Outcome, 1)
	r, err := New(Config{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		MetricsAddr: "127.0.0.1:0", APIAddr: "127.0.0.1:0", AllowNet: []string{"127.0.0.0/8"},
		Engine: func(c *relay.Config) {
			c.OnDelivery = func(o relay.Outcome) {
				select {
				case delivered <- o:
				default:
				}
			}
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, r.Start(ctx))
	done := make(chan error, 1)
	go func() {
		<-ctx.Done()
		done <- r.Stop()
	}()

	metrics := logged(t, logs, `msg="serving /metrics, /healthz and /readyz" addr=(\S+)`)
	apiURL := logged(t, logs, `msg="serving the HTTP API, the dashboard and the customer portal" url=(\S+)`)
	natsURL := logged(t, logs, `msg="embedded NATS started" url=(\S+)`)
	require.Contains(t, logs.String(), "address policy: deliveries may reach these non-public ranges")

	// Ready once the engine runs: poll with a deadline.
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := http.Get("http://" + metrics + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "/readyz not ready within a minute (last: %v)\n%s", err, logs)
		time.Sleep(50 * time.Millisecond)
	}
	res, err := http.Get(apiURL + "/openapi.json")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, err = http.Get("http://" + metrics + "/debug/pprof/goroutine")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "--pprof auto serves profiles on a loopback --metrics-addr")

	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := destination.NewStore(ctx, js, destination.AllowStoringInClear())
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "orders", URL: sink.URL})
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	_, err = prod.Publish(ctx, publish.Event{Dest: "orders", ID: "evt-1", Data: []byte(`{"n":1}`)})
	require.NoError(t, err)
	select {
	case body := <-got:
		require.Equal(t, `{"n":1}`, body)
	case <-time.After(time.Minute):
		t.Fatalf("not delivered within a minute:\n%s", logs)
	}
	select {
	case o := <-delivered:
		require.Equal(t, "evt-1", o.EventID, "the Engine hook's OnDelivery saw the attempt")
	case <-time.After(time.Minute):
		t.Fatal("OnDelivery was not called")
	}
	nc.Close()

	cancel()
	require.NoError(t, <-done)
	require.NoError(t, r.Stop(), "a second Stop returns the same")
	_, err = http.Get("http://" + metrics + "/readyz")
	require.Error(t, err, "the metrics server stopped")
}

// A replica whose API would be open to the network with no API key
// refuses to start with a *ConfigError, and stops what it had started.
func TestReplicaRefusesAPublicAPIWithoutKeys(t *testing.T) {
	t.Parallel()
	r, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DataDir: t.TempDir(), Listen: "127.0.0.1:0", APIAddr: "0.0.0.0:0"})
	require.NoError(t, err)
	err = r.Run(context.Background())
	require.True(t, IsConfigError(err), "got %v", err)
	require.Contains(t, err.Error(), "is not a loopback address and no API key exists")
}

// Stopped while its embedded server starts, a replica's Run returns nil:
// a stop, not a failure.
func TestReplicaStoppedWhileStarting(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	r, err := New(Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, r.Run(ctx))
	require.Contains(t, logs.String(), "stopped before relay started")
}

// New refuses a bad Config with Validate's error.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := New(Config{MaxInFlight: -1})
	require.True(t, IsConfigError(err), "got %v", err)
	require.Contains(t, err.Error(), "--max-in-flight -1: give 1 to 100000")
}

// --pprof auto serves profiles only on a loopback address: a --metrics-addr
// open to the network (the image's, the chart's) does not show goroutine
// stacks and memory to whoever reaches it.
func TestProfilesOnlyWhereNoOneElseReaches(t *testing.T) {
	t.Parallel()
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, c := range []struct {
		mode, addr string
		want       bool
	}{
		{"auto", "127.0.0.1:9464", true},
		{"auto", "[::1]:9464", true},
		{"auto", "0.0.0.0:9464", false},
		{"auto", "10.1.2.3:9464", false},
		{"on", "0.0.0.0:9464", true},
		{"off", "127.0.0.1:9464", false},
	} {
		require.Equal(t, c.want, servesProfiles(c.mode, tcp(c.addr)), "--pprof %s on %s", c.mode, c.addr)
	}
	for _, profiles := range []bool{false, true} {
		srv := httptest.NewServer(relay.OpsHandler(prometheus.NewRegistry(), func(context.Context) error { return nil }, profiles))
		res, err := http.Get(srv.URL + "/debug/pprof/goroutine")
		require.NoError(t, err)
		res.Body.Close()
		want := http.StatusNotFound
		if profiles {
			want = http.StatusOK
		}
		require.Equal(t, want, res.StatusCode, "profiles %v", profiles)
		srv.Close()
	}
}
