package schedule_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

type bundle struct {
	store *schedule.Store
	rdb   *redis.Client
	js    jetstream.JetStream
}

func setup(t *testing.T) bundle {
	t.Helper()
	r := redistest.Start(t, redistest.Options{})
	rdb := r.Client()
	return bundle{store: schedule.NewStore(rdb), rdb: rdb, js: streamtest.Start(t).JS}
}

// entry is event evt-<i> of dest, first stored at sequence 100+i, parked
// after 2 attempts until due.
func entry(dest string, i int, due time.Time) schedule.Entry {
	return schedule.Entry{
		Dest: dest, Subject: stream.InSubject(dest, fmt.Sprintf("k%d", i%7)), EventID: fmt.Sprintf("evt-%d", i),
		Attempts: 2, Headers: nats.Header{"X-Trace": []string{"t"}}, Body: []byte(fmt.Sprintf(`{"i":%d}`, i)), Due: due,
		Origin: uint64(100 + i),
	}
}

func TestParkClaimLeaseRemove(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	require.NoError(t, b.store.Park(ctx, entry("a", 1, now.Add(-time.Second))))
	require.NoError(t, b.store.Park(ctx, entry("a", 2, now)))
	require.NoError(t, b.store.Park(ctx, entry("a", 3, now.Add(time.Hour))))
	require.Error(t, b.store.Park(ctx, schedule.Entry{Dest: "a"}), "an entry without id and subject is refused")

	st, err := b.store.Stats(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Parked)
	require.Equal(t, now.Add(-time.Second).UnixMilli(), st.OldestDue.UnixMilli())

	lease := 10 * time.Second
	c, err := b.store.Claim(ctx, "a", now, 10, lease)
	require.NoError(t, err)
	require.Len(t, c, 2, "only the due entries")
	require.Equal(t, "evt-1", c[0].Entry.EventID, "oldest first")
	require.Equal(t, `{"i":1}`, string(c[0].Entry.Body))
	require.Equal(t, "t", c[0].Entry.Headers.Get("X-Trace"))

	again, err := b.store.Claim(ctx, "a", now, 10, lease)
	require.NoError(t, err)
	require.Empty(t, again, "leased entries are not claimed twice")
	expired, err := b.store.Claim(ctx, "a", now.Add(lease), 10, lease)
	require.NoError(t, err)
	require.Len(t, expired, 2, "once the lease ends they are claimed again")

	require.NoError(t, b.store.Remove(ctx, "a", []string{c[0].Member, c[1].Member}))
	st, err = b.store.Stats(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Parked)
	dests, err := b.store.Dests(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, dests)
	require.NoError(t, b.store.Remove(ctx, "a", []string{entry("a", 3, now).Member()}))
	dests, err = b.store.Dests(ctx)
	require.NoError(t, err)
	require.Empty(t, dests, "a destination with nothing parked leaves the set")
	n, err := b.rdb.HLen(ctx, "relay:{relay}:msg:a").Result()
	require.NoError(t, err)
	require.Zero(t, n, "no payload is left behind")
}

func eventsStored(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream.EventsStream)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

func TestTwoPromotersRepublishEachEntryOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 10000
	past := time.Now().Add(-time.Minute)
	for i := range n {
		require.NoError(t, b.store.Park(ctx, entry(fmt.Sprintf("d%d", i%3), i, past)))
	}
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := schedule.Promoter{Store: b.store, JS: b.js, Batch: 500}
			for {
				k, err := p.PromoteDue(ctx)
				if err != nil {
					t.Errorf("promoter %d: %v", w, err)
					return
				}
				counts[w] += k
				if k == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, n, counts[0]+counts[1], "every entry promoted by exactly one promoter (%v)", counts)
	require.Equal(t, uint64(n), eventsStored(t, b.js), "each republished once")
	dests, err := b.store.Dests(ctx)
	require.NoError(t, err)
	require.Empty(t, dests)

	// The republished events carry the event id and the attempts so far.
	s, err := b.js.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	m, err := s.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Regexp(t, `^evt-\d+$`, m.Header.Get(stream.HdrEventID))
	require.Equal(t, "2", m.Header.Get(stream.HdrAttempt))
	require.Equal(t, "t", m.Header.Get("X-Trace"))
	p, err := stream.ParseSubject(m.Subject)
	require.NoError(t, err)
	require.Regexp(t, `^d\d$`, p.Dest)
}

// A promoter that republished but died before removing the entry leaves it
// leased; the next promoter republishes it after the lease, and JetStream
// drops that copy as a duplicate.
func TestRepublishAfterALostRemovalIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	e := entry("a", 1, time.Now().Add(-time.Second))
	require.NoError(t, b.store.Park(ctx, e))
	p := schedule.Promoter{Store: b.store, JS: b.js}
	k, err := p.PromoteDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, k)
	require.Equal(t, uint64(1), eventsStored(t, b.js))

	require.NoError(t, b.store.Park(ctx, e), "as if the removal had never happened")
	k, err = p.PromoteDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, k)
	require.Equal(t, uint64(1), eventsStored(t, b.js), "the second publish was a duplicate")
}

func TestPromoterKeepsEntriesItCouldNotPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// No stream listens on the event subjects: the publish fails. (An
	// entry naming a subject that is not its destination's is refused
	// before any publish: TestPromoterRepublishesOnlyToTheDestinationsInputSubjects.)
	require.NoError(t, b.js.DeleteStream(ctx, stream.EventsStream))
	e := entry("a", 1, time.Now().Add(-time.Second))
	require.NoError(t, b.store.Park(ctx, e))
	p := schedule.Promoter{Store: b.store, JS: b.js, Lease: 50 * time.Millisecond}
	k, err := p.PromoteDue(ctx)
	require.Error(t, err)
	require.Zero(t, k)
	st, err := b.store.Stats(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Parked, "the entry stays parked, to be claimed again after its lease")
}

// With replicas asked for, Park returns only once a replica has the entry;
// while the replica confirms nothing, Park fails with ErrNotReplicated and
// leaves nothing parked, so the promoter cannot deliver the event too.
func TestParkWaitsForAReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary})
	replica.WaitReplicating(primary)
	plain := schedule.NewStore(primary.Client())
	st, err := plain.WithReplicas(1, 300*time.Millisecond)
	require.NoError(t, err)
	n, err := st.ConnectedReplicas(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	due := time.Now().Add(time.Hour)
	require.NoError(t, st.Park(ctx, entry("r", 1, due)))
	// Confirmed means the replica has it: read it there, at once.
	require.Equal(t, int64(1), replica.Client().ZCard(ctx, "relay:{relay}:due:r").Val(), "the replica has the confirmed entry")

	replica.Pause()
	start := time.Now()
	err = st.Park(ctx, entry("r", 2, due))
	require.ErrorIs(t, err, schedule.ErrNotReplicated)
	require.ErrorContains(t, err, "0 of 1 confirmed within 300ms")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "it waited for the replica")
	ps, err := plain.Stats(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(1), ps.Parked, "the unconfirmed entry was taken out again")
	// Without the wait the primary confirms what the replica does not have:
	// the entry a failover would lose.
	require.NoError(t, plain.Park(ctx, entry("r", 3, due)))
	replica.Resume()

	require.NoError(t, st.Park(ctx, entry("r", 4, due)))
	members := replica.Client().ZRange(ctx, "relay:{relay}:due:r", 0, -1).Val()
	require.ElementsMatch(t, []string{"evt-1#2@101", "evt-3#2@103", "evt-4#2@104"}, members)
}

// A store that asks for more replicas than the primary has cannot park.
func TestParkWithoutEnoughReplicasFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := redistest.Start(t, redistest.Options{})
	st, err := schedule.NewStore(r.Client()).WithReplicas(1, 50*time.Millisecond)
	require.NoError(t, err)
	n, err := st.ConnectedReplicas(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	err = st.Park(ctx, entry("none", 1, time.Now()))
	require.ErrorIs(t, err, schedule.ErrNotReplicated)
	require.ErrorContains(t, err, "0 of 1 confirmed within 50ms", "the first park waits")
	// After one that was not confirmed, parks ask how many replicas there
	// are, and fail without waiting.
	err = st.Park(ctx, entry("none", 2, time.Now()))
	require.ErrorIs(t, err, schedule.ErrNotReplicated)
	require.ErrorContains(t, err, "the primary has 0 of 1 replicas connected")
	ps, err := st.Stats(ctx, "none")
	require.NoError(t, err)
	require.Zero(t, ps.Parked)

	// Once a replica connects, parks are confirmed again
	// (docs/retries-and-parking.md: "the first confirmed park ends that").
	replica := redistest.Start(t, redistest.Options{ReplicaOf: r})
	replica.WaitReplicating(r)
	var parkErr error
	require.Eventually(t, func() bool {
		parkErr = st.Park(ctx, entry("none", 3, time.Now()))
		return parkErr == nil
	}, 10*time.Second, 20*time.Millisecond, "parks are confirmed again with a replica: %v", parkErr)
	ps, err = st.Stats(ctx, "none")
	require.NoError(t, err)
	require.Equal(t, int64(1), ps.Parked)

	// A wait as long as the client's read timeout is refused.
	slow := redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { slow.Close() })
	_, err = schedule.NewStore(slow).WithReplicas(1, 100*time.Millisecond)
	require.ErrorContains(t, err, "the Redis read timeout 100ms must be longer than the wait for replicas 100ms")
}

// WAIT counts the replicas that have what its own connection wrote. A park
// whose WAIT went down another connection, one whose last write the replica
// already has, would be confirmed although the replica has not got it.
func TestParkWaitsOnTheConnectionThatWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary})
	replica.WaitReplicating(primary)
	// Two connections, handed out in turn.
	c := redis.NewClient(&redis.Options{Addr: primary.Addr, PoolFIFO: true, PoolSize: 2, MinIdleConns: 2})
	t.Cleanup(func() { c.Close() })
	st, err := schedule.NewStore(c).WithReplicas(1, 300*time.Millisecond)
	require.NoError(t, err)
	for i := range 4 {
		// A write on each connection, confirmed.
		require.NoError(t, st.Park(ctx, entry("conn", i, time.Now().Add(time.Hour))))
	}
	// One more write, confirmed: the replica has acknowledged everything
	// either connection wrote so far.
	pipe := c.Pipeline()
	pipe.Set(ctx, "{relay}:probe", "x", 0)
	confirmed := pipe.Do(ctx, "wait", 1, 1000)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), confirmed.Val())
	replica.Pause()
	defer replica.Resume()
	for i := range 4 {
		require.ErrorIs(t, st.Park(ctx, entry("conn", 10+i, time.Now().Add(time.Hour))), schedule.ErrNotReplicated,
			"park %d confirmed while the replica was paused", i)
	}
}

// In cluster mode (--redis-mode cluster) the store parks, claims and
// removes on the shard that holds the {relay} hash tag, and waits for that
// shard's replica.
func TestClusterStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, replica := redistest.StartCluster(t)
	st, err := schedule.Dial(ctx, redistest.ClusterURL(primary, replica), "cluster")
	require.NoError(t, err)
	t.Cleanup(func() { st.Client().Close() })
	require.IsType(t, &redis.ClusterClient{}, st.Client())
	st, err = st.WithReplicas(1, 300*time.Millisecond)
	require.NoError(t, err)
	n, err := st.ConnectedReplicas(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	now := time.Now()
	require.NoError(t, st.Park(ctx, entry("c", 1, now.Add(-time.Second))))
	require.NoError(t, st.Park(ctx, entry("c", 2, now.Add(time.Hour))))
	// A cluster replica serves reads only to a connection that said READONLY.
	rconn := replica.Client().Conn()
	t.Cleanup(func() { rconn.Close() })
	require.NoError(t, rconn.ReadOnly(ctx).Err())
	require.Equal(t, int64(2), rconn.ZCard(ctx, "relay:{relay}:due:c").Val(), "the replica has both")
	c, err := st.Claim(ctx, "c", now, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, c, 1)
	require.Equal(t, "evt-1", c[0].Entry.EventID)
	require.NoError(t, st.Remove(ctx, "c", []string{c[0].Member}))
	dests, err := st.Dests(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, dests)

	replica.Pause()
	defer replica.Resume()
	require.ErrorIs(t, st.Park(ctx, entry("c", 3, now)), schedule.ErrNotReplicated)
	ps, err := st.Stats(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, int64(1), ps.Parked, "only the entry due in an hour")
}

// replyLoser is a connection whose next reply, once armed after a write,
// is lost: the command reached Redis, its answer never reaches the client.
type replyLoser struct {
	net.Conn
	armed *atomic.Bool
	wrote bool
}

func (c *replyLoser) Write(b []byte) (int, error) {
	c.wrote = c.armed.Load()
	return c.Conn.Write(b)
}

func (c *replyLoser) Read(b []byte) (int, error) {
	if c.wrote && c.armed.CompareAndSwap(true, false) {
		c.Conn.Close()
		return 0, lostReply{}
	}
	return c.Conn.Read(b)
}

type lostReply struct{}

func (lostReply) Error() string   { return "the reply was lost (test)" }
func (lostReply) Timeout() bool   { return true }
func (lostReply) Temporary() bool { return true }

// A park whose reply is lost may have stored the entry; Park then takes it
// out again, so that the event, which will wait in JetStream, is not also
// promoted from Redis.
func TestParkWhoseReplyIsLostIsTakenOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := redistest.Start(t, redistest.Options{})
	var armed atomic.Bool
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, PoolSize: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &replyLoser{Conn: conn, armed: &armed}, nil
		}})
	t.Cleanup(func() { c.Close() })
	st := schedule.NewStore(c)
	due := time.Now().Add(time.Hour)
	require.NoError(t, st.Park(ctx, entry("lost", 1, due)), "a park that works (and loads the script)")

	armed.Store(true)
	err := st.Park(ctx, entry("lost", 2, due))
	require.Error(t, err)
	require.ErrorContains(t, err, "taking the entry out again: <nil>")
	require.False(t, armed.Load(), "the reply of the park was the one lost")
	members := r.Client().ZRange(ctx, "relay:{relay}:due:lost", 0, -1).Val()
	require.Equal(t, []string{"evt-1#2@101"}, members, "the park whose reply was lost left nothing")
}

// Dial in sentinel mode asks the Sentinels for the primary first: one that
// does not answer is skipped, and when none gives the primary the error
// says, for each, why.
func TestDialSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	sentinel := redistest.StartSentinel(t, primary)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())

	// The first Sentinel refuses connections; the second gives the primary.
	st, err := schedule.Dial(ctx, "redis://"+refused+"?master_name="+redistest.MasterName+"&addr="+sentinel.Addr, "sentinel")
	require.NoError(t, err)
	t.Cleanup(func() { st.Client().Close() })
	require.NoError(t, st.Park(ctx, entry("s", 1, time.Now().Add(time.Hour))))
	require.Equal(t, int64(1), primary.Client().ZCard(ctx, "relay:{relay}:due:s").Val(), "parked on the primary")

	_, err = schedule.Dial(ctx, "redis://"+sentinel.Addr+"?master_name=nosuch", "sentinel")
	require.ErrorContains(t, err, `Sentinel `+sentinel.Addr+` knows no primary named "nosuch"`)

	_, err = schedule.Dial(ctx, "redis://"+refused+"?master_name=m", "sentinel")
	require.ErrorContains(t, err, `no Sentinel gave the address of primary "m": Sentinel `+refused+`: dial tcp `+refused)
	require.ErrorContains(t, err, "connection refused")
}

// Two stream messages with the same event id, parked at the same attempt
// (a producer that published the id again after the duplicate window, a
// replay), are kept apart: neither replaces the other, and each is
// republished under its own dedup id.
func TestParkKeepsMessagesOfTheSameEventIDApart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	first, second := entry("dup", 1, now.Add(-time.Second)), entry("dup", 1, now.Add(-time.Second))
	first.Origin, second.Origin = 10, 20
	second.Body = []byte(`{"second":true}`)
	require.NoError(t, b.store.Park(ctx, first))
	require.NoError(t, b.store.Park(ctx, second))
	require.NoError(t, b.store.Park(ctx, first), "parking the same message again replaces its own entry")
	require.NotEqual(t, first.MsgID(), second.MsgID())
	require.Equal(t, "evt-1#2@10", first.Member())
	require.Equal(t, "park:evt-1:2@10", first.MsgID())
	c, err := b.store.Claim(ctx, "dup", now, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, c, 2, "both parked")
	bodies := []string{string(c[0].Entry.Body), string(c[1].Entry.Body)}
	require.ElementsMatch(t, []string{string(first.Body), `{"second":true}`}, bodies)
	// The member and the dedup id end in the attempt and the origin.
	require.Equal(t, "evt-1#2@101", entry("dup", 1, now).Member())
	require.Equal(t, "park:evt-1:2@101", entry("dup", 1, now).MsgID())
}

// An entry without an origin (the stream sequence its event first came in
// as) is refused with an error naming its event and destination, and
// nothing is parked: every park has one, and without it two messages with
// the same event id would share one entry.
func TestParkRefusesAnEntryWithoutOrigin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	e := entry("no-origin", 1, time.Now())
	e.Origin = 0
	err := b.store.Park(ctx, e)
	require.ErrorContains(t, err, "entry of event evt-1 for destination no-origin has no origin")
	st, err := b.store.Stats(ctx, "no-origin")
	require.NoError(t, err)
	require.Zero(t, st.Parked, "nothing parked")
	dests, err := b.store.Dests(ctx)
	require.NoError(t, err)
	require.Empty(t, dests)
}

// Hasten brings an event's parked entry forward, and only that one: not
// another message with the same id (another origin), nor an id that starts
// like it or matches it as a pattern. Without an origin it refuses.
func TestHastenBringsAParkedEventForward(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	later := now.Add(time.Hour)
	mine := entry("h", 1, later)
	mine.EventID, mine.Origin = "ev*1", 5
	sameID := entry("h", 2, later)
	sameID.EventID, sameID.Origin = "ev*1", 6
	other := entry("h", 4, later)
	other.EventID, other.Origin = "ev*1#9", 5 // its member starts like mine
	near := entry("h", 5, later)
	near.EventID, near.Origin = "evx1", 5 // matched by an unescaped *
	for _, e := range []schedule.Entry{mine, sameID, other, near} {
		require.NoError(t, b.store.Park(ctx, e))
	}
	due := func() []string {
		c, err := b.store.Claim(ctx, "h", now, 10, time.Minute)
		require.NoError(t, err)
		var got []string
		for _, x := range c {
			got = append(got, x.Member)
		}
		return got
	}
	n, err := b.store.Hasten(ctx, "h", "ev*1", 5, now)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{mine.Member()}, due())

	n, err = b.store.Hasten(ctx, "h", "ev*1", 0, now)
	require.ErrorContains(t, err, "hasten event ev*1 of h: no origin given")
	require.Zero(t, n)
	require.Empty(t, due(), "nothing else brought forward")

	n, err = b.store.Hasten(ctx, "h", "nosuch", 5, now)
	require.NoError(t, err)
	require.Zero(t, n)
}

// The promoter republishes an entry as stream.Promoted: the event's own
// headers, its id, type, order key, attempts, origin and publish time,
// under the entry's dedup id. The other relay headers the entry keeps from
// the stored message (its old dedup id, attempt) are not carried: a
// filter or template on the type or key, and the Relay-Event-Type header
// of a delivery, see the same after a park as before.
func TestEntryEnvelopeIsWhatThePromoterPublishes(t *testing.T) {
	t.Parallel()
	pub := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	e := schedule.Entry{
		Dest: "orders", Subject: "relay.in.orders.k1", EventID: "evt-1", Attempts: 4, Origin: 12, Published: pub,
		Headers: nats.Header{"X-Trace": {"t"}, stream.HdrMsgID: {"evt-1"}, stream.HdrKey: {"k1"}, stream.HdrType: {"order.created"}, stream.HdrAttempt: {"1"}},
		Body:    []byte(`{}`),
	}
	m := e.Envelope().Msg(stream.Promoted, e.Subject, nil)
	require.Equal(t, "relay.in.orders.k1", m.Subject)
	require.Equal(t, []byte(`{}`), m.Data)
	require.Equal(t, nats.Header{
		"X-Trace":           {"t"},
		stream.HdrMsgID:     {"park:evt-1:4@12"},
		stream.HdrEventID:   {"evt-1"},
		stream.HdrAttempt:   {"4"},
		stream.HdrOrigin:    {"12"},
		stream.HdrPublished: {"2025-03-01T12:00:00Z"},
		stream.HdrKey:       {"k1"},
		stream.HdrType:      {"order.created"},
	}, m.Header)
	require.Equal(t, e.MsgID(), m.Header.Get(stream.HdrMsgID))
}
