package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// deadLettered records the stream sequences a relay dead-lettered.
type deadLettered struct {
	mu   sync.Mutex
	seqs []uint64
}

func (d *deadLettered) add(o Outcome) {
	if o.Decision.Action == DeadLetter {
		d.mu.Lock()
		d.seqs = append(d.seqs, o.Seq)
		d.mu.Unlock()
	}
}

func (d *deadLettered) list() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]uint64(nil), d.seqs...)
}

// publishGhosts publishes n events for a destination that does not exist.
func publishGhosts(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	for range n {
		_, err := js.Publish(context.Background(), "relay.in.ghost", []byte(`{}`))
		require.NoError(t, err)
	}
}

// runRelay runs a relay until the test ends.
func runRelay(t *testing.T, cfg Config) *Relay {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	r, err := New(ctx, cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return r
}

func waitCheckState(t *testing.T, js jetstream.JetStream, what string, cond func(routing.CheckState) bool) routing.CheckState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, ok, err := routing.ReadCheckState(context.Background(), js)
		require.NoError(t, err)
		if ok && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the check state: %s (last: %+v)", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventsCreated is when the events stream was created.
func eventsCreated(t *testing.T, js jetstream.JetStream) time.Time {
	t.Helper()
	s, err := js.Stream(context.Background(), stream.EventsStream)
	require.NoError(t, err)
	return s.CachedInfo().Created
}

// leaseFixture is a server and its state bucket, for tests of the lease on
// its own.
func leaseFixture(t *testing.T) (streamtest.Server, jetstream.KeyValue) {
	t.Helper()
	srv := streamtest.Start(t)
	kv, err := srv.JS.KeyValue(context.Background(), stream.StateBucket)
	require.NoError(t, err)
	return srv, kv
}

// checkLease is the check's lease of replica id, as unroutedCheck.hold
// makes it.
func checkLease(kv jetstream.KeyValue, id string, takeover time.Duration) *lease.Lease {
	return &lease.Lease{KV: kv, Key: routing.CheckKey, ID: id, Takeover: takeover, Now: time.Now,
		Holder: func(v []byte) (string, error) {
			st, err := lease.Decode[routing.CheckState](routing.CheckKey, v)
			return st.Holder, err
		}}
}

// takeCheck is a take for lease.acquire that records the sequence the
// check goes on from, as unroutedCheck.hold does (without the stream's
// creation time).
func takeCheck(id string, checked *uint64) func([]byte) ([]byte, error) {
	return func(old []byte) ([]byte, error) {
		*checked = 0
		if old != nil {
			st, err := lease.Decode[routing.CheckState](routing.CheckKey, old)
			if err != nil {
				return nil, err
			}
			*checked = st.Checked
		}
		return checkJSON(routing.CheckState{Holder: id, Checked: *checked}), nil
	}
}

func discardf(string, ...any) {}

func putCheckState(t *testing.T, js jetstream.JetStream, st routing.CheckState) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), stream.StateBucket)
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), routing.CheckKey, checkJSON(st))
	require.NoError(t, err)
}

// A replica that holds the check and goes silent (killed, partitioned) is
// taken over after CheckTakeover, from the sequence it recorded: what it
// had checked is not checked again, and nothing after it is skipped.
func TestCheckTakesOverFromASilentHolderWhereItLeftOff(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	publishGhosts(t, srv.JS, 5)
	putCheckState(t, srv.JS, routing.CheckState{Holder: "r-gone", Checked: 3, Stream: eventsCreated(t, srv.JS)})

	const takeover = 2 * time.Second
	var dl deadLettered
	start := time.Now()
	runRelay(t, Config{JS: srv.JS, CheckTakeover: takeover, OnDelivery: dl.add})

	st := waitCheckState(t, srv.JS, "taken over and caught up", func(st routing.CheckState) bool {
		return st.Holder != "r-gone" && st.Checked == 5
	})
	require.GreaterOrEqual(t, time.Since(start), takeover, "the silent holder kept the check for CheckTakeover")
	require.NotEmpty(t, st.Holder)
	require.True(t, eventsCreated(t, srv.JS).Equal(st.Stream), "the state says which stream it counts in")
	require.ElementsMatch(t, []uint64{4, 5}, dl.list(), "only the events after the recorded sequence are checked")

	// And it goes on with new events.
	publishGhosts(t, srv.JS, 1)
	waitCheckState(t, srv.JS, "checked the new event", func(st routing.CheckState) bool { return st.Checked == 6 })
	require.ElementsMatch(t, []uint64{4, 5, 6}, dl.list())
}

// A replica whose lease was taken stops checking: the next renewal finds
// the key changed.
func TestCheckLeaseIsLostWhenTheKeyChanges(t *testing.T) {
	t.Parallel()
	srv, kv := leaseFixture(t)
	ctx := context.Background()

	// Renewals come every second: a takeover time of 8 leaves a loaded
	// machine seven renewals to be late by before the lease looks dead.
	const takeover = 8 * time.Second
	l := checkLease(kv, "r-a", takeover)
	var checked uint64
	_, err := l.Acquire(ctx, takeCheck("r-a", &checked), discardf)
	require.NoError(t, err)
	require.Zero(t, checked, "a new check starts at the beginning")

	// A second replica waits while the first renews, for longer than the
	// takeover time.
	other := checkLease(kv, "r-b", takeover)
	octx, ocancel := context.WithTimeout(ctx, takeover+2*lease.Renew)
	defer ocancel()
	kctx, kcancel := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() {
		kept <- l.Keep(kctx, lease.Renew, func() []byte { return checkJSON(routing.CheckState{Holder: "r-a", Checked: 7}) }, nil)
	}()
	var otherChecked uint64
	_, err = other.Acquire(octx, takeCheck("r-b", &otherChecked), discardf)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no takeover while the holder renews")
	st, _, err := routing.ReadCheckState(ctx, srv.JS)
	require.NoError(t, err)
	require.Equal(t, "r-a", st.Holder)
	require.EqualValues(t, 7, st.Checked, "renewals record the progress")

	// Someone else writes the key: the holder finds out at its next renewal.
	putCheckState(t, srv.JS, routing.CheckState{Holder: "r-c", Checked: 7})
	select {
	case err := <-kept:
		require.ErrorIs(t, err, lease.ErrLost)
	case <-time.After(time.Minute):
		t.Fatal("the holder did not notice it lost the lease")
	}
	kcancel()

	// Released, the lease is free at once.
	putCheckState(t, srv.JS, routing.CheckState{Checked: 9})
	_, err = other.Acquire(ctx, takeCheck("r-b", &otherChecked), discardf)
	require.NoError(t, err)
	require.EqualValues(t, 9, otherChecked)
}

// A check state recorded for an events stream that was since deleted and
// created again (its sequences start at 1 again) does not skip the new
// stream's events.
func TestCheckStartsOverOnARecreatedStream(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	publishGhosts(t, srv.JS, 2)
	putCheckState(t, srv.JS, routing.CheckState{Checked: 100, Stream: eventsCreated(t, srv.JS).Add(-time.Hour)})

	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add})
	waitCheckState(t, srv.JS, "checked the new stream", func(st routing.CheckState) bool { return st.Checked == 2 })
	require.ElementsMatch(t, []uint64{1, 2}, dl.list())
}

// An event whose destination token cannot name a destination (nor be a key
// of the store) is dead-lettered, and the check goes on past it.
func TestCheckDeadLettersATokenNoDestinationCanHave(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	for _, subj := range []string{"relay.in.orders@v2", "relay.in.Orders", "relay.in.ghost"} {
		_, err := srv.JS.Publish(ctx, subj, []byte(`{}`))
		require.NoError(t, err)
	}
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add})
	waitCheckState(t, srv.JS, "checked all three", func(st routing.CheckState) bool { return st.Checked == 3 })
	require.ElementsMatch(t, []uint64{1, 2, 3}, dl.list())
}

// CheckLag counts what the check has not read: everything before it first
// runs, nothing once it has caught up.
func TestCheckLagCountsWhatIsNotReadYet(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	lag, err := routing.CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.Zero(t, lag, "an empty stream")

	publishGhosts(t, srv.JS, 3)
	lag, err = routing.CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.EqualValues(t, 3, lag, "no check has run")

	runRelay(t, Config{JS: srv.JS})
	waitCheckState(t, srv.JS, "caught up", func(st routing.CheckState) bool { return st.Checked == 3 })
	lag, err = routing.CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.Zero(t, lag)

	// Typed events are the router's: the check does not read them, and
	// they are no lag of its.
	_, err = srv.JS.Publish(ctx, stream.TypeSubject("order.created"), []byte(`{}`))
	require.NoError(t, err)
	lag, err = routing.CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.Zero(t, lag, "a typed event after the last event checked")
	publishGhosts(t, srv.JS, 1)
	waitCheckState(t, srv.JS, "checked the event after the typed one", func(st routing.CheckState) bool { return st.Checked == 5 })
	lag, err = routing.CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.Zero(t, lag)
}

// A renewal that the server applied but that timed out here leaves the
// holder's revision behind: the next write finds the key still its own and
// goes on. A replica that no longer holds the lease cannot release it.
func TestCheckLeaseWritesSurviveAStaleRevision(t *testing.T) {
	t.Parallel()
	srv, kv := leaseFixture(t)
	ctx := context.Background()
	l := checkLease(kv, "r-a", 10*time.Second)
	var checked uint64
	_, err := l.Acquire(ctx, takeCheck("r-a", &checked), discardf)
	require.NoError(t, err)
	stale := l.Rev

	// The lost write: the same holder, a newer revision.
	_, err = kv.Put(ctx, routing.CheckKey, checkJSON(routing.CheckState{Holder: "r-a", Checked: 4}))
	require.NoError(t, err)
	ok, err := l.Write(checkJSON(routing.CheckState{Holder: "r-a", Checked: 5}))
	require.NoError(t, err)
	require.True(t, ok, "still the holder")
	st, _, err := routing.ReadCheckState(ctx, srv.JS)
	require.NoError(t, err)
	require.Equal(t, "r-a", st.Holder)
	require.EqualValues(t, 5, st.Checked)

	// A replica that lost the lease long ago releases nothing.
	old := checkLease(kv, "r-b", 10*time.Second)
	old.Rev = stale
	_, err = old.Write(checkJSON(routing.CheckState{Checked: 1}))
	require.ErrorIs(t, err, lease.ErrLost)
	st, _, err = routing.ReadCheckState(ctx, srv.JS)
	require.NoError(t, err)
	require.Equal(t, "r-a", st.Holder, "the holder keeps the lease")
	require.EqualValues(t, 5, st.Checked)
}

// addPausedDest adds destination name, paused forever: it is known, and
// nothing is delivered to it.
func addPausedDest(t *testing.T, js jetstream.JetStream, name string) destination.Destination {
	t.Helper()
	ctx := context.Background()
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: name, URL: "https://example.com/hook"})
	require.NoError(t, err)
	d, err := st.Update(ctx, name, func(d *destination.Destination) error {
		d.PausedUntil = destination.Forever
		return nil
	})
	require.NoError(t, err)
	return d
}

// publishTo publishes n events on subj and returns the sequence of the last.
func publishTo(t *testing.T, js jetstream.JetStream, subj string, n int) uint64 {
	t.Helper()
	var last uint64
	for range n {
		ack, err := js.Publish(context.Background(), subj, []byte(`{}`))
		require.NoError(t, err)
		last = ack.Sequence
	}
	return last
}

// checkedCount is how many events the check went through.
func checkedCount(m *Metrics) uint64 {
	return uint64(testutil.ToFloat64(m.checkRead))
}

// Events for known destinations, keyed or not, are not dead-lettered; an
// event for an unknown destination among them is, once. The check reads
// the events of subjects whose destination it does not know only: of those
// stored while it runs, only the ghost's.
func TestCheckDeadLettersOnlyEventsOfUnknownDestinations(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	addPausedDest(t, srv.JS, "other")
	publishTo(t, srv.JS, "relay.in.known", 150)
	last := publishTo(t, srv.JS, "relay.in.other.k1", 150) // keyed: stored as relay.ev.other.<bucket>

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m})
	waitCheckState(t, srv.JS, "checked the known events", func(st routing.CheckState) bool { return st.Checked == last })
	require.Empty(t, dl.list())
	require.LessOrEqual(t, checkedCount(m), uint64(300), "each event read at most once")
	before := checkedCount(m)

	// Events published while it runs: only the ghost's is read.
	publishTo(t, srv.JS, "relay.in.known", 100)
	ghost := publishTo(t, srv.JS, "relay.in.ghost", 1)
	last = publishTo(t, srv.JS, "relay.in.known", 100)
	waitCheckState(t, srv.JS, "checked the mixed range", func(st routing.CheckState) bool { return st.Checked == last })
	require.Equal(t, []uint64{ghost}, dl.list())
	require.Equal(t, before+1, checkedCount(m), "only the ghost's event read")
	require.Positive(t, testutil.ToFloat64(m.checkListed), "the others settled from the list of subjects")
}

// Events deleted before the check reads them are skipped, and the check
// goes on past them.
func TestCheckReadsPastDeletedEvents(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	publishGhosts(t, srv.JS, 5)
	s, err := srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(ctx, 3))
	require.NoError(t, s.DeleteMsg(ctx, 5))

	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add})
	waitCheckState(t, srv.JS, "checked what is left", func(st routing.CheckState) bool { return st.Checked == 5 })
	require.ElementsMatch(t, []uint64{1, 2, 4}, dl.list())

	publishGhosts(t, srv.JS, 1)
	waitCheckState(t, srv.JS, "checked the next event", func(st routing.CheckState) bool { return st.Checked == 6 })
	require.ElementsMatch(t, []uint64{1, 2, 4, 6}, dl.list())
}

// A destination added while the check was behind routes only what was
// published after it was added: an event published for it before it
// existed is still dead-lettered.
func TestCheckReadsAcrossADestinationAddedMeanwhile(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	publishTo(t, srv.JS, "relay.in.known", 150)
	addPausedDest(t, srv.JS, "later")
	publishTo(t, srv.JS, "relay.in.later", 100)
	last := publishTo(t, srv.JS, "relay.in.known", 50)

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m})
	waitCheckState(t, srv.JS, "checked the backlog", func(st routing.CheckState) bool { return st.Checked == last })
	require.GreaterOrEqual(t, checkedCount(m), uint64(100), "the events of the destination added after the first event read")
	require.LessOrEqual(t, checkedCount(m), uint64(300))
	require.Empty(t, dl.list())

	// The same, with an event for the second destination published before
	// it was added: it is read, and dead-lettered.
	srv2 := streamtest.Start(t)
	addPausedDest(t, srv2.JS, "known")
	publishTo(t, srv2.JS, "relay.in.known", 199)
	early := publishTo(t, srv2.JS, "relay.in.later", 1) // the last event before it starts
	addPausedDest(t, srv2.JS, "later")
	last = publishTo(t, srv2.JS, "relay.in.later", 100)

	m2 := NewMetrics(prometheus.NewRegistry())
	var dl2 deadLettered
	runRelay(t, Config{JS: srv2.JS, OnDelivery: dl2.add, Metrics: m2})
	waitCheckState(t, srv2.JS, "checked the backlog", func(st routing.CheckState) bool { return st.Checked == last })
	require.Equal(t, []uint64{early}, dl2.list())
	require.GreaterOrEqual(t, checkedCount(m2), uint64(101))
	require.LessOrEqual(t, checkedCount(m2), last)
}

// Events that aged out (or were purged) before the check got to them do not
// stop it, even when a destination was added among them.
func TestCheckReadsPastEventsThatAgedOut(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	addPausedDest(t, srv.JS, "known")
	publishTo(t, srv.JS, "relay.in.known", 100)
	addPausedDest(t, srv.JS, "later") // starts at 101
	publishTo(t, srv.JS, "relay.in.later", 150)
	last := publishTo(t, srv.JS, "relay.in.known", 150)
	s, err := srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSequence(151))) // 1..150 gone

	m := NewMetrics(prometheus.NewRegistry())
	runRelay(t, Config{JS: srv.JS, Metrics: m})
	waitCheckState(t, srv.JS, "checked what is left", func(st routing.CheckState) bool { return st.Checked == last })
	require.LessOrEqual(t, checkedCount(m), uint64(250), "only what is left read, at most")
}

// Events published while the check runs are checked as they are stored:
// those of unknown destinations, and those of a destination published
// before it was added, are dead-lettered in stream order.
func TestCheckReadsEventsPublishedWhileItRuns(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	publishTo(t, srv.JS, "relay.in.known", 50)
	early := publishTo(t, srv.JS, "relay.in.later.k1", 1) // before "later" exists
	addPausedDest(t, srv.JS, "later")

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m})
	var want []uint64
	want = append(want, early)
	for i := range 20 {
		publishTo(t, srv.JS, "relay.in.known", 10)
		publishTo(t, srv.JS, "relay.in.later.k2", 5)
		switch i % 4 {
		case 1:
			want = append(want, publishTo(t, srv.JS, "relay.in.ghost", 1))
		case 3:
			want = append(want, publishTo(t, srv.JS, "relay.in.other.k3", 1)) // keyed: relay.ev.other.<bucket>
		}
	}
	last := publishTo(t, srv.JS, "relay.in.known", 1)
	waitCheckState(t, srv.JS, "checked every event", func(st routing.CheckState) bool { return st.Checked == last })
	require.Equal(t, want, dl.list(), "every event of an unknown destination dead-lettered once, in stream order")
	require.LessOrEqual(t, checkedCount(m), last, "each event read at most once")
}

// The check misses no event for an unknown destination while events are
// being stored by two producers at once.
func TestCheckMissesNoEventStoredMeanwhile(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	addPausedDest(t, srv.JS, "known")
	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m})

	// Every other burst has one event for a destination no one added, each
	// under a name of its own (so each is a subject the list has not had);
	// two producers publish at once.
	var mu sync.Mutex
	var ghosts []uint64
	var last atomic.Uint64
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(p), 7))
			for b := range 100 {
				ghostAt := -1
				if b%2 == 1 {
					ghostAt = rnd.IntN(20)
				}
				for i := range 20 {
					subj := "relay.in.known"
					if i == ghostAt {
						subj = fmt.Sprintf("relay.in.ghost%d_%d", p, b)
					}
					ack, err := srv.JS.Publish(ctx, subj, nil)
					if !assert.NoError(t, err) {
						return
					}
					for cur := last.Load(); ack.Sequence > cur && !last.CompareAndSwap(cur, ack.Sequence); cur = last.Load() {
					}
					if i == ghostAt {
						mu.Lock()
						ghosts = append(ghosts, ack.Sequence)
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	waitCheckState(t, srv.JS, "checked every event", func(st routing.CheckState) bool { return st.Checked == last.Load() })
	slices.Sort(ghosts)
	require.Equal(t, ghosts, dl.list(), "every event of an unknown destination dead-lettered once, in stream order")
	require.LessOrEqual(t, checkedCount(m), last.Load(), "each event read at most once")
}

// Events of several unknown destinations, each between known ones, are
// each dead-lettered.
func TestCheckDeadLettersEveryUnknownDestination(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	var want []uint64
	for i := range 3 {
		publishTo(t, srv.JS, "relay.in.known", 10)
		want = append(want, publishTo(t, srv.JS, fmt.Sprintf("relay.in.ghost%d", i), 1))
	}
	last := publishTo(t, srv.JS, "relay.in.known", 10)

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m})
	waitCheckState(t, srv.JS, "checked every event", func(st routing.CheckState) bool { return st.Checked == last })
	require.Equal(t, want, dl.list())
	require.LessOrEqual(t, checkedCount(m), last, "each event read at most once")
}

// When the check reads, its pull requests ask for idle heartbeats at most
// every 2s (see TestPullRequestsAskForShortHeartbeats in package
// integration).
func TestCheckReadsWithShortHeartbeats(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	nc, err := nats.Connect(srv.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	reqs := streamtest.WatchPullRequests(t, nc, "$JS.API.CONSUMER.MSG.NEXT."+stream.EventsStream+".*")
	runRelay(t, Config{JS: srv.JS})
	streamtest.RequireShortHeartbeats(t, reqs, "the check's consumer")
}

// The check goes past events deleted or purged before it got to them, also
// when none are left, and follows a destination added while it runs.
func TestCheckReadsPastRemovedEventsAndAddedDestinations(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	s, err := srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	publishGhosts(t, srv.JS, 6)
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSequence(3))) // 1, 2 gone
	require.NoError(t, s.DeleteMsg(ctx, 4))

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m})
	waitCheckState(t, srv.JS, "read what is left", func(st routing.CheckState) bool { return st.Checked == 6 })
	require.Equal(t, []uint64{3, 5, 6}, dl.list())

	// Nothing left at all: the check still moves to the last sequence.
	publishGhosts(t, srv.JS, 2) // 7, 8
	require.NoError(t, s.Purge(ctx))
	waitCheckState(t, srv.JS, "past the purged events", func(st routing.CheckState) bool { return st.Checked == 8 })

	// Events for "late" are dead-lettered until it is added, and not after.
	early := publishTo(t, srv.JS, "relay.in.late", 1)
	waitCheckState(t, srv.JS, "read the early event", func(st routing.CheckState) bool { return st.Checked == early })
	addPausedDest(t, srv.JS, "late")
	last := publishTo(t, srv.JS, "relay.in.late", 5)
	waitCheckState(t, srv.JS, "read the later events", func(st routing.CheckState) bool { return st.Checked == last })
	// 7 and 8 may have been read, and dead-lettered, before the purge.
	got := slices.DeleteFunc(dl.list(), func(seq uint64) bool { return seq == 7 || seq == 8 })
	require.Equal(t, []uint64{3, 5, 6, early}, got)
	require.Positive(t, checkedCount(m))
}

// Events are looked up, and read whole for their dead letter, at the
// stream's leader (STREAM.MSG.GET), never by direct get: a mirror that has
// not caught up can answer a direct get, and its "not found" would skip an
// event.
func TestCheckLooksEventsUpAtTheStreamsLeader(t *testing.T) {
	t.Parallel()
	{
		{
			srv := streamtest.Start(t)
			nc, err := nats.Connect(srv.URL)
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			var direct, leader atomic.Int64
			for subj, n := range map[string]*atomic.Int64{
				"$JS.API.DIRECT.GET." + stream.EventsStream:        &direct,
				"$JS.API.DIRECT.GET." + stream.EventsStream + ".>": &direct,
				"$JS.API.STREAM.MSG.GET." + stream.EventsStream:    &leader,
			} {
				sub, err := nc.Subscribe(subj, func(*nats.Msg) { n.Add(1) })
				require.NoError(t, err)
				t.Cleanup(func() { _ = sub.Unsubscribe() })
			}
			require.NoError(t, nc.Flush())

			addPausedDest(t, srv.JS, "known")
			var dl deadLettered
			runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add})
			publishTo(t, srv.JS, "relay.in.known", 5)
			ghost := publishTo(t, srv.JS, "relay.in.ghost", 1)
			last := publishTo(t, srv.JS, "relay.in.known", 5)
			waitCheckState(t, srv.JS, "checked every event", func(st routing.CheckState) bool { return st.Checked == last })
			require.Equal(t, []uint64{ghost}, dl.list())
			require.NoError(t, nc.Flush())
			require.Positive(t, leader.Load(), "the ghost event read at the leader")
			require.Zero(t, direct.Load(), "no direct get")
		}
	}
}

// TestCheckLeavesNoConsumerBetweenRounds: the check reads, when it must,
// through a consumer of its own that it deletes at the end of the round:
// the server keeps nothing for it between rounds. Each event of an unknown
// destination is dead-lettered once across rounds.
func TestCheckLeavesNoConsumerBetweenRounds(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	publishGhosts(t, srv.JS, 3)
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add})
	waitCheckState(t, srv.JS, "checked the first three", func(st routing.CheckState) bool { return st.Checked == 3 })
	publishGhosts(t, srv.JS, 2)
	waitCheckState(t, srv.JS, "checked the two after", func(st routing.CheckState) bool { return st.Checked == 5 })
	require.ElementsMatch(t, []uint64{1, 2, 3, 4, 5}, dl.list())

	s, err := srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var readers []string
		for info := range s.ListConsumers(ctx).Info() {
			if info.Config.Description == "relay unknown-destination check" {
				readers = append(readers, info.Name)
			}
		}
		if len(readers) == 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "the check's consumers left: %v", readers)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCheckReadsEveryEventWithManySubjects: with more event subjects than
// it lists (checkListMax), the check reads every event's headers instead;
// it dead-letters the same events.
func TestCheckReadsEveryEventWithManySubjects(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	addPausedDest(t, srv.JS, "other")
	publishTo(t, srv.JS, "relay.in.known", 20)
	ghost := publishTo(t, srv.JS, "relay.in.ghost", 1)
	last := publishTo(t, srv.JS, "relay.in.other.k1", 20)

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m, checkListMax: 2}) // 3 subjects
	waitCheckState(t, srv.JS, "checked every event", func(st routing.CheckState) bool { return st.Checked == last })
	require.Equal(t, []uint64{ghost}, dl.list())
	require.Equal(t, last, checkedCount(m), "every event read")
	require.Zero(t, testutil.ToFloat64(m.checkListed))
}

// checkJSON is st as the check's lease holds it.
func checkJSON(st routing.CheckState) []byte {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err)
	}
	return b
}
