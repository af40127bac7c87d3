package stream

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/stream/embedded"
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
	nc := startJS(t).Conn()
	it := &scriptedIter{answers: []error{nats.ErrTimeout, nats.ErrTimeout, nats.ErrTimeout, nil}}
	_, err := NextMsg(context.Background(), it, nc)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1, 1, 0}, it.opts, "calls with NextMaxWait, then one plain call")

	second := &scriptedIter{answers: []error{nats.ErrTimeout, nil}}
	_, err = NextMsg(context.Background(), second, nc)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, second.opts, "a message within the second wait ends it")

	closed := &scriptedIter{answers: []error{jetstream.ErrMsgIteratorClosed}}
	_, err = NextMsg(context.Background(), closed, nc)
	require.ErrorIs(t, err, jetstream.ErrMsgIteratorClosed)
	require.Equal(t, []int{1}, closed.opts)

	late := &scriptedIter{answers: []error{nats.ErrTimeout, nats.ErrTimeout, nats.ErrTimeout, jetstream.ErrNoHeartbeat}}
	_, err = NextMsg(context.Background(), late, nc)
	require.ErrorIs(t, err, jetstream.ErrNoHeartbeat)
}

// pullIter is a pull iterator on a durable consumer of a new stream T
// (subjects t.>), stopped when the test ends.
func pullIter(t *testing.T) (jetstream.JetStream, jetstream.MessagesContext) {
	t.Helper()
	js := startJS(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	iter, err := cons.Messages(jetstream.PullMaxMessages(8), jetstream.PullHeartbeat(time.Second))
	require.NoError(t, err)
	t.Cleanup(iter.Stop)
	return js, iter
}

// TestNextMsgReturnsAMessageThatComesAfterTheShortWait, against a real
// server: a message published well after the short waits is still
// returned, not a timeout.
func TestNextMsgReturnsAMessageThatComesAfterTheShortWait(t *testing.T) {
	js, iter := pullIter(t)
	ctx := context.Background()

	published := make(chan error, 1)
	go func() {
		time.Sleep(3 * repullChecks[len(repullChecks)-1]) // the event comes after the short waits
		_, err := js.Publish(ctx, "t.x", []byte("late"))
		published <- err
	}()
	msg, err := NextMsg(context.Background(), iter, js.Conn())
	require.NoError(t, err)
	require.Equal(t, "late", string(msg.Data()))
	require.NoError(t, <-published)
	require.NoError(t, msg.Ack())
	iter.Stop()
	_, err = NextMsg(context.Background(), iter, js.Conn())
	require.True(t, errors.Is(err, jetstream.ErrMsgIteratorClosed), "got %v", err)
}

// NextMsg's last, unbounded wait ends with its context: a caller that cannot
// count on iter.Stop() reaching the iterator (an ordered consumer's reset
// replaces it) still gets out.
func TestNextMsgEndsWithItsContext(t *testing.T) {
	js, iter := pullIter(t)
	ctx := context.Background()

	cctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := NextMsg(cctx, iter, js.Conn())
		got <- err
	}()
	// Cancel once the short waits are over, while the last wait runs (if
	// it lands earlier, the last wait starts cancelled: the same outcome).
	time.AfterFunc(4*repullChecks[len(repullChecks)-1], cancel)
	select {
	case err := <-got:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("NextMsg did not return when its context ended")
	}
}

// TestNextMsgRidesOutAnOutageQuietly: while the connection is down, NextMsg
// must not start plain Next calls, whose heartbeat timer nothing stops then:
// it would report a missed heartbeat every two heartbeats, and each report
// queues another pull request for the reconnect. After a 3s outage (six
// heartbeats of 500ms), the iterator has reported nothing, the server holds
// one pull request, and events flow again.
func TestNextMsgRidesOutAnOutageQuietly(t *testing.T) {
	ctx := context.Background()
	cfg := embedded.Config{DataDir: t.TempDir(), Port: -1}
	s, err := embedded.Start(cfg)
	require.NoError(t, err)
	cfg.Port = s.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	require.NoError(t, err)
	iter, err := cons.Messages(jetstream.PullMaxMessages(4), jetstream.PullExpiry(20*time.Second), jetstream.PullHeartbeat(500*time.Millisecond))
	require.NoError(t, err)

	got := make(chan string, 100)
	errs := make(chan error, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := NextMsg(context.Background(), iter, nc)
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			if err != nil {
				errs <- err
				continue
			}
			_ = m.Ack()
			got <- string(m.Data())
		}
	}()
	t.Cleanup(func() { iter.Stop(); <-done })

	_, err = js.Publish(ctx, "t.x", []byte("before"))
	require.NoError(t, err)
	require.Equal(t, "before", <-got)

	s.Shutdown()
	s.WaitForShutdown()
	time.Sleep(3 * time.Second) // the outage
	s, err = embedded.Start(cfg)
	require.NoError(t, err)
	require.Eventually(t, nc.IsConnected, 10*time.Second, 10*time.Millisecond)
	// The iterator's pull request reaches the new server after the reconnect.
	var waiting int
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		if err != nil {
			return false
		}
		waiting = info.NumWaiting
		return waiting > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, waiting, "one pull request after the outage, not one per missed heartbeat")
	select {
	case err := <-errs:
		t.Fatalf("NextMsg reported %v during or after the outage", err)
	default:
	}

	for i := range 10 {
		_, err := js.Publish(ctx, "t.x", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	for i := range 10 {
		select {
		case m := <-got:
			require.Equal(t, strconv.Itoa(i), m)
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d not delivered after the outage", i)
		}
	}
}
