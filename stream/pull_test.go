package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// scriptedIter is a MessagesContext whose Next answers from a script and
// records how many options each call had.
type scriptedIter struct {
	jetstream.MessagesContext
	answers []error
	opts    []int
}

func (s *scriptedIter) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	s.opts = append(s.opts, len(opts))
	err := s.answers[0]
	s.answers = s.answers[1:]
	return nil, err
}

// TestNextMsgWaitsShortThenPlainly: short waits first (so that a timed-out
// call re-enters Next and the iterator checks again whether to pull), then
// a plain Next, the only kind during which nats.go watches for missed
// heartbeats. Errors other than the short waits' timeouts are passed on.
func TestNextMsgWaitsShortThenPlainly(t *testing.T) {
	it := &scriptedIter{answers: []error{nats.ErrTimeout, nats.ErrTimeout, nats.ErrTimeout, nil}}
	_, err := NextMsg(it)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1, 1, 0}, it.opts, "calls with NextMaxWait, then one plain call")

	second := &scriptedIter{answers: []error{nats.ErrTimeout, nil}}
	_, err = NextMsg(second)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, second.opts, "a message within the second wait ends it")

	closed := &scriptedIter{answers: []error{jetstream.ErrMsgIteratorClosed}}
	_, err = NextMsg(closed)
	require.ErrorIs(t, err, jetstream.ErrMsgIteratorClosed)
	require.Equal(t, []int{1}, closed.opts)

	late := &scriptedIter{answers: []error{nats.ErrTimeout, nats.ErrTimeout, nats.ErrTimeout, jetstream.ErrNoHeartbeat}}
	_, err = NextMsg(late)
	require.ErrorIs(t, err, jetstream.ErrNoHeartbeat)
}

// TestNextMsgReturnsAMessageThatComesAfterTheShortWait, against a real
// server: a message published well after the short waits is still
// returned, not a timeout.
func TestNextMsgReturnsAMessageThatComesAfterTheShortWait(t *testing.T) {
	js := startJS(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	iter, err := cons.Messages(jetstream.PullMaxMessages(8), jetstream.PullHeartbeat(time.Second))
	require.NoError(t, err)
	defer iter.Stop()

	published := make(chan error, 1)
	go func() {
		time.Sleep(3 * RepullChecks[len(RepullChecks)-1]) // the event comes after the short waits
		_, err := js.Publish(ctx, "t.x", []byte("late"))
		published <- err
	}()
	msg, err := NextMsg(iter)
	require.NoError(t, err)
	require.Equal(t, "late", string(msg.Data()))
	require.NoError(t, <-published)
	require.NoError(t, msg.Ack())
	iter.Stop()
	_, err = NextMsg(iter)
	require.True(t, errors.Is(err, jetstream.ErrMsgIteratorClosed), "got %v", err)
}
