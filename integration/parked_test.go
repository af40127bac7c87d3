package integration

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
)

// A parked batch holding, beside a valid parked event, an entry that does
// not decode and one that names a subject other than the destination's
// own input subjects (the destinations bucket's key of another
// destination): the valid event is delivered, the two are moved to the
// dead letters (reason corrupt_parked_entry, the entry as stored for
// body) and removed from Redis, and the other destination's record is
// unchanged. In the fault suite: a hostile Redis, no process killed.
func TestFaultCorruptAndForeignParkedEntriesAreSetAside(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	r := redistest.Start(t, redistest.Options{})
	st := schedule.NewStore(r.Client())
	s := newSink(t, failing(1))
	victim := e.addDest(destination.Destination{Name: "victim", URL: s.URL})
	kv, err := e.js.KeyValue(ctx, stream.DestBucket)
	require.NoError(t, err)
	before, err := kv.Get(ctx, victim.Name)
	require.NoError(t, err)
	e.addDest(destination.Destination{Name: "park", URL: s.URL, Retry: destination.RetryPolicy{
		Base: destination.Duration(time.Second), Max: destination.Duration(time.Second), NoJitter: true, MaxAttempts: 5}})
	e.startRelay(func(c *relay.Config) { c.Schedule, c.ParkThreshold = st, 500*time.Millisecond })
	res := e.publish("park", "", `{"p":1}`)
	eventually(t, 15*time.Second, func() bool {
		ps, err := st.Stats(ctx, "park")
		return err == nil && ps.Parked == 1
	}, "the event parked after its first attempt")

	// Two bad entries due with it, so that all three are claimed together.
	rdb := r.Client()
	due := "relay:{relay}:due:park"
	members, err := rdb.ZRangeWithScores(ctx, due, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, 1)
	score := members[0].Score
	corrupt := `{"dest":"park","subject":"relay.in.park","id":"evt_bad",` // cut short
	foreign, err := json.Marshal(schedule.Entry{Dest: "park", Subject: "$KV." + stream.DestBucket + ".victim", EventID: "evt_evil", Origin: 2,
		Body: []byte(`{"name":"victim","url":"https://attacker.example/"}`)})
	require.NoError(t, err)
	for m, v := range map[string]string{"evt_bad#2@1": corrupt, "evt_evil#2@2": string(foreign)} {
		require.NoError(t, rdb.HSet(ctx, "relay:{relay}:msg:park", m, v).Err())
		require.NoError(t, rdb.ZAdd(ctx, due, redis.Z{Score: score, Member: m}).Err())
	}

	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := schedule.Promoter{Store: st, JS: e.js, Interval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		_ = p.Run(pctx)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	eventually(t, 20*time.Second, func() bool { return s.delivered()[res.ID] == 1 }, "the valid parked event delivered")
	var ls []dlq.Letter
	eventually(t, 10*time.Second, func() bool { ls = e.deadLetters("park"); return len(ls) == 2 }, "the two bad entries dead-lettered")
	bodies := map[string]string{}
	for _, l := range ls {
		require.Equal(t, relay.ReasonCorruptParkedEntry, l.Reason)
		bodies[string(l.Body)] = l.LastError
	}
	require.Contains(t, bodies[corrupt], "corrupt")
	require.Contains(t, bodies[string(foreign)], "not an input subject of park")
	ps, err := st.Stats(ctx, "park")
	require.NoError(t, err)
	require.Zero(t, ps.Parked, "nothing left in Redis")
	after, err := kv.Get(ctx, victim.Name)
	require.NoError(t, err)
	require.Equal(t, before.Revision(), after.Revision(), "the other destination's record was not written")
	require.Equal(t, before.Value(), after.Value())

	letters, err := dlq.Open(ctx, e.js)
	require.NoError(t, err)
	_, err = letters.Replay(ctx, ls[0], "")
	require.ErrorIs(t, err, dlq.ErrNotReplayable)
}
