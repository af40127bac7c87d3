package relay

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
	"github.com/stretchr/testify/require"
)

// A consumer the server refuses at run time for the stream's limit (other
// consumers took the room, or two adds raced for the last of it) is logged
// at ERROR with the destination's name, makes relay not ready (Serving),
// and is created once room is freed.
func TestRunReportsADestinationOverTheConsumerLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := capacityTestLimit(t, 2)
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "late", URL: "https://example.test/late"})
	require.NoError(t, err)
	// Others' consumers fill the stream.
	for i := range stream.ReservedConsumers + 2 {
		_, err := js.CreateConsumer(ctx, stream.EventsStream, jetstream.ConsumerConfig{Durable: fmt.Sprintf("other%d", i), FilterSubject: stream.InSubject(fmt.Sprintf("other%d", i), "")})
		require.NoError(t, err)
	}

	var logs lockedBuffer
	rctx, cancel := context.WithCancel(ctx)
	r, err := New(rctx, Config{JS: js, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.ErrorContains(t, r.Serving(), "starting")
	r.signals.Init(t)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	r.signals.Running.WaitOrTimeout()

	line := logs.lineWith("consumer limit")
	require.Contains(t, line, "level=ERROR")
	require.Contains(t, line, "dest=late")
	require.Contains(t, line, "maximum consumers limit reached")
	err = r.Serving()
	require.ErrorIs(t, err, destination.ErrNoConsumerRoom)
	require.ErrorContains(t, err, "1 destinations are not consumed")
	require.ErrorContains(t, err, ": late")

	// Room for the router, the unknown-destination check and late.
	for i := range 3 {
		require.NoError(t, js.DeleteConsumer(ctx, stream.EventsStream, fmt.Sprintf("other%d", i)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.Serving() != nil {
		require.True(t, time.Now().Before(deadline), "late never got its consumer: %v", r.Serving())
		time.Sleep(50 * time.Millisecond)
	}
	_, err = js.Consumer(ctx, stream.EventsStream, destination.ConsumerName("late"))
	require.NoError(t, err)
}

// capacityTestLimit is a JetStream whose events stream has room for room
// destination consumers.
func capacityTestLimit(t *testing.T, room int) jetstream.JetStream {
	t.Helper()
	js := streamtest.Start(t).JS
	require.NoError(t, stream.Ensure(context.Background(), js, stream.Config{MaxConsumers: stream.ReservedConsumers + room}))
	return js
}
