package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
	"github.com/relaydev/relay/stream/streamtest"
)

// cluster is a 3-node JetStream cluster of embedded servers on loopback.
type cluster struct {
	t       *testing.T
	cfgs    []embedded.Config
	servers []*server.Server
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t}
	cports := []int{streamtest.Port(t), streamtest.Port(t), streamtest.Port(t)}
	var routes []string
	for _, p := range cports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := range 3 {
		c.cfgs = append(c.cfgs, embedded.Config{
			Name: fmt.Sprintf("n%d", i), DataDir: t.TempDir(), Port: streamtest.Port(t),
			ClusterName: "relay-test", ClusterPort: cports[i], Routes: routes,
		})
	}
	c.servers = make([]*server.Server, 3)
	for i := range 3 {
		c.start(i)
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			if s != nil {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	return c
}

func (c *cluster) start(i int) {
	c.t.Helper()
	s, err := embedded.Start(c.cfgs[i])
	require.NoError(c.t, err)
	c.servers[i] = s
}

func (c *cluster) stop(i int) {
	c.servers[i].Shutdown()
	c.servers[i].WaitForShutdown()
	c.servers[i] = nil
}

func (c *cluster) urls() string {
	var u []string
	for _, cfg := range c.cfgs {
		u = append(u, fmt.Sprintf("nats://127.0.0.1:%d", cfg.Port))
	}
	return strings.Join(u, ",")
}

// startClusterClient starts a 3-node cluster, connects to it, and sets up
// relay's streams with 3 replicas once the cluster has a leader.
func startClusterClient(t *testing.T) (*cluster, jetstream.JetStream, *destination.Store, *publish.Producer) {
	t.Helper()
	c := startCluster(t)
	nc, err := nats.Connect(c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	eventually(t, 30*time.Second, func() bool {
		return stream.Ensure(ctx, js, stream.Config{Replicas: 3}) == nil
	}, "streams created once the cluster has a leader")
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	return c, js, st, prod
}

// publishThrough publishes event n of key k for dest with a stable id,
// retrying through node outages: a retry of a publish that was stored is
// dropped as a duplicate.
func publishThrough(t *testing.T, prod *publish.Producer, dest string, k, n int, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	ev := publish.Event{Dest: dest, Key: fmt.Sprintf("key-%d", k), ID: fmt.Sprintf("%s-%d-%d", dest, k, n), Data: fmt.Appendf(nil, `{"k":"key-%d","n":%d}`, k, n)}
	eventually(t, within, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := prod.Publish(pctx, ev)
		return err == nil
	}, "publish %s", ev.ID)
}

// A 3-node cluster with R3 streams: two relay replicas keep order and lose
// nothing while one node is stopped and restarted mid-run.
func TestClusterNodeRestartKeepsOrderAndLosesNothing(t *testing.T) {
	t.Parallel()
	c, js, st, prod := startClusterClient(t)
	ctx := context.Background()

	const keys, perKey = 20, 50
	o := newOrderSink(t, 0.1)
	_, err := st.Add(ctx, destination.Destination{Name: "clu", URL: o.URL, Ordered: true, Partitions: 8, Timeout: destination.Duration(500 * time.Millisecond),
		Retry: destination.RetryPolicy{Base: destination.Duration(20 * time.Millisecond), Max: destination.Duration(200 * time.Millisecond), MaxAttempts: 10}})
	require.NoError(t, err)
	for range 2 {
		// AckWait 6s: heads whose acks the restart lost come back soon.
		p := startProc(t, "--nats-url", c.urls(), "run", "--replicas", "3", "--ack-wait", "6s")
		eventually(t, 30*time.Second, func() bool { return p.logged("relay running") }, "replica up")
	}

	publish := func(k, n int) { publishThrough(t, prod, "clu", k, n, 30*time.Second) }
	for n := range perKey / 2 {
		for k := range keys {
			publish(k, n)
		}
	}
	eventually(t, 60*time.Second, func() bool { return o.acceptedCount() >= keys*perKey/4 }, "a quarter delivered")
	c.stop(1)
	for n := perKey / 2; n < perKey; n++ {
		for k := range keys {
			publish(k, n)
		}
	}
	// Events published after the stop, accepted while the node is down.
	// (Not a count above the total at this point: relay may have delivered
	// nearly all by the time a loaded machine has published the rest.)
	eventually(t, 2*time.Minute, func() bool { return o.acceptedFrom(perKey/2) >= keys*perKey/10 }, "deliveries go on with a node down")
	c.start(1)
	eventually(t, 3*time.Minute, func() bool { return o.complete(keys, perKey) }, "every key complete (accepted %d)", o.acceptedCount())
	o.check(t, keys, perKey)
	require.Empty(t, deadLettersIn(t, js, "clu"))
}
