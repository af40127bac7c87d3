package relay

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// replayFixture is a JetStream with relay's streams and its dead-letter
// store.
type replayFixture struct {
	js      jetstream.JetStream
	letters *dlq.Store
	seq     uint64 // the last letter's event's stream sequence
}

func setupReplay(t *testing.T) *replayFixture {
	t.Helper()
	js := streamtest.Start(t).JS
	letters, err := dlq.Open(context.Background(), js)
	require.NoError(t, err)
	return &replayFixture{js: js, letters: letters}
}

// write stores a dead letter of event id to dest and returns it as stored.
// Each letter's event has a stream sequence of its own (a letter's dedup
// id is its destination and that sequence).
func (f *replayFixture) write(t *testing.T, dest, id string, change ...func(*dlq.Letter)) dlq.Letter {
	t.Helper()
	f.seq++
	l := dlq.Letter{DeadAt: time.Now().UTC(), Dest: dest, EventID: id, Reason: "max_attempts", Attempts: 3, LastStatus: 503,
		Subject: stream.InSubject(dest, ""), StreamSeq: f.seq, Body: []byte(`{"id":"` + id + `"}`)}
	for _, c := range change {
		c(&l)
	}
	seq, err := dlq.Writer{JS: f.js}.Write(context.Background(), l)
	require.NoError(t, err)
	got, err := f.letters.Get(context.Background(), seq)
	require.NoError(t, err)
	return got
}

// A replay counts what it did, leaves duplicates out of what it published,
// and tells it in one relay.replay.finished with the documented fields;
// a replay that published nothing new, or a dry run, tells nothing.
func TestReplayDeadLettersCountsAndTellsOnce(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	ctx := context.Background()
	a1 := f.write(t, "a", "a1")
	a2 := f.write(t, "a", "a2")
	f.write(t, "b", "b1")
	junk, err := f.js.Publish(ctx, stream.DLQSubject("a"), []byte("junk"))
	require.NoError(t, err)
	// a1 was replayed before (its replay's dedup id is taken): it is not
	// published again.
	env := stream.Envelope{ID: a1.EventID, Dest: "a", Seq: a1.Seq, Body: a1.Body}
	_, err = f.js.PublishMsg(ctx, env.Msg(stream.ReplayedDeadLetter, stream.InSubject("a", ""), nil))
	require.NoError(t, err)

	dry, err := ReplayDeadLetters(ctx, DeadLetterReplay{Letters: f.letters, By: "test", Filter: dlq.Filter{Dest: "a"}, Options: dlq.ReplayOptions{DryRun: true}})
	require.NoError(t, err)
	require.Len(t, dry.Skipped, 1)
	require.Contains(t, dry.Skipped[0].Detail, "malformed")
	require.Equal(t, ReplayReport{Matched: 3, Replayed: 2, Skipped: []LetterOutcome{{junk.Sequence, dry.Skipped[0].Detail}}, Failed: []LetterOutcome{}}, dry)
	require.Empty(t, storedOpEvents(t, f.js), "a dry run tells nothing")

	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	var steps []uint64
	rep, err := ReplayDeadLetters(ctx, DeadLetterReplay{
		Letters: f.letters, JS: f.js, By: "test", Filter: dlq.Filter{Dest: "a"}, Options: dlq.ReplayOptions{ToDest: "c"},
		Step: func(i, total int, s dlq.ReplayStep) {
			require.Equal(t, 3, total)
			require.Len(t, steps, i)
			steps = append(steps, s.Letter.Seq)
		},
		Now: func() time.Time { return at },
	})
	require.NoError(t, err)
	require.NoError(t, rep.EventErr)
	require.Equal(t, []uint64{a1.Seq, a2.Seq, junk.Sequence}, steps)
	require.Equal(t, 3, rep.Matched)
	require.Equal(t, 2, rep.Replayed)
	require.Equal(t, 1, rep.Duplicates)
	require.Len(t, rep.Skipped, 1)
	require.Empty(t, rep.Failed)
	done := storedOpEvents(t, f.js)[opevent.ReplayFinished]
	require.Len(t, done, 1)
	delete(done[0], "_id")
	require.Equal(t, map[string]any{"type": opevent.ReplayFinished, "at": "2026-05-06T07:08:09Z", "by": "test", "dest": "a", "to_dest": "c",
		"matched": float64(3), "replayed": float64(2), "duplicates": float64(1), "skipped": float64(1), "failed": float64(0)}, done[0])

	// b1, replayed before: nothing new published, nothing told.
	b1 := f.write(t, "b", "b2")
	env = stream.Envelope{ID: b1.EventID, Dest: "b", Seq: b1.Seq, Body: b1.Body}
	_, err = f.js.PublishMsg(ctx, env.Msg(stream.ReplayedDeadLetter, stream.InSubject("b", ""), nil))
	require.NoError(t, err)
	rep, err = ReplayDeadLetters(ctx, DeadLetterReplay{Letters: f.letters, JS: f.js, By: "test", Filter: dlq.Filter{Seqs: []uint64{b1.Seq}}})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Duplicates)
	require.Len(t, storedOpEvents(t, f.js)[opevent.ReplayFinished], 1, "a replay of duplicates only tells nothing")
}

// A letter whose replay fails ends a replay with StopOnFailure, with an
// error that says how far it came and that re-running is safe, and
// nothing told; without it, the replay goes on and counts the failure.
func TestReplayDeadLettersOnFailure(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	ctx := context.Background()
	ok1 := f.write(t, "a", "ok1")
	// Its event is not in the letter, and not in the events stream either.
	gone := f.write(t, "a", "gone", func(l *dlq.Letter) { l.EventOmitted, l.StreamSeq = true, 999_999 })
	f.write(t, "a", "ok2")

	_, err := ReplayDeadLetters(ctx, DeadLetterReplay{Letters: f.letters, JS: f.js, By: "test", Filter: dlq.Filter{Dest: "a"}, StopOnFailure: true})
	require.ErrorIs(t, err, dlq.ErrEventGone)
	require.ErrorContains(t, err, "(replayed 1 of 3 before this; re-running is safe)")
	require.Empty(t, storedOpEvents(t, f.js), "a replay that stopped tells nothing")
	_, err = f.letters.Get(ctx, ok1.Seq)
	require.ErrorIs(t, err, dlq.ErrLetterNotFound, "the one before was replayed")

	rep, err := ReplayDeadLetters(ctx, DeadLetterReplay{Letters: f.letters, JS: f.js, By: "test", Filter: dlq.Filter{Dest: "a"}})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Matched)
	require.Equal(t, 1, rep.Replayed)
	require.Len(t, rep.Failed, 1)
	require.Equal(t, gone.Seq, rep.Failed[0].Seq)
	require.Contains(t, rep.Failed[0].Detail, "no longer holds it")
	done := storedOpEvents(t, f.js)[opevent.ReplayFinished]
	require.Len(t, done, 1)
	require.Equal(t, float64(1), done[0]["failed"])
	require.Equal(t, float64(1), done[0]["replayed"])
}

// A replay whose context ends while it waits for its next replay says how
// far it came and that re-running is safe, and tells nothing.
func TestReplayDeadLettersInterrupted(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	f.write(t, "a", "a1")
	f.write(t, "a", "a2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := ReplayDeadLetters(ctx, DeadLetterReplay{
		Letters: f.letters, JS: f.js, By: "test", Filter: dlq.Filter{Dest: "a"},
		Options: dlq.ReplayOptions{Interval: time.Hour},
		Step:    func(int, int, dlq.ReplayStep) { cancel() },
	})
	require.EqualError(t, err, "interrupted after 1 of 2; re-running is safe")
	require.ErrorIs(t, err, dlq.ErrInterrupted)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, storedOpEvents(t, f.js))
}

// What a replay needs is checked before it starts.
func TestReplayDeadLettersRefusesAnIncompleteReplay(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	for _, tc := range []struct {
		r    DeadLetterReplay
		want string
	}{
		{DeadLetterReplay{JS: f.js, By: "test"}, "no dead-letter store"},
		{DeadLetterReplay{Letters: f.letters, By: "test"}, "no JetStream"},
		{DeadLetterReplay{Letters: f.letters, JS: f.js}, "By is required"},
	} {
		_, err := ReplayDeadLetters(context.Background(), tc.r)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := ReplayDeadLetters(context.Background(), DeadLetterReplay{Letters: f.letters, By: "test", Options: dlq.ReplayOptions{DryRun: true}})
	require.NoError(t, err, "a dry run needs no JetStream")
}
