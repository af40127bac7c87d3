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
