package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// noConsumersLeft waits until the events stream has no consumer: Scan
// deletes its current one, and the client the ones before it, in the
// background. Far sooner than the 30s InactiveThreshold.
func noConsumersLeft(t *testing.T, js jetstream.JetStream, after string) {
	t.Helper()
	s, err := js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	var names []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		names = nil
		l := s.ConsumerNames(context.Background())
		for n := range l.Name() {
			names = append(names, n)
		}
		require.NoError(t, l.Err())
		if len(names) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // polling the server's list
	}
	t.Fatalf("%s: consumers left behind after 5s: %v", after, names)
}

func TestScanReadsInOrderAndLeavesNoConsumerBehind(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	for _, d := range []string{"a", "b", "a", "c", "a"} {
		_, err := js.Publish(ctx, InSubject(d, ""), []byte(d))
		require.NoError(t, err)
	}

	var got []string
	require.NoError(t, Scan(ctx, js, EventsStream, []string{InSubject("a", "")}, time.Time{}, func(m jetstream.Msg) error {
		got = append(got, string(m.Data()))
		return nil
	}))
	require.Equal(t, []string{"a", "a", "a"}, got)
	noConsumersLeft(t, js, "after a whole scan")

	// Also when fn stops it early, with an error, or when ctx ends.
	require.NoError(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(jetstream.Msg) error { return ErrStop }))
	noConsumersLeft(t, js, "after ErrStop")
	boom := errors.New("boom")
	require.ErrorIs(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(jetstream.Msg) error { return boom }), boom)
	noConsumersLeft(t, js, "after an error")
	cctx, cancel := context.WithCancel(ctx)
	err := Scan(cctx, js, EventsStream, nil, time.Time{}, func(jetstream.Msg) error { cancel(); return cctx.Err() })
	require.ErrorIs(t, err, context.Canceled)
	noConsumersLeft(t, js, "after its context ended")
}
