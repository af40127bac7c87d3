package replica

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress/proxytest"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
)

// metric is the value of an unlabelled series on a /metrics page.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	page, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(page)
	require.NotNil(t, m, "%s not on /metrics", name)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// A replica with --egress-proxy delivers through it, the proxy asked only
// for a tunnel to the address relay vetted. While the proxy is down,
// events wait for it: counted in a metric, logged, never charged to the
// destination (the delivery once it is back is attempt 1).
func TestReplicaDeliversThroughTheEgressProxy(t *testing.T) {
	t.Parallel()
	got := make(chan string, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Host }))
	defer sink.Close()
	_, sinkPort, _ := net.SplitHostPort(sink.Listener.Addr().String())
	tp := proxytest.Start(t, proxytest.Options{User: "relay", Password: "pr0xy-s3cret"})
	tp.Stop() // down at first

	logs := &syncLog{}
	delivered := make(chan relay.Outcome, 4)
	r, err := New(Config{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		MetricsAddr: "127.0.0.1:0", AllowNet: []string{"127.0.0.0/8"},
		EgressProxy: tp.URL(), EgressIPs: []string{"203.0.113.7"},
		Engine: func(c *relay.Config) { c.OnDelivery = func(o relay.Outcome) { delivered <- o } },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, r.Start(ctx))
	defer r.Stop()
	metrics := logged(t, logs, `msg="serving /metrics, /healthz and /readyz" addr=(\S+)`)
	natsURL := logged(t, logs, `msg="embedded NATS started" url=(\S+)`)
	require.Contains(t, logs.String(), `proxy=http://relay:xxxxx@`+tp.Addr)

	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := destination.NewStore(ctx, js, destination.AllowStoringInClear())
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "orders", URL: sink.URL, Retry: destination.RetryPolicy{MaxAttempts: 1}})
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	_, err = prod.Publish(ctx, publish.Event{Dest: "orders", ID: "evt-1", Data: []byte(`{"n":1}`)})
	require.NoError(t, err)

	// The proxy is down: the event waits, and the failures are counted.
	deadline := time.Now().Add(time.Minute)
	for metric(t, metrics, "relay_egress_proxy_failures_total") < 2 {
		require.True(t, time.Now().Before(deadline), "no proxy failure counted within a minute:\n%s", logs)
		time.Sleep(100 * time.Millisecond)
	}
	require.Empty(t, delivered, "a proxy failure is no attempt")
	require.Contains(t, logs.String(), "egress proxy failing: deliveries wait for it, no attempt used")
	require.NotContains(t, logs.String(), "pr0xy-s3cret", "the proxy's credentials are never printed")

	tp.Start()
	select {
	case host := <-got:
		require.Equal(t, "127.0.0.1:"+sinkPort, host)
	case <-time.After(time.Minute):
		t.Fatalf("not delivered within a minute of the proxy's start:\n%s", logs)
	}
	o := <-delivered
	require.Equal(t, relay.Ack, o.Decision.Action)
	require.Equal(t, 1, o.Attempt, "the destination allows one attempt, and the proxy's failures used none")
	require.Equal(t, []string{"CONNECT 127.0.0.1:" + sinkPort}, tp.Requests())
}

// The end to end: a delivery through a real proxy on loopback
// carries a v1a signature that an independent verifier (Node's crypto)
// accepts with the key it fetched from relay's JWKS; a tampered body it
// refuses.
func TestV1aThroughTheProxyVerifiesWithTheJWKS(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed: the v1a cross-check needs an independent Ed25519 verifier (apt-get install -y nodejs)")
	}
	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), body}
	}))
	defer sink.Close()
	_, sinkPort, _ := net.SplitHostPort(sink.Listener.Addr().String())
	tp := proxytest.Start(t, proxytest.Options{})

	logs := &syncLog{}
	r, err := New(Config{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		APIAddr: "127.0.0.1:0", AllowNet: []string{"127.0.0.0/8"}, EgressProxy: tp.URL(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, r.Start(ctx))
	defer r.Stop()
	apiURL := logged(t, logs, `msg="serving the HTTP API, the dashboard and the customer portal" url=(\S+)`)
	natsURL := logged(t, logs, `msg="embedded NATS started" url=(\S+)`)

	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := destination.NewStore(ctx, js, destination.AllowStoringInClear())
	require.NoError(t, err)
	d, _, err := destination.Settings{URLs: []string{sink.URL + "/hooks"}, Signature: new(destination.SignatureEd25519)}.NewDestination("edge")
	require.NoError(t, err)
	_, err = st.Add(ctx, d)
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	_, err = prod.Publish(ctx, publish.Event{Dest: "edge", ID: "evt-v1a", Data: []byte(`{"order":42,"note":"ünïcode"}`)})
	require.NoError(t, err)
	var dl delivery
	select {
	case dl = <-got:
	case <-time.After(time.Minute):
		t.Fatalf("not delivered within a minute:\n%s", logs)
	}
	require.Equal(t, []string{"CONNECT 127.0.0.1:" + sinkPort}, tp.Requests(), "delivered through the proxy")
	sig := dl.header.Get("Webhook-Signature")
	require.True(t, strings.HasPrefix(sig, "v1a,"), sig)

	// The receiver's side: the JWKS, fetched without a key.
	res, err := http.Get(strings.TrimSuffix(apiURL, "/v1") + "/v1/jwks.json")
	require.NoError(t, err)
	jwks, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", jwks)

	script := filepath.Join(t.TempDir(), "verify.js")
	require.NoError(t, os.WriteFile(script, []byte(`
const crypto = require("crypto");
const e = process.env;
const set = JSON.parse(e.JWKS);
const signed = Buffer.concat([Buffer.from(e.ID + "." + e.TS + "."), Buffer.from(e.BODY, "base64")]);
const ok = e.SIG.split(" ").some((s) => s.startsWith("v1a,") && set.keys.some((jwk) =>
  crypto.verify(null, signed, crypto.createPublicKey({key: jwk, format: "jwk"}), Buffer.from(s.slice(4), "base64"))));
process.stdout.write(ok ? "ok" : "invalid");
`), 0o644))
	verify := func(body []byte) string {
		cmd := exec.Command("node", script)
		cmd.Env = append(os.Environ(), "JWKS="+string(jwks), "ID="+dl.header.Get("Webhook-Id"), "TS="+dl.header.Get("Webhook-Timestamp"),
			"SIG="+sig, "BODY="+base64.StdEncoding.EncodeToString(body))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	require.Equal(t, "ok", verify(dl.body), "Node verifies relay's v1a with the JWKS's key")
	require.Equal(t, "invalid", verify(append(dl.body, ' ')), "and refuses a tampered body")
}
