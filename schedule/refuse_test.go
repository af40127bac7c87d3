package schedule_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
)

// The promoter republishes an entry only to an input subject of the
// destination it is parked for. One naming a key of the destinations
// bucket, another destination's subject, a stored-event subject, or
// another destination altogether, or without an origin, is not published:
// it is moved to the dead letters (reason corrupt_parked_entry) and
// removed, and the valid entry of the batch is republished.
func TestPromoterRepublishesOnlyToTheDestinationsInputSubjects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	kv, err := b.js.KeyValue(ctx, stream.DestBucket)
	require.NoError(t, err)
	rev, err := kv.Put(ctx, "victim", []byte(`{"name":"victim","url":"https://example.com/"}`))
	require.NoError(t, err)

	now := time.Now()
	valid := entry("a", 1, now.Add(-time.Second))
	bad := []schedule.Entry{
		{Dest: "a", Subject: "$KV." + stream.DestBucket + ".victim", EventID: "evt-kv", Body: []byte(`{"name":"victim","url":"https://attacker.example/"}`), Origin: 1},
		{Dest: "a", Subject: stream.InSubject("b", ""), EventID: "evt-other", Origin: 2},
		{Dest: "a", Subject: stream.KeyedPrefix + ".a.1", EventID: "evt-stored", Origin: 3},
		{Dest: "b", Subject: stream.InSubject("b", ""), EventID: "evt-dest", Origin: 4},
		{Dest: "a", Subject: stream.InSubject("a", ""), EventID: "evt-no-origin"},
	}
	require.NoError(t, b.store.Park(ctx, valid))
	for _, e := range bad {
		e.Due = now.Add(-time.Second)
		if e.Dest == "b" {
			// Parked under a's keys, as only a hand in Redis can.
			e.Dest = "a"
			require.NoError(t, b.store.Park(ctx, e))
			raw, err := b.rdb.HGet(ctx, "relay:{relay}:msg:a", e.Member()).Result()
			require.NoError(t, err)
			require.NoError(t, b.rdb.HSet(ctx, "relay:{relay}:msg:a", e.Member(), []byte(
				raw[:len(`{"dest":"`)]+"b"+raw[len(`{"dest":"a`):])).Err())
			continue
		}
		if e.Origin == 0 {
			// Park refuses it: written without its origin by hand.
			e.Origin = 5
			require.NoError(t, b.store.Park(ctx, e))
			raw, err := b.rdb.HGet(ctx, "relay:{relay}:msg:a", e.Member()).Result()
			require.NoError(t, err)
			require.Contains(t, raw, `"origin":5`)
			require.NoError(t, b.rdb.HSet(ctx, "relay:{relay}:msg:a", e.Member(), strings.Replace(raw, `"origin":5`, `"origin":0`, 1)).Err())
			continue
		}
		require.NoError(t, b.store.Park(ctx, e))
	}
	sub, err := b.js.Conn().SubscribeSync(stream.InPrefix + ".b")
	require.NoError(t, err)

	p := schedule.Promoter{Store: b.store, JS: b.js, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n, err := p.PromoteDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the valid entry republished")

	e, err := kv.Get(ctx, "victim")
	require.NoError(t, err)
	require.Equal(t, rev, e.Revision(), "the destination record was not written")
	_, err = sub.NextMsg(200 * time.Millisecond)
	require.Error(t, err, "nothing published to another destination")
	st, err := b.store.Stats(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, st.Parked, "the refused entries removed")

	letters, err := dlq.Open(ctx, b.js)
	require.NoError(t, err)
	ls, err := letters.List(ctx, dlq.Filter{Dest: "a"}, 0)
	require.NoError(t, err)
	require.Len(t, ls, len(bad))
	noOrigin := false
	for _, l := range ls {
		require.Equal(t, dlq.ReasonCorruptParkedEntry, l.Reason)
		require.Contains(t, l.LastError, "refused")
		if l.EventID == "evt-no-origin" {
			require.Contains(t, l.LastError, "it has no origin")
			noOrigin = true
		}
	}
	require.True(t, noOrigin, "the entry without an origin dead-lettered")
}
