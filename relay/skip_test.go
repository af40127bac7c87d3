package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/history"
	"github.com/relaydev/relay/stream"
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
	require.Empty(t, r.recordAttempt(ctx, ev, 1, Result{Status: 503}, "$JS.ACK.x"))

	l := r.attemptLog(ctx, ev)
	l.Skip, l.SkipSeq = "ops", 7
	b, _ := json.Marshal(l)
	_, err = r.attempts.Put(ctx, historyKey(ev), b)
	require.NoError(t, err)

	require.Equal(t, "ops", r.recordAttempt(ctx, ev, 2, Result{Status: 503}, "$JS.ACK.y"), "the attempt after the mark sees it")
	l = r.attemptLog(ctx, ev)
	require.Equal(t, "ops", l.Skip, "kept")
	require.Equal(t, 2, l.Made)
	require.Len(t, l.Attempts, 2)
	require.Equal(t, "$JS.ACK.y", l.Reply)

	replay := event{dest: "orders", id: "evt_1", seq: 12}
	require.Empty(t, l.SkipAt(replay.seq, replay.origin), "a replay of the event is another stored event")
	require.Equal(t, "ops", l.SkipAt(ev.seq, ev.origin))
}

// A mark set by SkipEvent applies to the event's stored message and to
// the messages that bring it back from Redis (same origin); a replay of the
// event is a message of its own origin, parked or not, and is not skipped.
func TestSkipEventMarkFollowsTheEventOutOfRedis(t *testing.T) {
	l := history.Log{Made: 2, Skip: "ops", SkipSeq: 7, SkipOrigin: 7}
	require.Equal(t, "ops", l.SkipAt(event{id: "evt_1", seq: 7, origin: 7}.seq, event{id: "evt_1", seq: 7, origin: 7}.origin), "still in JetStream")
	require.Equal(t, "ops", l.SkipAt(event{id: "evt_1", seq: 30, origin: 7, prior: 2}.seq, event{id: "evt_1", seq: 30, origin: 7, prior: 2}.origin), "promoted from Redis")
	require.Equal(t, "ops", l.SkipAt(event{id: "evt_1", seq: 31, origin: 7, prior: 3}.seq, event{id: "evt_1", seq: 31, origin: 7, prior: 3}.origin), "promoted after another attempt")
	require.Empty(t, l.SkipAt(event{id: "evt_1", seq: 40, origin: 40}.seq, event{id: "evt_1", seq: 40, origin: 40}.origin), "a replay")
	require.Empty(t, l.SkipAt(event{id: "evt_1", seq: 45, origin: 40, prior: 5}.seq, event{id: "evt_1", seq: 45, origin: 40, prior: 5}.origin), "a replay, parked and promoted")
	head := history.Log{Made: 2, Skip: "ops", SkipSeq: 7}
	require.Empty(t, head.SkipAt(event{id: "evt_1", seq: 30, origin: 7, prior: 2}.seq, event{id: "evt_1", seq: 30, origin: 7, prior: 2}.origin), "SkipHead's mark holds for its sequence only")
}

// recordAttempt keeps the origin of the delivery it records, which
// SkipEvent marks.
func TestAttemptLogKeepsTheOriginOfTheFailedDelivery(t *testing.T) {
	ctx := context.Background()
	r, err := New(ctx, Config{JS: streamtest.Start(t).JS})
	require.NoError(t, err)
	ev := event{dest: "orders", id: "evt_2", seq: 30, origin: 7, prior: 2}
	require.Empty(t, r.recordAttempt(ctx, ev, 3, Result{Status: 503}, "$JS.ACK.x"))
	require.Equal(t, uint64(7), r.attemptLog(ctx, ev).Origin)
}

// failingGets is a bucket whose reads fail and whose writes work.
type failingGets struct{ jetstream.KeyValue }

func (failingGets) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return nil, errors.New("read timed out")
}

// When the attempt record cannot be read, recordAttempt does not write
// over it (its history, count and skip mark stay); where there is none, it
// creates one, so the count goes on.
func TestRecordAttemptDoesNotWriteOverARecordItCannotRead(t *testing.T) {
	ctx := context.Background()
	r, err := New(ctx, Config{JS: streamtest.Start(t).JS})
	require.NoError(t, err)
	ev := event{dest: "orders", id: "evt_3", seq: 9, origin: 9}
	require.Empty(t, r.recordAttempt(ctx, ev, 1, Result{Status: 503}, "$JS.ACK.x"))
	l := r.attemptLog(ctx, ev)
	l.Skip, l.SkipSeq = "ops", 9
	b, _ := json.Marshal(l)
	_, err = r.attempts.Put(ctx, historyKey(ev), b)
	require.NoError(t, err)

	real := r.attempts
	r.attempts = failingGets{real}
	require.Empty(t, r.recordAttempt(ctx, ev, 2, Result{Status: 503}, "$JS.ACK.y"), "the mark cannot be read")
	other := event{dest: "orders", id: "evt_4", seq: 10, origin: 10}
	require.Empty(t, r.recordAttempt(ctx, other, 1, Result{Status: 503}, "$JS.ACK.z"))
	r.attempts = real

	kept := r.attemptLog(ctx, ev)
	require.Equal(t, "ops", kept.Skip, "the mark is kept")
	require.Equal(t, 1, kept.Made)
	require.Len(t, kept.Attempts, 1)
	created := r.attemptLog(ctx, other)
	require.Equal(t, 1, created.Made, "a record where there was none")
	require.Equal(t, "evt_4", created.Event)
}

// Retrying lists a destination's events in retry, the one whose last
// attempt failed longest ago first, and no other destination's.
func TestRetryingListsTheLongestWaitingFirst(t *testing.T) {
	ctx := context.Background()
	js := streamtest.Start(t).JS
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r, err := New(ctx, Config{JS: js, Now: func() time.Time { return now }})
	require.NoError(t, err)
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	for _, name := range []string{"orders", "orders2"} {
		_, err = st.Add(ctx, destination.Destination{Name: name, URL: "https://example.com/hook"})
		require.NoError(t, err)
	}
	record := func(dest, id string, seq uint64, at time.Time) {
		now = at
		ev := event{dest: dest, id: id, seq: seq, origin: seq}
		require.Empty(t, r.recordAttempt(ctx, ev, 1, Result{Status: 503}, fmt.Sprintf("$JS.ACK.RELAY_EVENTS.c.1.%d.%d.0.0", seq, seq)))
	}
	base := now
	record("orders", "b", 2, base.Add(time.Minute))
	record("orders", "c", 3, base.Add(2*time.Minute))
	record("orders", "a", 1, base.Add(3*time.Minute))
	record("orders2", "x", 4, base)

	rs, err := history.ListRetrying(ctx, st, "orders", 0)
	require.NoError(t, err)
	var ids []string
	for _, x := range rs {
		ids = append(ids, x.EventID)
	}
	require.Equal(t, []string{"b", "c", "a"}, ids)
	require.Equal(t, uint64(2), rs[0].Seq)
	require.Equal(t, 1, rs[0].Attempts)
	require.Equal(t, "status 503", rs[0].LastError)
	rs, err = history.ListRetrying(ctx, st, "orders", 2)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Equal(t, "b", rs[0].EventID)
	_, err = history.ListRetrying(ctx, st, "nosuch", 0)
	require.Error(t, err)
}

// A second message with the same event id that fails while the first's
// record is there is logged: their attempts share the record.
func TestTwoMessagesWithOneEventIDAreLogged(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	r, err := New(ctx, Config{JS: streamtest.Start(t).JS, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	require.NoError(t, err)
	first := event{dest: "orders", id: "evt_5", seq: 7, origin: 7}
	require.Empty(t, r.recordAttempt(ctx, first, 1, Result{Status: 503}, "$JS.ACK.x"))
	promoted := event{dest: "orders", id: "evt_5", seq: 20, origin: 7, prior: 1}
	require.Empty(t, r.recordAttempt(ctx, promoted, 2, Result{Status: 503}, "$JS.ACK.y"))
	require.NotContains(t, buf.String(), "two messages with one event id", "the same message, back from Redis")
	again := event{dest: "orders", id: "evt_5", seq: 30, origin: 30}
	require.Empty(t, r.recordAttempt(ctx, again, 1, Result{Status: 503}, "$JS.ACK.z"))
	require.Contains(t, buf.String(), "two messages with one event id are in retry at once")
	require.Contains(t, buf.String(), "other_seq=7")
}

// A skip's reason, as SkipReason keeps it: trimmed, the default when
// blank, one line of at most MaxSkipReason characters (not bytes).
func TestSkipReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: history.DefaultSkipReason},
		{in: " \t\n ", want: history.DefaultSkipReason},
		{in: "  ticket 42 ", want: "ticket 42"},
		{in: strings.Repeat("é", history.MaxSkipReason), want: strings.Repeat("é", history.MaxSkipReason)}, // 400 bytes
		{in: strings.Repeat("x", history.MaxSkipReason+1), err: "a skip reason of 201 characters: give at most 200"},
		{in: strings.Repeat("日", history.MaxSkipReason+5), err: "a skip reason of 205 characters: give at most 200"},
		{in: "two\nlines", err: "a skip reason is one line of text: character 4 is a control character (U+000A)"},
		{in: "tab\there", err: "a skip reason is one line of text: character 4 is a control character (U+0009)"},
		{in: "\x1b[2Jcleared", err: "a skip reason is one line of text: character 1 is a control character (U+001B)"},
		{in: "bad \xff byte", err: "a skip reason must be UTF-8 text"},
	} {
		got, err := history.SkipReason(tc.in)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// SkipHead and SkipEvent check the reason before anything else.
func TestSkipsCheckTheirReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := destination.NewStore(ctx, streamtest.Start(t).JS)
	require.NoError(t, err)
	_, err = history.SkipHead(ctx, st, "nobody", 1, "two\nlines")
	require.ErrorContains(t, err, "one line of text")
	_, err = history.SkipEvent(ctx, st, "nobody", "evt", strings.Repeat("x", 201))
	require.ErrorContains(t, err, "201 characters")
}

// WaitHeadLeft waits for a head to leave its partition and tells how it
// left: dead-lettered (with its letter) or delivered; still there when the
// wait ends is no error, the context ending is.
func TestWaitHeadLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	subject := stream.InSubject("o", "")
	c, err := js.CreateOrUpdateConsumer(ctx, stream.EventsStream, jetstream.ConsumerConfig{
		Durable: destination.PartitionConsumerName("o", 0), FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Hour, MaxAckPending: 1,
	})
	require.NoError(t, err)
	// head publishes an event and takes it from the partition, unacked.
	head := func(id string) (history.Head, jetstream.Msg) {
		t.Helper()
		_, err := js.Publish(ctx, subject, []byte(`{}`))
		require.NoError(t, err)
		b, err := c.Fetch(1, jetstream.FetchMaxWait(30*time.Second))
		require.NoError(t, err)
		m := <-b.Messages()
		require.NotNil(t, m, "no event handed out: %v", b.Error())
		meta, err := m.Metadata()
		require.NoError(t, err)
		return history.Head{Partition: 0, Seq: meta.Sequence.Stream, EventID: id, LastAttempt: time.Now()}, m
	}
	// waitLeft runs WaitHeadLeft while ack settles the head.
	type result struct {
		left   bool
		letter *dlq.Letter
		err    error
	}
	waitLeft := func(ctx context.Context, h history.Head, wait time.Duration, ack func()) result {
		t.Helper()
		done := make(chan result, 1)
		go func() {
			left, l, err := history.WaitHeadLeft(ctx, st, "o", h, wait)
			done <- result{left, l, err}
		}()
		ack()
		return <-done
	}

	h1, m1 := head("e1")
	got := waitLeft(ctx, h1, 200*time.Millisecond, func() {})
	require.Equal(t, result{}, got, "still at the head: not left, no error")

	// Dead-lettered: relay writes the letter, then acks the head.
	_, err = dlq.Writer{JS: js}.Write(ctx, dlq.Letter{DeadAt: time.Now().UTC(), Dest: "o", EventID: "e1", Reason: ReasonSkipped,
		Subject: subject, StreamSeq: h1.Seq, Body: []byte(`{}`)})
	require.NoError(t, err)
	got = waitLeft(ctx, h1, time.Minute, func() { require.NoError(t, m1.DoubleAck(ctx)) })
	require.NoError(t, got.err)
	require.True(t, got.left)
	require.NotNil(t, got.letter)
	require.Equal(t, h1.Seq, got.letter.StreamSeq)
	require.Equal(t, ReasonSkipped, got.letter.Reason)

	// Delivered: acked, no letter.
	h2, m2 := head("e2")
	got = waitLeft(ctx, h2, time.Minute, func() { require.NoError(t, m2.DoubleAck(ctx)) })
	require.Equal(t, result{left: true}, got)

	// The context ends first.
	h3, _ := head("e3")
	cctx, cancel := context.WithCancel(ctx)
	got = waitLeft(cctx, h3, time.Minute, cancel)
	require.False(t, got.left)
	require.ErrorIs(t, got.err, context.Canceled)
}
