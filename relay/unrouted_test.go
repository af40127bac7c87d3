package relay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
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

func runRelay(t *testing.T, cfg Config) {
	t.Helper()
	startRelay(t, cfg, defaultCheckTuning)
}

// startRelay runs a relay whose check goes as tune says until the test ends.
func startRelay(t *testing.T, cfg Config, tune checkTuning) *Relay {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	r, err := New(ctx, cfg)
	require.NoError(t, err)
	r.tune = tune
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return r
}

func waitCheckState(t *testing.T, js jetstream.JetStream, what string, cond func(CheckState) bool) CheckState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, ok, err := ReadCheckState(context.Background(), js)
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

// leaseFixture is a server, a relay that is not running (for acquire's
// look-ups) and the state bucket, for tests of the lease on its own.
func leaseFixture(t *testing.T) (streamtest.Server, *Relay, jetstream.KeyValue) {
	t.Helper()
	srv := streamtest.Start(t)
	r, err := New(context.Background(), Config{JS: srv.JS, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	kv, err := srv.JS.KeyValue(context.Background(), stream.StateBucket)
	require.NoError(t, err)
	return srv, r, kv
}

func putCheckState(t *testing.T, js jetstream.JetStream, st CheckState) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), stream.StateBucket)
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), UnroutedCheckKey, st.encode())
	require.NoError(t, err)
}

// A replica that holds the check and goes silent (killed, partitioned) is
// taken over after CheckTakeover, from the sequence it recorded: what it
// had checked is not checked again, and nothing after it is skipped.
func TestCheckTakesOverFromASilentHolderWhereItLeftOff(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	publishGhosts(t, srv.JS, 5)
	putCheckState(t, srv.JS, CheckState{Holder: "r-gone", Checked: 3, Stream: eventsCreated(t, srv.JS)})

	const takeover = 2 * time.Second
	var dl deadLettered
	start := time.Now()
	runRelay(t, Config{JS: srv.JS, CheckTakeover: takeover, OnDelivery: dl.add})

	st := waitCheckState(t, srv.JS, "taken over and caught up", func(st CheckState) bool {
		return st.Holder != "r-gone" && st.Checked == 5
	})
	require.GreaterOrEqual(t, time.Since(start), takeover, "the silent holder kept the check for CheckTakeover")
	require.NotEmpty(t, st.Holder)
	require.ElementsMatch(t, []uint64{4, 5}, dl.list(), "only the events after the recorded sequence are checked")

	// And it goes on with new events.
	publishGhosts(t, srv.JS, 1)
	waitCheckState(t, srv.JS, "checked the new event", func(st CheckState) bool { return st.Checked == 6 })
	require.ElementsMatch(t, []uint64{4, 5, 6}, dl.list())
}

// A replica whose lease was taken stops checking: the next renewal finds
// the key changed.
func TestCheckLeaseIsLostWhenTheKeyChanges(t *testing.T) {
	t.Parallel()
	srv, r, kv := leaseFixture(t)
	ctx := context.Background()

	// Renewals come every second: a takeover time of 8 leaves a loaded
	// machine seven renewals to be late by before the lease looks dead.
	const takeover = 8 * time.Second
	l := &checkLease{kv: kv, id: "r-a", takeover: takeover}
	checked, err := l.acquire(ctx, r)
	require.NoError(t, err)
	require.Zero(t, checked, "a new check starts at the beginning")

	// A second replica waits while the first renews, for longer than the
	// takeover time.
	other := &checkLease{kv: kv, id: "r-b", takeover: takeover}
	octx, ocancel := context.WithTimeout(ctx, takeover+2*leaseRenew)
	defer ocancel()
	var done atomic.Uint64
	done.Store(7)
	kctx, kcancel := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- l.keep(kctx, srv.JS, &done) }()
	_, err = other.acquire(octx, r)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no takeover while the holder renews")
	st, _, err := ReadCheckState(ctx, srv.JS)
	require.NoError(t, err)
	created := eventsCreated(t, srv.JS)
	require.Equal(t, "r-a", st.Holder)
	require.EqualValues(t, 7, st.Checked, "renewals record the progress")
	require.True(t, created.Equal(st.Stream), "and which stream it counts in")

	// Someone else writes the key: the holder finds out at its next renewal.
	putCheckState(t, srv.JS, CheckState{Holder: "r-c", Checked: 7, Stream: created})
	select {
	case err := <-kept:
		require.ErrorIs(t, err, errLeaseLost)
	case <-time.After(time.Minute):
		t.Fatal("the holder did not notice it lost the lease")
	}
	kcancel()

	// Released, the lease is free at once.
	putCheckState(t, srv.JS, CheckState{Checked: 9, Stream: created})
	checked, err = other.acquire(ctx, r)
	require.NoError(t, err)
	require.EqualValues(t, 9, checked)
}

// A check state recorded for an events stream that was since deleted and
// created again (its sequences start at 1 again) does not skip the new
// stream's events.
func TestCheckStartsOverOnARecreatedStream(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	publishGhosts(t, srv.JS, 2)
	putCheckState(t, srv.JS, CheckState{Checked: 100, Stream: eventsCreated(t, srv.JS).Add(-time.Hour)})

	var dl deadLettered
	runRelay(t, Config{JS: srv.JS, OnDelivery: dl.add})
	waitCheckState(t, srv.JS, "checked the new stream", func(st CheckState) bool { return st.Checked == 2 })
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
	waitCheckState(t, srv.JS, "checked all three", func(st CheckState) bool { return st.Checked == 3 })
	require.ElementsMatch(t, []uint64{1, 2, 3}, dl.list())
}

// CheckLag counts what the check has not read: everything before it first
// runs, nothing once it has caught up.
func TestCheckLagCountsWhatIsNotReadYet(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	lag, err := CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.Zero(t, lag, "an empty stream")

	publishGhosts(t, srv.JS, 3)
	lag, err = CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.EqualValues(t, 3, lag, "no check has run")

	runRelay(t, Config{JS: srv.JS})
	waitCheckState(t, srv.JS, "caught up", func(st CheckState) bool { return st.Checked == 3 })
	lag, err = CheckLag(ctx, srv.JS)
	require.NoError(t, err)
	require.Zero(t, lag)
}

// A renewal that the server applied but that timed out here leaves the
// holder's revision behind: the next write finds the key still its own and
// goes on. A replica that no longer holds the lease cannot release it.
func TestCheckLeaseWritesSurviveAStaleRevision(t *testing.T) {
	t.Parallel()
	srv, r, kv := leaseFixture(t)
	ctx := context.Background()
	l := &checkLease{kv: kv, id: "r-a", takeover: 10 * time.Second}
	_, err := l.acquire(ctx, r)
	require.NoError(t, err)
	stale := l.rev

	// The lost write: the same holder, a newer revision.
	_, err = kv.Put(ctx, UnroutedCheckKey, l.state(4))
	require.NoError(t, err)
	require.NoError(t, l.write(l.state(5)), "still the holder")
	st, _, err := ReadCheckState(ctx, srv.JS)
	require.NoError(t, err)
	require.Equal(t, "r-a", st.Holder)
	require.EqualValues(t, 5, st.Checked)

	// A replica that lost the lease long ago releases nothing.
	old := &checkLease{kv: kv, id: "r-b", rev: stale, stream: l.stream}
	old.release(1)
	st, _, err = ReadCheckState(ctx, srv.JS)
	require.NoError(t, err)
	require.Equal(t, "r-a", st.Holder, "the holder keeps the lease")
	require.EqualValues(t, 5, st.Checked)
}

// addPausedDest adds destination name, paused forever: it is known, and
// nothing is delivered to it.
func addPausedDest(t *testing.T, js jetstream.JetStream, name string) Destination {
	t.Helper()
	ctx := context.Background()
	st, err := NewStore(ctx, js)
	require.NoError(t, err)
	_, err = st.Add(ctx, Destination{Name: name, URL: "https://example.com/hook"})
	require.NoError(t, err)
	d, err := st.Update(ctx, name, func(d *Destination) error {
		d.PausedUntil = Forever
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

// checkedCount is how many events the check went through, how.
func checkedCount(m *Metrics, how string) uint64 {
	c := map[string]prometheus.Counter{"counted": m.checkCounted, "listed": m.checkListed, "read": m.checkRead}[how]
	return uint64(testutil.ToFloat64(c))
}

// A range of events that are all for known destinations is settled by the
// server's count, without reading any event; a range with an event for an
// unknown destination in it is read, and that event dead-lettered.
func TestCheckCountsRangesWhereEveryDestinationIsKnown(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	addPausedDest(t, srv.JS, "other")
	publishTo(t, srv.JS, "relay.in.known", 150)
	last := publishTo(t, srv.JS, "relay.in.other.k1", 150) // keyed: stored as relay.ev.other.<bucket>.k1

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, checkTuning{countMin: 100, subjectsPerEvent: 100})
	waitCheckState(t, srv.JS, "checked the known events", func(st CheckState) bool { return st.Checked == last })
	require.EqualValues(t, 300, checkedCount(m, "counted"))
	require.Zero(t, checkedCount(m, "read"), "nothing read")

	// Events published while it runs are read as they come.
	publishTo(t, srv.JS, "relay.in.known", 100)
	ghost := publishTo(t, srv.JS, "relay.in.ghost", 1)
	last = publishTo(t, srv.JS, "relay.in.known", 100)
	waitCheckState(t, srv.JS, "checked the mixed range", func(st CheckState) bool { return st.Checked == last })
	require.Equal(t, []uint64{ghost}, dl.list())
	require.EqualValues(t, 300, checkedCount(m, "counted"))
	require.EqualValues(t, 201, checkedCount(m, "read"))
}

// A backlog with one event for an unknown destination in it is not settled
// by the count as a whole: the part before that event is (to within
// countMin events), the rest is read, and that event dead-lettered.
func TestCheckReadsABacklogTheCountDoesNotSettle(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	publishTo(t, srv.JS, "relay.in.known", 1000)
	ghost := publishTo(t, srv.JS, "relay.in.ghost", 1)
	last := publishTo(t, srv.JS, "relay.in.known.k1", 300)

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	const countMin = 100
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, checkTuning{countMin: countMin, subjectsPerEvent: 100})
	waitCheckState(t, srv.JS, "checked the backlog", func(st CheckState) bool { return st.Checked == last })
	require.Equal(t, []uint64{ghost}, dl.list())
	counted, read := checkedCount(m, "counted"), checkedCount(m, "read")
	require.EqualValues(t, last, counted+read, "every event counted or read, once")
	require.Less(t, counted, ghost, "the unknown event is read")
	require.GreaterOrEqual(t, counted, ghost-1-countMin, "what came before it is counted, to within countMin")
}

// The count never settles a range that holds an event for an unknown
// destination, also while events are being stored during the count.
func TestCheckCountNeverSettlesARangeWithAnUnknownEvent(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	d := addPausedDest(t, srv.JS, "known")
	r, err := New(ctx, Config{JS: srv.JS, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	r.dests.dests[d.Name] = d

	// A producer publishes bursts of 100 events, in half of them one for an
	// unknown destination; between bursts it waits for two counts.
	prnd, rnd := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(3, 4)) // one each: the producer's, the counter's
	var mu sync.Mutex
	var ghosts []uint64
	counted := make(chan struct{})
	published := make(chan error, 1)
	const bursts = 40
	go func() {
		defer close(published)
		for b := range bursts {
			ghostAt := -1
			if b%2 == 1 {
				ghostAt = prnd.IntN(100)
			}
			for i := range 100 {
				subj := "relay.in.known"
				if i == ghostAt {
					subj = "relay.in.ghost"
				}
				ack, err := srv.JS.Publish(ctx, subj, nil)
				if err != nil {
					published <- err
					return
				}
				if i == ghostAt {
					mu.Lock()
					ghosts = append(ghosts, ack.Sequence)
					mu.Unlock()
				}
			}
			<-counted
			<-counted
		}
	}()

	type claim struct{ from, to uint64 }
	var settled, unsettled []claim
	for done := false; !done; {
		info, err := r.events.Info(ctx)
		require.NoError(t, err)
		to := info.State.LastSeq
		from := to - min(to, uint64(1+rnd.IntN(300)))
		ok, err := r.allRouted(ctx, from, to, info.State.FirstSeq)
		require.NoError(t, err)
		if ok {
			settled = append(settled, claim{from, to})
		} else {
			unsettled = append(unsettled, claim{from, to})
		}
		select {
		case counted <- struct{}{}:
		case err, open := <-published:
			require.NoError(t, err)
			done = !open
		}
	}

	mu.Lock()
	defer mu.Unlock()
	in := func(c claim) bool {
		for _, g := range ghosts {
			if g > c.from && g <= c.to {
				return true
			}
		}
		return false
	}
	for _, c := range settled {
		require.False(t, in(c), "range (%d, %d] settled by count, but an event in it is for an unknown destination", c.from, c.to)
	}
	require.NotEmpty(t, settled, "some ranges were settled by count")
	require.True(t, slices.ContainsFunc(unsettled, in), "some ranges held an event for an unknown destination")
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
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add}, checkTuning{countMin: 1000, subjectsPerEvent: 100})
	waitCheckState(t, srv.JS, "checked what is left", func(st CheckState) bool { return st.Checked == 4 })
	require.ElementsMatch(t, []uint64{1, 2, 4}, dl.list())

	publishGhosts(t, srv.JS, 1)
	waitCheckState(t, srv.JS, "checked the next event", func(st CheckState) bool { return st.Checked == 6 })
	require.ElementsMatch(t, []uint64{1, 2, 4, 6}, dl.list())
}

// A destination added while the check was behind routes only what was
// published after it was added: the count settles the backlog in pieces,
// and an event published for it before it existed is still dead-lettered.
func TestCheckCountsAcrossADestinationAddedMeanwhile(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	publishTo(t, srv.JS, "relay.in.known", 150)
	addPausedDest(t, srv.JS, "later")
	publishTo(t, srv.JS, "relay.in.later", 100)
	last := publishTo(t, srv.JS, "relay.in.known", 50)

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, checkTuning{countMin: 100, subjectsPerEvent: 100})
	waitCheckState(t, srv.JS, "checked the backlog", func(st CheckState) bool { return st.Checked == last })
	require.EqualValues(t, 300, checkedCount(m, "counted"))
	require.Zero(t, checkedCount(m, "read"))
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
	startRelay(t, Config{JS: srv2.JS, OnDelivery: dl2.add, Metrics: m2}, checkTuning{countMin: 100, subjectsPerEvent: 100})
	waitCheckState(t, srv2.JS, "checked the backlog", func(st CheckState) bool { return st.Checked == last })
	require.Equal(t, []uint64{early}, dl2.list())
	counted, read := checkedCount(m2, "counted"), checkedCount(m2, "read")
	require.EqualValues(t, last, counted+read)
	require.Less(t, counted, early, "the early event is read")
	require.GreaterOrEqual(t, counted, early-1-100, "what came before it is counted, to within countMin")
}

// Events that aged out (or were purged) before the check got to them do not
// stop the count, even when a destination was added among them.
func TestCheckCountsPastEventsThatAgedOut(t *testing.T) {
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
	startRelay(t, Config{JS: srv.JS, Metrics: m}, checkTuning{countMin: 100, subjectsPerEvent: 100})
	waitCheckState(t, srv.JS, "checked what is left", func(st CheckState) bool { return st.Checked == last })
	require.EqualValues(t, 250, checkedCount(m, "counted"))
	require.Zero(t, checkedCount(m, "read"))
}

// The count is used only where it is exact: on an R1 events stream, for
// enough events, and not on a stream with far more subjects than events to
// count (its index is what the count walks).
func TestCheckCountsOnlyWhereItIsExactAndWorthIt(t *testing.T) {
	r := &Relay{tune: checkTuning{countMin: 1000, subjectsPerEvent: 100}}
	info := func(replicas int, subjects uint64) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Replicas: replicas}, State: jetstream.StreamState{NumSubjects: subjects}}
	}
	require.True(t, r.worthCounting(info(1, 10), 50_000))
	require.False(t, r.worthCounting(info(3, 10), 50_000), "a replicated stream is read")
	require.False(t, r.worthCounting(info(1, 10), 999), "too few events")
	require.False(t, r.worthCounting(info(1, 5_000_001), 50_000), "too many subjects")
	require.True(t, r.worthCounting(info(1, 5_000_000), 50_000))
}

// listingTuning is defaultCheckTuning without the count: what the check
// does not read, it lists.
func listingTuning() checkTuning {
	tune := defaultCheckTuning
	tune.countMin = math.MaxUint64 // never counts: what is settled is listed
	return tune
}

// Events published while the check runs are settled from the list of the
// stream's subjects: only those of unknown destinations, and those of a
// destination published before it was added, are looked up, and they are
// dead-lettered in stream order.
func TestCheckListsEventsPublishedWhileItRuns(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	addPausedDest(t, srv.JS, "known")
	publishTo(t, srv.JS, "relay.in.known", 50)
	early := publishTo(t, srv.JS, "relay.in.later.k1", 1) // before "later" exists
	addPausedDest(t, srv.JS, "later")

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, listingTuning())
	var want []uint64
	want = append(want, early)
	for i := range 20 {
		publishTo(t, srv.JS, "relay.in.known", 10)
		publishTo(t, srv.JS, "relay.in.later.k2", 5)
		switch i % 4 {
		case 1:
			want = append(want, publishTo(t, srv.JS, "relay.in.ghost", 1))
		case 3:
			want = append(want, publishTo(t, srv.JS, "relay.in.other.k3", 1)) // keyed: relay.ev.other.<bucket>.k3
		}
	}
	last := publishTo(t, srv.JS, "relay.in.known", 1)
	waitCheckState(t, srv.JS, "checked every event", func(st CheckState) bool { return st.Checked == last })
	require.Equal(t, want, dl.list(), "every event of an unknown destination dead-lettered once, in stream order")
	require.Zero(t, checkedCount(m, "read"), "nothing read")
	require.EqualValues(t, last, checkedCount(m, "listed"))
}

// The list never settles an event for an unknown destination it did not
// look up, also while events are being stored as it lists.
func TestCheckListingMissesNoEventStoredMeanwhile(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	addPausedDest(t, srv.JS, "known")
	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	tune := listingTuning()
	tune.listGroups = 1000 // look them all up
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, tune)

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
	waitCheckState(t, srv.JS, "checked every event", func(st CheckState) bool { return st.Checked == last.Load() })
	slices.Sort(ghosts)
	require.Equal(t, ghosts, dl.list(), "every event of an unknown destination dead-lettered once, in stream order")
	require.Zero(t, checkedCount(m, "read"), "nothing read")
}

// With more destinations to look up in a pass than listGroups, the check
// reads the events instead, and dead-letters the same ones.
func TestCheckReadsWhenTooManyDestinationsAreUnknown(t *testing.T) {
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
	tune := listingTuning()
	tune.listGroups = 2
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, tune)
	waitCheckState(t, srv.JS, "checked every event", func(st CheckState) bool { return st.Checked == last })
	require.Equal(t, want, dl.list())
	require.EqualValues(t, last, checkedCount(m, "read"), "every event read")
	require.Zero(t, checkedCount(m, "listed"))
}

// Reading, when listing would not do, asks again once it has caught up, and
// goes back to listing when it does; the consumer it read with is deleted.
func TestCheckGoesBackToListingAfterReading(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	addPausedDest(t, srv.JS, "known")
	ghosts := []uint64{publishTo(t, srv.JS, "relay.in.ghost0", 1), publishTo(t, srv.JS, "relay.in.ghost1", 1)}
	last := publishTo(t, srv.JS, "relay.in.known", 10)

	m := NewMetrics(prometheus.NewRegistry())
	var dl deadLettered
	tune := listingTuning()
	tune.listGroups = 1 // two unknown destinations: read
	tune.relist = 50 * time.Millisecond
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, tune)
	waitCheckState(t, srv.JS, "read every event", func(st CheckState) bool { return st.Checked == last })
	require.Equal(t, ghosts, dl.list())
	require.EqualValues(t, last, checkedCount(m, "read"))

	// Once their events are gone, one unknown destination is few enough.
	s, err := srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	for _, g := range []string{"relay.in.ghost0", "relay.in.ghost1"} {
		require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSubject(g)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for checkedCount(m, "listed") == 0 {
		require.True(t, time.Now().Before(deadline), "the check never went back to listing")
		publishTo(t, srv.JS, "relay.in.known", 1) // reading notices it caught up as events come
		time.Sleep(20 * time.Millisecond)
	}
	read := checkedCount(m, "read")
	ghost := publishTo(t, srv.JS, "relay.in.ghost2", 1)
	last = publishTo(t, srv.JS, "relay.in.known", 10)
	waitCheckState(t, srv.JS, "listed the rest", func(st CheckState) bool { return st.Checked == last })
	require.Equal(t, append(ghosts, ghost), dl.list())
	require.Equal(t, read, checkedCount(m, "read"), "nothing read once listing again")

	// Only the destination's durable consumer is left: not the reader's.
	names := s.ConsumerNames(ctx)
	var left []string
	for n := range names.Name() {
		left = append(left, n)
	}
	require.NoError(t, names.Err())
	require.Equal(t, []string{ConsumerName("known")}, left)
}

// Listing is used only where it is exact, an R1 stream whose subjects come
// in one response, and when it costs less than reading the events there are
// to check, or little anyway.
func TestCheckListsOnlyWhereItIsExactAndWorthIt(t *testing.T) {
	r := &Relay{tune: defaultCheckTuning}
	info := func(replicas int, subjects uint64) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Replicas: replicas}, State: jetstream.StreamState{NumSubjects: subjects}}
	}
	require.True(t, r.listable(info(1, 10)))
	require.False(t, r.listable(info(3, 10)), "a replicated stream is read")
	require.False(t, r.listable(info(1, listMaxSubjects)), "too many subjects for one response")
	require.False(t, (&Relay{tune: checkTuning{countMin: 1000}}).listable(info(1, 10)), "listing turned off")

	require.True(t, r.listWorth(info(1, 50_000), 10_000, 0), "5 subjects listed per event not read")
	require.False(t, r.listWorth(info(1, 50_001), 10_000, time.Hour), "more subjects than that, and not few")
	require.True(t, r.listWorth(info(1, 200), 1, defaultCheckTuning.pollIdle), "a few subjects, once per pollIdle")
	require.False(t, r.listWorth(info(1, 200), 1, defaultCheckTuning.pollIdle-time.Millisecond))
	require.False(t, r.listWorth(info(1, 201), 1, time.Hour), "not so few")
}

// Passes are spaced for about passEvents events each, within poll and
// pollIdle.
func TestCheckSpacesPassesByTheRateOfEvents(t *testing.T) {
	tune := defaultCheckTuning
	require.Equal(t, 100*time.Millisecond, tune.passWait(0), "no events: every pollIdle")
	require.Equal(t, 100*time.Millisecond, tune.passWait(500))
	require.Equal(t, 50*time.Millisecond, tune.passWait(2000))
	require.Equal(t, 14285714*time.Nanosecond, tune.passWait(7000))
	require.Equal(t, 10*time.Millisecond, tune.passWait(20000), "at most every poll")
	for _, slow := range []float64{1e-9, 1e-300, math.SmallestNonzeroFloat64} {
		require.Equal(t, 100*time.Millisecond, tune.passWait(slow), "events all but stopped: every pollIdle, not a Duration overflow")
	}
	require.Equal(t, 10*time.Millisecond, tune.passWait(math.Inf(1)))
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
	startRelay(t, Config{JS: srv.JS}, checkTuning{countMin: 1000, subjectsPerEvent: 100}) // reads
	streamtest.RequireShortHeartbeats(t, reqs, "the check's consumer")
}

// Listing goes past events deleted or purged before it got to them, also
// when none are left, and follows a destination added while it runs.
func TestCheckListsPastRemovedEventsAndAddedDestinations(t *testing.T) {
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
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add, Metrics: m}, listingTuning())
	waitCheckState(t, srv.JS, "listed what is left", func(st CheckState) bool { return st.Checked == 6 })
	require.Equal(t, []uint64{3, 5, 6}, dl.list())

	// Nothing left at all: the check still moves to the last sequence.
	publishGhosts(t, srv.JS, 2) // 7, 8
	require.NoError(t, s.Purge(ctx))
	waitCheckState(t, srv.JS, "past the purged events", func(st CheckState) bool { return st.Checked == 8 })

	// Events for "late" are dead-lettered until it is added, and not after.
	early := publishTo(t, srv.JS, "relay.in.late", 1)
	waitCheckState(t, srv.JS, "listed the early event", func(st CheckState) bool { return st.Checked == early })
	addPausedDest(t, srv.JS, "late")
	last := publishTo(t, srv.JS, "relay.in.late", 5)
	waitCheckState(t, srv.JS, "listed the later events", func(st CheckState) bool { return st.Checked == last })
	// 7 and 8 may have been listed, and dead-lettered, before the purge.
	got := slices.DeleteFunc(dl.list(), func(seq uint64) bool { return seq == 7 || seq == 8 })
	require.Equal(t, []uint64{3, 5, 6, early}, got)
	require.Zero(t, checkedCount(m, "read"))
}

// Reading goes back to listing after relist when listing settled events
// the time before, and waits twice as long, up to 60 times relist, each
// time it did not.
func TestCheckBacksOffAskingAboutListing(t *testing.T) {
	tune := defaultCheckTuning
	require.Equal(t, 5*time.Second, tune.relistAfter(time.Minute, true))
	wait := tune.relist
	for range 5 {
		wait = tune.relistAfter(wait, false)
	}
	require.Equal(t, 160*time.Second, wait)
	for range 5 {
		wait = tune.relistAfter(wait, false)
	}
	require.Equal(t, 5*time.Minute, wait, "at most 60 times relist")
}

// Events are looked up, and read whole for their dead letter, at the
// stream's leader (STREAM.MSG.GET), never by direct get: a mirror that has
// not caught up can answer a direct get, and its "not found" would skip an
// event. So when listing and when reading.
func TestCheckLooksEventsUpAtTheStreamsLeader(t *testing.T) {
	t.Parallel()
	for name, tune := range map[string]checkTuning{
		"listing": listingTuning(),
		"reading": {countMin: 1000, subjectsPerEvent: 100},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
			startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add}, tune)
			publishTo(t, srv.JS, "relay.in.known", 5)
			ghost := publishTo(t, srv.JS, "relay.in.ghost", 1)
			last := publishTo(t, srv.JS, "relay.in.known", 5)
			waitCheckState(t, srv.JS, "checked every event", func(st CheckState) bool { return st.Checked == last })
			require.Equal(t, []uint64{ghost}, dl.list())
			require.NoError(t, nc.Flush())
			require.Positive(t, leader.Load(), "the ghost event read at the leader")
			require.Zero(t, direct.Load(), "no direct get")
		})
	}
}

// TestCheckReadsOnAfterItsConsumerGoes: the consumer the check reads
// through deleted under it (as a server restart loses a memory consumer),
// the check reads on from the last event it checked: nothing skipped,
// nothing dead-lettered twice.
func TestCheckReadsOnAfterItsConsumerGoes(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	publishGhosts(t, srv.JS, 3)
	var dl deadLettered
	startRelay(t, Config{JS: srv.JS, OnDelivery: dl.add}, checkTuning{countMin: 1000, subjectsPerEvent: 100})
	waitCheckState(t, srv.JS, "checked the first three", func(st CheckState) bool { return st.Checked == 3 })

	s, err := srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	var reader string
	for info := range s.ListConsumers(ctx).Info() {
		if info.Config.Description == "relay unknown-destination check" {
			reader = info.Name
		}
	}
	require.NotEmpty(t, reader, "the check reads through a consumer of its own")
	require.NoError(t, srv.JS.DeleteConsumer(ctx, stream.EventsStream, reader))

	publishGhosts(t, srv.JS, 2)
	waitCheckState(t, srv.JS, "checked the two after", func(st CheckState) bool { return st.Checked == 5 })
	require.ElementsMatch(t, []uint64{1, 2, 3, 4, 5}, dl.list())
}
