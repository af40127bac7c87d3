package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// ackMsg is a delivered event whose acks succeed or fail as told, and which
// records what relay did with it.
type ackMsg struct {
	jetstream.Msg
	doubleAckErr error
	acked        []string
}

func (m *ackMsg) Ack() error { m.acked = append(m.acked, "ack"); return nil }
func (m *ackMsg) DoubleAck(context.Context) error {
	m.acked = append(m.acked, "double-ack")
	return m.doubleAckErr
}
func (m *ackMsg) HandBack(bool) error { m.acked = append(m.acked, "hand-back"); return nil }

// settles is m as relay settles it.
func settles[M jsMessage](m M) delivered { return jsMsg[M]{m} }

// TestRetriedEventKeepsItsHistoryUntilItsAckIsConfirmed: a retried event's
// attempt history is deleted only once JetStream confirmed its ack. If the
// ack is lost, the event comes back, and its history must still say which
// attempt it is on (else its attempt count would start again at 1).
func TestRetriedEventKeepsItsHistoryUntilItsAckIsConfirmed(t *testing.T) {
	ctx := context.Background()
	r, err := New(ctx, Config{JS: streamtest.Start(t).JS})
	require.NoError(t, err)

	ev := event{dest: "orders", id: "evt_1", seq: 7}
	r.recordAttempt(ctx, ev, 1, Result{Status: 503}, "")
	_, err = r.attempts.Get(ctx, historyKey(ev))
	require.NoError(t, err, "the failed first attempt is recorded")

	// Attempt 2 succeeds, but the ack's confirmation never comes.
	lost := &ackMsg{doubleAckErr: nats.ErrTimeout}
	err = act(t, r, ctx, settles(lost), ev, 2, nil, &Outcome{Decision: Decision{Action: Ack}})
	require.ErrorIs(t, err, nats.ErrTimeout)
	require.Equal(t, []string{"double-ack"}, lost.acked, "a retried event's ack is confirmed, not fire-and-forget")
	_, err = r.attempts.Get(ctx, historyKey(ev))
	require.NoError(t, err, "the history survives an unconfirmed ack")
	require.Equal(t, 1, r.attemptLog(ctx, ev).Made)

	// The redelivery succeeds and its ack is confirmed: now it goes.
	ok := &ackMsg{}
	require.NoError(t, act(t, r, ctx, settles(ok), ev, 2, nil, &Outcome{Decision: Decision{Action: Ack}}))
	_, err = r.attempts.Get(ctx, historyKey(ev))
	require.True(t, errors.Is(err, jetstream.ErrKeyNotFound), "history deleted after the confirmed ack, got %v", err)

	// A first attempt on the hot path is acked without waiting for a
	// confirmation.
	first := &ackMsg{}
	require.NoError(t, act(t, r, ctx, settles(first), event{dest: "orders", id: "evt_2", seq: 8}, 1, nil, &Outcome{Decision: Decision{Action: Ack}}))
	require.Equal(t, []string{"ack"}, first.acked)
}

// The head of an ordered key is acked once its partition's mark is
// confirmed: the mark answers for the ack, so the ack needs no confirmation.
// Another replica that gets the event again (its ack lost) sees it settled,
// from the bucket, once it reads the mark again; where the mark cannot be
// written, the ack is confirmed instead.
func TestOrderedHeadIsAckedOnceItsMarkIsConfirmed(t *testing.T) {
	ctx := context.Background()
	srv := streamtest.Start(t)
	r, err := New(ctx, Config{JS: srv.JS})
	require.NoError(t, err)
	nc := srv.JS.Conn()

	other := newPartitionMark(r.ordered, nc, "orders", 0)
	settled, err := other.settled(ctx, 5, false)
	require.NoError(t, err)
	require.False(t, settled, "nothing settled yet")

	mark := newPartitionMark(r.ordered, nc, "orders", 0)
	head := &ackMsg{}
	require.NoError(t, act(t, r, ctx, settles(head), event{dest: "orders", id: "evt_1", seq: 7}, 1, mark, &Outcome{Decision: Decision{Action: Ack}}))
	require.Equal(t, []string{"ack"}, head.acked, "the mark was confirmed: a plain ack")
	e, err := r.ordered.Get(ctx, "orders.0")
	require.NoError(t, err)
	require.Equal(t, "7", string(e.Value()))

	settled, err = other.settled(ctx, 7, false)
	require.NoError(t, err)
	require.False(t, settled, "without a reason to, a replica does not read the mark again")
	settled, err = other.settled(ctx, 7, true)
	require.NoError(t, err)
	require.True(t, settled, "a redelivery reads the mark again: settled by the other replica")
	settled, err = newPartitionMark(r.ordered, nc, "orders", 0).settled(ctx, 8, false)
	require.NoError(t, err)
	require.False(t, settled, "a later event is not settled")
	settled, err = newPartitionMark(r.ordered, nc, "orders", 1).settled(ctx, 7, false)
	require.NoError(t, err)
	require.False(t, settled, "each partition has its own mark")

	// A replica behind (paused past AckWait, the partition moved on)
	// settling an earlier head does not move the mark back; one that
	// knew an old revision still moves it forward.
	require.NoError(t, mark.settle(ctx, 12))
	require.NoError(t, other.settle(ctx, 9))
	e, err = r.ordered.Get(ctx, "orders.0")
	require.NoError(t, err)
	require.Equal(t, "12", string(e.Value()), "the mark does not move back")
	require.NoError(t, other.settle(ctx, 13))
	e, err = r.ordered.Get(ctx, "orders.0")
	require.NoError(t, err)
	require.Equal(t, "13", string(e.Value()))
	require.NoError(t, mark.settle(ctx, 14), "after another replica wrote it")
	require.NoError(t, r.ordered.Delete(ctx, "orders.0"))
	require.NoError(t, other.settle(ctx, 15), "after it was deleted")
	e, err = r.ordered.Get(ctx, "orders.0")
	require.NoError(t, err)
	require.Equal(t, "15", string(e.Value()))

	require.NoError(t, srv.JS.DeleteKeyValue(ctx, r.ordered.Bucket()))
	unmarked := &ackMsg{}
	require.NoError(t, act(t, r, ctx, settles(unmarked), event{dest: "orders", id: "evt_2", seq: 8}, 1, mark, &Outcome{Decision: Decision{Action: Ack}}))
	require.Equal(t, []string{"double-ack"}, unmarked.acked, "without its mark, the ack is confirmed")
}

// After a crash of the NATS server's process, an ordered partition's
// consumer may wait for the ack of a head that was settled before the
// crash. At worker start relay acks it when the mark says so, and the next
// event comes at once rather than after AckWait; a head the mark does not
// cover is left alone.
func TestSettledHeadTheConsumerWaitsForIsAcked(t *testing.T) {
	ctx := context.Background()
	srv := streamtest.Start(t)
	js := srv.JS
	r, err := New(ctx, Config{JS: js})
	require.NoError(t, err)
	r.signals.Init(t)
	subj := stream.DestFilters("ord")[0]
	cfg := jetstream.ConsumerConfig{Durable: "headtest", FilterSubject: subj, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour, MaxAckPending: 1}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream.EventsStream, cfg)
	require.NoError(t, err)
	for i := range 2 {
		_, err := js.Publish(ctx, subj, []byte{byte('a' + i)})
		require.NoError(t, err)
	}
	// The head is handed out and never acked (its ack lost in a crash).
	// Fetch, not FetchNoWait: on a busy machine the consumer may not have
	// noticed the new messages yet when a no-wait request comes.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Minute))
	require.NoError(t, err)
	var head jetstream.Msg
	for m := range batch.Messages() {
		head = m
	}
	require.NotNil(t, head)
	md, err := head.Metadata()
	require.NoError(t, err)

	mark := newPartitionMark(r.ordered, js.Conn(), "ord", 0)
	restarted := func() jetstream.Consumer { // as a worker starting sees it
		c, err := js.CreateOrUpdateConsumer(ctx, stream.EventsStream, cfg)
		require.NoError(t, err)
		return c
	}
	r.ackSettledHead(restarted(), mark)
	require.NoError(t, js.Conn().Flush())
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, info.NumAckPending, "a head the mark does not cover stays out")
	r.signals.SettledHeadAcked.RequireEmpty()

	require.NoError(t, mark.settle(ctx, md.Sequence.Stream))
	r.ackSettledHead(restarted(), mark)
	require.Equal(t, md.Sequence.Stream, r.signals.SettledHeadAcked.WaitOrTimeout(), "the settled head is acked")
	// With MaxAckPending 1 the next event is handed out only once the
	// server has taken the head's ack.
	next, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Minute))
	require.NoError(t, err)
	var got []byte
	for m := range next.Messages() {
		got = m.Data()
	}
	require.Equal(t, []byte("b"), got, "the next event comes at once")
	info, err = cons.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, md.Sequence.Stream, info.AckFloor.Stream, "the settled head is acked")
}

// An event too large to come back from Redis with the headers of its copy
// is not parked: the promoter could never republish it. It waits in
// JetStream instead.
func TestEventTooLargeToRepublishIsNotParked(t *testing.T) {
	ctx := context.Background()
	r, err := New(ctx, Config{JS: streamtest.Start(t).JS})
	require.NoError(t, err)
	require.Equal(t, 1<<20, r.maxMsg, "the events stream's limit, 1 MiB by default")
	require.NoError(t, r.republishable(event{id: "evt_1", body: make([]byte, 1<<10)}))
	err = r.republishable(event{id: "evt_1", body: make([]byte, 1<<20-100)})
	require.ErrorContains(t, err, "cannot be republished from Redis")
	// act asks parkable before it records the park as begun, and does not
	// park what it refuses.
	err = r.parkable(event{id: "evt_1", dest: "orders", subject: "relay.in.orders", body: make([]byte, 1<<20)})
	require.ErrorContains(t, err, "cannot be republished from Redis")
}

// act carries out out's decision of attempt number attempt of ev, as
// Relay.act does, for a decision that needs no other: it fails the test if
// act asks Decide to decide again.
func act(t *testing.T, r *Relay, ctx context.Context, msg delivered, ev event, attempt int, mark *partitionMark, out *Outcome) error {
	t.Helper()
	again, err := r.act(ctx, msg, ev, &Input{Attempt: attempt}, mark, out)
	require.False(t, again, "act asked for another decision")
	return err
}
