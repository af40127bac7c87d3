package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// A replica announces its address policy; another with a different one is
// refused, one with the same is accepted and records it.
func TestReplicasAgreeOnTheAddressPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	loop := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

	_, ok, err := egress.RecordedPolicy(ctx, js)
	require.NoError(t, err)
	require.False(t, ok, "nothing recorded before a relay starts")
	require.NoError(t, egress.AgreePolicy(ctx, js, loop), "no replica runs: any policy is accepted")

	// The replicas bucket's own watch says when the relay has announced
	// itself (the registry is not relay's to signal from here).
	kv, err := js.KeyValue(ctx, stream.ReplicasBucket)
	require.NoError(t, err)
	announced, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = announced.Stop() }()

	rctx, cancel := context.WithCancel(ctx)
	r, err := New(rctx, Config{JS: js, NetPolicy: &loop, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	select {
	case e := <-announced.Updates():
		require.NotNil(t, e, "the relay announces itself")
	case <-time.After(time.Minute):
		t.Fatal("the relay did not announce itself within a minute")
	}
	keys, err := kv.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1, "the relay announces itself")

	err = egress.AgreePolicy(ctx, js, egress.Policy{})
	var pe *egress.PolicyError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.True(t, pe.Theirs.Equal(loop))
	require.Contains(t, err.Error(), "--allow-net")
	require.Contains(t, err.Error(), "public addresses and 127.0.0.0/8")

	// The same ranges, given another way, agree.
	same := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("127.0.0.0/8")}}
	require.NoError(t, egress.AgreePolicy(ctx, js, same))
	got, ok, err := egress.RecordedPolicy(ctx, js)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, got.Equal(loop), "recorded %v", got)
}
