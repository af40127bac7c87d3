package relay

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

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
	err = r.act(lost, ev, 2, false, &Outcome{Decision: Decision{Action: Ack}})
	require.ErrorIs(t, err, nats.ErrTimeout)
	require.Equal(t, []string{"double-ack"}, lost.acked, "a retried event's ack is confirmed, not fire-and-forget")
	_, err = r.attempts.Get(ctx, historyKey(ev))
	require.NoError(t, err, "the history survives an unconfirmed ack")
	require.Equal(t, 1, r.attemptLog(ctx, ev).Made)

	// The redelivery succeeds and its ack is confirmed: now it goes.
	ok := &ackMsg{}
	require.NoError(t, r.act(ok, ev, 2, false, &Outcome{Decision: Decision{Action: Ack}}))
	_, err = r.attempts.Get(ctx, historyKey(ev))
	require.True(t, errors.Is(err, jetstream.ErrKeyNotFound), "history deleted after the confirmed ack, got %v", err)

	// A first attempt on the hot path is acked without waiting for a
	// confirmation.
	first := &ackMsg{}
	require.NoError(t, r.act(first, event{dest: "orders", id: "evt_2", seq: 8}, 1, false, &Outcome{Decision: Decision{Action: Ack}}))
	require.Equal(t, []string{"ack"}, first.acked)
}
