package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitDeadLetters polls until q selects n dead letters, and returns them.
func (e *env) waitDeadLetters(q DeadLetterQuery, n int) []DeadLetter {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		page, err := e.read.DeadLetters(context.Background(), q)
		require.NoError(e.t, err)
		if len(page.DeadLetters) >= n {
			require.Len(e.t, page.DeadLetters, n, "%+v", q)
			return page.DeadLetters
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("dead letters %+v: %d, want %d", q, len(page.DeadLetters), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Events the sink refuses for good are dead-lettered; they are listed,
// page by page, shown with their history and body, replayed once the sink
// takes them again, and purged.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.addDest("orders")
	e.sink.setReject(true)
	since := time.Now()
	for _, ev := range []NewEvent{
		{Dest: "orders", ID: "evt-json", Key: "c1", Data: map[string]any{"n": 1}, Headers: map[string]string{"X-Tenant": "t1"}},
		{Dest: "orders", ID: "evt-text", Data: "plain"},
		{Dest: "orders", ID: "evt-3", Data: 3},
	} {
		_, err := e.publish.Publish(ctx, ev)
		require.NoError(t, err)
	}
	letters := e.waitDeadLetters(DeadLetterQuery{Dest: "orders"}, 3)
	byID := map[string]DeadLetter{}
	for i, l := range letters {
		byID[l.EventID] = l
		if i > 0 {
			require.Greater(t, l.Seq, letters[i-1].Seq, "oldest first")
		}
	}
	l := byID["evt-json"]
	require.Equal(t, "c1", l.Key)
	require.Equal(t, "permanent_status", l.Reason)
	require.Equal(t, 400, l.LastStatus)
	require.Equal(t, 1, l.Attempts)
	require.False(t, l.DeadAt.Before(since.Add(-time.Second)))

	require.Len(t, e.waitDeadLetters(DeadLetterQuery{Reason: "permanent_status", Status: "400", Since: since}, 3), 3)
	e.waitDeadLetters(DeadLetterQuery{Status: "none"}, 0)
	e.waitDeadLetters(DeadLetterQuery{Until: since}, 0)

	page, err := e.read.DeadLetters(ctx, DeadLetterQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.DeadLetters, 2)
	require.Equal(t, letters[1].Seq, page.NextAfter)
	page, err = e.read.DeadLetters(ctx, DeadLetterQuery{Limit: 2, After: page.NextAfter})
	require.NoError(t, err)
	require.Equal(t, []DeadLetter{letters[2]}, page.DeadLetters)
	require.Zero(t, page.NextAfter, "the last page")
	var all []DeadLetter
	for l, err := range e.read.AllDeadLetters(ctx, DeadLetterQuery{Limit: 1}) {
		require.NoError(t, err)
		all = append(all, l)
	}
	require.Equal(t, letters, all)

	d, err := e.read.DeadLetter(ctx, l.Seq)
	require.NoError(t, err)
	require.Equal(t, l, d.DeadLetter)
	require.Len(t, d.History, 1)
	require.Equal(t, 400, d.History[0].Status)
	require.Equal(t, []string{"t1"}, d.Headers["X-Tenant"])
	require.JSONEq(t, `{"n":1}`, string(d.Body()))
	raw, err := e.read.DeadLetterBody(ctx, l.Seq)
	require.NoError(t, err)
	require.Equal(t, `{"n":1}`, string(raw), "the bytes published")
	// The event's body is found through its attempt's record, which the
	// delivery log writes moments after the dead letter.
	e.waitAttempts(AttemptQuery{EventID: "evt-json"}, 1)
	raw, err = e.read.EventBody(ctx, "evt-json")
	require.NoError(t, err)
	require.Equal(t, `{"n":1}`, string(raw))
	_, err = e.read.DeadLetterBody(ctx, letters[2].Seq+100)
	require.True(t, IsNotFound(err), "%v", err)
	_, err = e.read.EventBody(ctx, "evt-never")
	require.True(t, IsNotFound(err), "%v", err)
	text, err := e.read.DeadLetter(ctx, byID["evt-text"].Seq)
	require.NoError(t, err)
	require.Equal(t, `"plain"`, string(text.Body()), "a JSON string is JSON")

	// A dry run changes nothing; then, the sink fixed, the first is
	// replayed and delivered.
	dry, err := e.admin.ReplayDeadLetters(ctx, ReplaySelection{LetterSelection: LetterSelection{All: true, DryRun: true}})
	require.NoError(t, err)
	require.Equal(t, ReplayResult{DryRun: true, Matched: 3, Replayed: 3, Skipped: []LetterOutcome{}, Failed: []LetterOutcome{}}, dry)
	e.sink.setReject(false)
	res, err := e.admin.ReplayDeadLetters(ctx, ReplaySelection{LetterSelection: LetterSelection{Seqs: []uint64{l.Seq}}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Empty(t, res.Failed)
	delivered := e.waitAttempts(AttemptQuery{EventID: "evt-json", Status: "2xx"}, 1)
	require.Equal(t, 1, delivered[0].Attempt, "a replay starts a new series of attempts")
	v, err := e.read.Event(ctx, "evt-json")
	require.NoError(t, err)
	require.Equal(t, StateDelivered, v.Destinations[0].State)
	require.Len(t, v.Destinations[0].Attempts, 2, "the refusal (dead-lettered), the delivery")
	require.Equal(t, OutcomeDeadLetter, v.Destinations[0].Attempts[0].Outcome)

	// The others are purged.
	dryPurge, err := e.admin.PurgeDeadLetters(ctx, LetterSelection{Dest: "orders", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, PurgeResult{DryRun: true, Matched: 2, Purged: 2}, dryPurge)
	purged, err := e.admin.PurgeDeadLetters(ctx, LetterSelection{Dest: "orders"})
	require.NoError(t, err)
	require.Equal(t, PurgeResult{Matched: 2, Purged: 2}, purged)
	e.waitDeadLetters(DeadLetterQuery{}, 0)
	_, err = e.read.DeadLetter(ctx, byID["evt-3"].Seq)
	require.True(t, IsNotFound(err), "%v", err)
}
