package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// The whole 3-node cluster is stopped and started again, over and over, for
// 60 seconds while events are published and delivered: nothing published
// is lost, order holds per key, and the relays recover by themselves.
func TestFaultClusterBouncedRepeatedly(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	nc, err := nats.Connect(c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	eventually(t, 30*time.Second, func() bool { return stream.Ensure(ctx, js, stream.Config{Replicas: 3}) == nil }, "streams created")
	st, err := relay.NewStore(ctx, js)
	require.NoError(t, err)
	prod, err := relay.NewProducer(ctx, js)
	require.NoError(t, err)

	const keys = 10
	o := newOrderSink(t, 0)
	_, err = st.Add(ctx, relay.Destination{Name: "bounce", URL: o.URL, Ordered: true, Partitions: 4, Timeout: relay.Duration(500 * time.Millisecond),
		Retry: relay.RetryPolicy{Base: relay.Duration(50 * time.Millisecond), Max: relay.Duration(500 * time.Millisecond), MaxAttempts: 20}})
	require.NoError(t, err)
	for range 2 {
		p := startProc(t, "--nats-url", c.urls(), "run", "--replicas", "3")
		eventually(t, 30*time.Second, func() bool { return p.logged("relay running") }, "replica up")
	}

	// Publish in rounds; each event is retried with its id until JetStream
	// confirms it (a retry of a stored one is dropped as a duplicate).
	n := 0
	publishRound := func() {
		for k := range keys {
			ev := relay.Event{Dest: "bounce", Key: fmt.Sprintf("key-%d", k), ID: fmt.Sprintf("b-%d-%d", k, n), Data: fmt.Appendf(nil, `{"k":"key-%d","n":%d}`, k, n)}
			eventually(t, 60*time.Second, func() bool {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := prod.Publish(pctx, ev)
				return err == nil
			}, "publish %s", ev.ID)
		}
		n++
	}
	end := time.Now().Add(60 * time.Second)
	bounces := 0
	for time.Now().Before(end) {
		for range 5 {
			publishRound()
		}
		// Stop every node, then start them all again on the same ports
		// and data directories.
		for i := range 3 {
			c.stop(i)
		}
		for i := range 3 {
			c.start(i)
		}
		bounces++
	}
	for range 5 {
		publishRound()
	}
	t.Logf("%d bounces, %d events per key", bounces, n)
	eventually(t, 3*time.Minute, func() bool { return o.complete(keys, n) }, "every key complete (accepted %d of %d)", o.acceptedCount(), keys*n)
	dups := o.check(t, keys, n)
	t.Logf("%d repeats (at-least-once)", dups)
	require.Empty(t, deadLettersIn(t, js, "bounce"))
}
