package relay

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

// An operator's skip mark survives the attempts recorded after it, and
// applies only to the event stored at the marked sequence: a replay of the
// event (same id, another sequence) is not skipped by a mark left behind.
func TestAttemptLogKeepsASkipMarkForItsSequence(t *testing.T) {
	ctx := context.Background()
	r, err := New(ctx, Config{JS: streamtest.Start(t).JS})
	require.NoError(t, err)
	ev := event{dest: "orders", id: "evt_1", seq: 7}
	require.Empty(t, r.recordAttempt(ctx, ev, 1, Result{Status: 503}, false, "$JS.ACK.x"))

	l := r.attemptLog(ctx, ev)
	l.Skip, l.SkipSeq = "ops", 7
	b, _ := json.Marshal(l)
	_, err = r.attempts.Put(ctx, historyKey(ev), b)
	require.NoError(t, err)

	require.Equal(t, "ops", r.recordAttempt(ctx, ev, 2, Result{Status: 503}, false, "$JS.ACK.y"), "the attempt after the mark sees it")
	l = r.attemptLog(ctx, ev)
	require.Equal(t, "ops", l.Skip, "kept")
	require.Equal(t, 2, l.Made)
	require.Len(t, l.Attempts, 2)
	require.Equal(t, "$JS.ACK.y", l.Reply)

	replay := event{dest: "orders", id: "evt_1", seq: 12}
	require.Empty(t, l.skipOf(replay), "a replay of the event is another stored event")
	require.Equal(t, "ops", l.skipOf(ev))
}

// A mark set by SkipEvent applies to the event's stored message and to
// the messages that bring it back from Redis (same origin); a replay of the
// event is a message of its own origin, parked or not, and is not skipped.
func TestSkipEventMarkFollowsTheEventOutOfRedis(t *testing.T) {
	l := attemptLog{Made: 2, Skip: "ops", SkipSeq: 7, SkipOrigin: 7}
	require.Equal(t, "ops", l.skipOf(event{id: "evt_1", seq: 7, origin: 7}), "still in JetStream")
	require.Equal(t, "ops", l.skipOf(event{id: "evt_1", seq: 30, origin: 7, prior: 2}), "promoted from Redis")
	require.Equal(t, "ops", l.skipOf(event{id: "evt_1", seq: 31, origin: 7, prior: 3}), "promoted after another attempt")
	require.Empty(t, l.skipOf(event{id: "evt_1", seq: 40, origin: 40}), "a replay")
	require.Empty(t, l.skipOf(event{id: "evt_1", seq: 45, origin: 40, prior: 5}), "a replay, parked and promoted")
	head := attemptLog{Made: 2, Skip: "ops", SkipSeq: 7}
	require.Empty(t, head.skipOf(event{id: "evt_1", seq: 30, origin: 7, prior: 2}), "SkipHead's mark holds for its sequence only")
}

// recordAttempt keeps the origin of the delivery it records, which
// SkipEvent marks.
func TestAttemptLogKeepsTheOriginOfTheFailedDelivery(t *testing.T) {
	ctx := context.Background()
	r, err := New(ctx, Config{JS: streamtest.Start(t).JS})
	require.NoError(t, err)
	ev := event{dest: "orders", id: "evt_2", seq: 30, origin: 7, prior: 2}
	require.Empty(t, r.recordAttempt(ctx, ev, 3, Result{Status: 503}, false, "$JS.ACK.x"))
	require.Equal(t, uint64(7), r.attemptLog(ctx, ev).Origin)
}
