package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// consumers lists the consumers of the events stream.
func consumers(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	s, err := js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	var names []string
	l := s.ConsumerNames(context.Background())
	for n := range l.Name() {
		names = append(names, n)
	}
	require.NoError(t, l.Err())
	return names
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
	require.Empty(t, consumers(t, js), "the scan's consumer is deleted when it returns")

	// Also when fn stops it early, with an error, or when ctx ends.
	require.NoError(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(jetstream.Msg) error { return ErrStop }))
	require.Empty(t, consumers(t, js), "after ErrStop")
	boom := errors.New("boom")
	require.ErrorIs(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(jetstream.Msg) error { return boom }), boom)
	require.Empty(t, consumers(t, js), "after an error")
	cctx, cancel := context.WithCancel(ctx)
	err := Scan(cctx, js, EventsStream, nil, time.Time{}, func(jetstream.Msg) error { cancel(); return cctx.Err() })
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, consumers(t, js), "after its context ended")
}
