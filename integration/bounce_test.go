package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// The whole 3-node cluster is stopped and started again, over and over, for
// 60 seconds while events are published and delivered: nothing published
// is lost, order holds per key, and the relays recover by themselves.
func TestFaultClusterBouncedRepeatedly(t *testing.T) {
	t.Parallel()
	c, js, st, prod := startClusterClient(t)
	ctx := context.Background()

	const keys = 10
	o := newOrderSink(t, 0)
	_, err := st.Add(ctx, destination.Destination{Name: "bounce", URL: o.URL, Ordered: true, Partitions: 4, Timeout: destination.Duration(500 * time.Millisecond),
		Retry: destination.RetryPolicy{Base: destination.Duration(50 * time.Millisecond), Max: destination.Duration(500 * time.Millisecond), MaxAttempts: 20}})
	require.NoError(t, err)
	for range 2 {
		// AckWait 6s, as in TestClusterNodeRestartKeepsOrderAndLosesNothing.
		p := startProc(t, "--nats-url", c.urls(), "run", "--replicas", "3", "--ack-wait", "6s")
		eventually(t, 30*time.Second, func() bool { return p.logged("relay running") }, "replica up")
	}

	// Publish in rounds, each event retried with its id until JetStream
	// confirms it.
	n := 0
	publishRound := func() {
		for k := range keys {
			publishThrough(t, prod, "bounce", k, n, 60*time.Second)
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
	// Read the dead-letter count from stream info, retrying: right after the
	// bounces the cluster may still be moving stream leaders.
	eventually(t, 30*time.Second, func() bool {
		dl, err := js.Stream(ctx, stream.DLQStream)
		return err == nil && dl.CachedInfo().State.Msgs == 0
	}, "no dead letters")
}
