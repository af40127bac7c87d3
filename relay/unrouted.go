package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/stream"
)

// The unknown-destination check.
//
// A producer can publish for a destination that does not exist: a typo, one
// not added yet, one removed. No destination consumer reads such an event,
// so one replica at a time goes through every event and dead-letters those
// whose destination is unknown.
//
// Mostly it does not read them (scanUnrouted). On an R1 stream it lists the
// stream's subjects every few milliseconds, which says for which
// destinations events are stored, and looks up only the events of unknown
// ones. Where that cannot be done or costs more (a replicated stream, or
// many order keys), it reads the headers of each event as it is stored;
// what was stored before it started (while relay was down, say) it may
// first settle by having the server count how many of those events are on
// subjects of known destinations. Nothing is acked, and the server keeps no
// state per event for it. Instead the replica doing the check holds a
// lease, the key UnroutedCheckKey in the relay_state bucket, whose value
// also says up to which stream sequence every event has been checked. The
// holder rewrites it every second (a compare-and-set on the key's
// revision, so a replica that lost the lease finds out and stops); a replica
// that stops releases it; one that sees it unchanged for
// Config.CheckTakeover takes it over from the recorded sequence. Events are
// checked at least once: the ones checked since the last write are checked
// again after a crash, and a dead letter written twice is stored once (dead
// letters are deduplicated by destination and stream sequence).

// UnroutedCheckKey is the relay_state key of the unknown-destination check.
const UnroutedCheckKey = "unrouted-check"

// legacyUnroutedConsumer is the durable consumer earlier versions read every
// event with. Its ack floor is where the check starts when it first runs.
const legacyUnroutedConsumer = "relay_unrouted"

// leaseRenew is how often the holder of the check rewrites its lease.
const leaseRenew = time.Second

// CheckState is the value of UnroutedCheckKey.
type CheckState struct {
	// Holder is the replica doing the check; empty when released.
	Holder string `json:"holder,omitempty"`
	// Checked is the stream sequence up to which every event of the events
	// stream has been checked.
	Checked uint64 `json:"checked"`
	// Stream is when the events stream Checked counts in was created: a
	// stream deleted and created again starts at sequence 1 again, and is
	// checked from there.
	Stream time.Time `json:"stream_created"`
}

// ReadCheckState returns the state of the unknown-destination check, and
// false when no relay has run it yet.
func ReadCheckState(ctx context.Context, js jetstream.JetStream) (CheckState, bool, error) {
	kv, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return CheckState{}, false, fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	e, err := kv.Get(ctx, UnroutedCheckKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return CheckState{}, false, nil
	}
	if err != nil {
		return CheckState{}, false, fmt.Errorf("read %s/%s: %w", stream.StateBucket, UnroutedCheckKey, err)
	}
	st, err := decodeCheckState(e.Value())
	return st, err == nil, err
}

// CheckLag is how many stream sequences of the events stream the
// unknown-destination check has not gone through yet: all of them when it has never
// run, or ran on an earlier incarnation of the stream.
func CheckLag(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, _, err := ReadCheckState(ctx, js)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	info := s.CachedInfo()
	next := max(st.checkedIn(info.Created)+1, info.State.FirstSeq) // what aged out is not waiting
	if info.State.Msgs == 0 || next > info.State.LastSeq {
		return 0, nil
	}
	return info.State.LastSeq - next + 1, nil
}

func decodeCheckState(b []byte) (CheckState, error) {
	var st CheckState
	if err := json.Unmarshal(b, &st); err != nil {
		return CheckState{}, fmt.Errorf("%s/%s holds %q, not a check state: %w", stream.StateBucket, UnroutedCheckKey, b, err)
	}
	return st, nil
}

// checkedIn is st.Checked if it counts in the events stream created at
// created, and 0 (nothing checked) if it counts in an earlier one.
func (st CheckState) checkedIn(created time.Time) uint64 {
	if !st.Stream.Equal(created) {
		return 0
	}
	return st.Checked
}

func (st CheckState) encode() []byte {
	b, _ := json.Marshal(st) // a string, an integer and a time
	return b
}

// runUnrouted takes part in the unknown-destination check until ctx ends:
// it waits for the lease, checks while it holds it, and waits again.
func (r *Relay) runUnrouted(ctx context.Context, id string) {
	for ctx.Err() == nil {
		err := r.checkUnrouted(ctx, id)
		switch {
		case ctx.Err() != nil || err == nil:
		case errors.Is(err, errStreamRecreated):
			r.log.Warn("the unknown-destination check starts over", "err", err)
			continue
		default:
			r.log.Error("unknown-destination check stopped (retrying in 1s): events for unknown destinations are not dead-lettered meanwhile", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// checkLease is one replica's hold on the check.
type checkLease struct {
	kv       jetstream.KeyValue
	id       string
	takeover time.Duration
	rev      uint64    // the key's revision as this replica last wrote it
	stream   time.Time // when the events stream was created
}

func (r *Relay) checkUnrouted(ctx context.Context, id string) error {
	kv, err := r.cfg.JS.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	l := &checkLease{kv: kv, id: id, takeover: r.cfg.CheckTakeover}
	checked, err := l.acquire(ctx, r)
	if err != nil {
		return err
	}

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var done atomic.Uint64
	done.Store(checked)
	kept := make(chan error, 1)
	go func() {
		kept <- l.keep(sctx, r.cfg.JS, &done)
		stop() // lease lost: stop checking at once
	}()
	err = r.scanUnrouted(sctx, checked, &done)
	stop()
	lerr := <-kept
	// The scan has returned: unless the lease is another replica's now,
	// release it with where the scan got, so that another replica (or this
	// one) goes on from there at once. After errStreamRecreated that is
	// recorded against the old stream, so the next holder starts at 0.
	if !errors.Is(lerr, errLeaseLost) {
		l.release(done.Load())
	}
	switch {
	case lerr != nil:
		return lerr
	case ctx.Err() != nil:
		return nil
	}
	return err
}

// acquire waits until this replica holds the lease, and returns the sequence
// up to which events are checked.
func (l *checkLease) acquire(ctx context.Context, r *Relay) (uint64, error) {
	events, err := r.cfg.JS.Stream(ctx, stream.EventsStream)
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	l.stream = events.CachedInfo().Created
	var seenRev uint64
	var seenAt time.Time
	failing := 0 // reads failed in a row
	for {
		e, err := l.kv.Get(ctx, UnroutedCheckKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			start, err := r.legacyCheckFloor(ctx)
			if err != nil {
				return 0, err
			}
			rev, err := l.kv.Create(ctx, UnroutedCheckKey, l.state(start))
			if err == nil {
				l.rev = rev
				return start, nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, fmt.Errorf("create %s/%s: %w", stream.StateBucket, UnroutedCheckKey, err)
			}
			continue // another replica created it first
		}
		if err != nil {
			// NATS unreachable, a leader election, a permission missing:
			// look again. The holder's silence is still counted right: a
			// holder that renewed meanwhile has a new revision when we next
			// read it.
			failing++
			if failing == int(l.takeover/leaseRenew) {
				r.log.Warn("cannot read the unknown-destination check's lease (retrying)", "key", stream.StateBucket+"/"+UnroutedCheckKey, "err", err)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(leaseRenew):
			}
			continue
		}
		failing = 0
		st, err := decodeCheckState(e.Value())
		if err != nil {
			return 0, err
		}
		take := st.Holder == "" || st.Holder == l.id
		if !take {
			// The holder's clock is not ours: what counts is how long the
			// key has not changed, as seen here.
			if e.Revision() != seenRev {
				seenRev, seenAt = e.Revision(), time.Now()
			} else if silent := time.Since(seenAt); silent >= l.takeover {
				r.log.Warn("taking over the unknown-destination check from a replica that stopped renewing it", "holder", st.Holder, "silent_for", silent.Round(time.Millisecond), "checked_seq", st.Checked)
				take = true
			}
		}
		if take {
			checked := st.checkedIn(l.stream)
			if checked != st.Checked {
				r.log.Warn("the events stream was created again since the unknown-destination check last ran: checking it from the start", "stream", stream.EventsStream, "created", l.stream, "checked_seq_before", st.Checked)
			}
			rev, err := l.kv.Update(ctx, UnroutedCheckKey, l.state(checked), e.Revision())
			if err == nil {
				l.rev = rev
				return checked, nil
			}
			if !isWrongRevision(err) {
				return 0, fmt.Errorf("take %s/%s: %w", stream.StateBucket, UnroutedCheckKey, err)
			}
			continue // someone else wrote it meanwhile: look again
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(leaseRenew):
		}
	}
}

// streamCheckEvery is how many renewals pass between looks at whether the
// events stream was created again under the check.
const streamCheckEvery = 10

// keep renews the lease with the progress in done every leaseRenew until ctx
// ends. It returns an error when the lease was lost, or when the events
// stream was created again (its sequences start over).
func (l *checkLease) keep(ctx context.Context, js jetstream.JetStream, done *atomic.Uint64) error {
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := l.write(l.state(done.Load())); err != nil {
			return err
		}
		if n%streamCheckEvery == 0 {
			sctx, cancel := context.WithTimeout(ctx, leaseRenew)
			s, err := js.Stream(sctx, stream.EventsStream)
			cancel()
			if err == nil && !s.CachedInfo().Created.Equal(l.stream) {
				return fmt.Errorf("%w: %s", errStreamRecreated, stream.EventsStream)
			}
		}
	}
}

// errStreamRecreated says the events stream was deleted and created again
// under the check: its sequences start over.
var errStreamRecreated = errors.New("the events stream was created again")

// errLeaseLost says another replica holds the check now.
var errLeaseLost = errors.New("another replica took over the unknown-destination check (this one did not renew its lease in time)")

// write replaces the lease's value if this replica still holds it. An error
// other than errLeaseLost (NATS unreachable) is not returned: the next write
// tries again, and if it lasts, another replica takes over and a later
// write finds out.
//
// It does not use the caller's context: a write cancelled after the server
// applied it would leave l.rev behind, and the next write would fail.
func (l *checkLease) write(value []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*leaseRenew)
	defer cancel()
	rev, err := l.kv.Update(ctx, UnroutedCheckKey, value, l.rev)
	if err == nil {
		l.rev = rev
		return nil
	}
	if !isWrongRevision(err) {
		return nil
	}
	// Changed since our last write. Still ours (an earlier write that
	// timed out here but was applied)? Then write again on its revision.
	e, gerr := l.kv.Get(ctx, UnroutedCheckKey)
	if errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return errLeaseLost // deleted: an operator reset it
	}
	if gerr != nil {
		return nil // cannot tell now; the next write asks again
	}
	if st, derr := decodeCheckState(e.Value()); derr != nil || st.Holder != l.id {
		return errLeaseLost
	}
	rev, err = l.kv.Update(ctx, UnroutedCheckKey, value, e.Revision())
	if err == nil {
		l.rev = rev
		return nil
	}
	if isWrongRevision(err) {
		return errLeaseLost
	}
	return nil
}

// release gives the lease up, recording that events up to checked are
// checked. If it fails, the lease lapses after the takeover time instead.
func (l *checkLease) release(checked uint64) {
	_ = l.write(CheckState{Checked: checked, Stream: l.stream}.encode())
}

// state is the lease's value while this replica holds it.
func (l *checkLease) state(checked uint64) []byte {
	return CheckState{Holder: l.id, Checked: checked, Stream: l.stream}.encode()
}

// isWrongRevision reports an Update that lost its compare-and-set: the key
// changed since (error code 10071, or 10164 on a replicated bucket).
func isWrongRevision(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }

// legacyCheckFloor is where the check starts the first time: after what the
// durable consumer of earlier versions acknowledged, or from the start. That
// consumer is left alone: replicas of the earlier version still running
// during an upgrade use it (and would create it again, reading every event
// from the start, if it were deleted).
func (r *Relay) legacyCheckFloor(ctx context.Context) (uint64, error) {
	c, err := r.cfg.JS.Consumer(ctx, stream.EventsStream, legacyUnroutedConsumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up consumer %s: %w", legacyUnroutedConsumer, err)
	}
	floor := c.CachedInfo().AckFloor.Stream
	r.log.Info("the unknown-destination check starts where consumer "+legacyUnroutedConsumer+" of an earlier relay version got to; delete that consumer once no replica of that version runs ('nats consumer rm "+stream.EventsStream+" "+legacyUnroutedConsumer+"')", "seq", floor)
	return floor, nil
}

// checkTuning says how the check goes through events: when it counts them,
// when it lists the stream's subjects, when it reads them.
type checkTuning struct {
	// countMin is the fewest events worth counting rather than reading.
	countMin uint64
	// subjectsPerEvent: counting walks the stream's index of subjects, and
	// costs about what reading one event does per subjectsPerEvent subjects.
	subjectsPerEvent uint64

	// listPerEvent: listing the stream's subjects costs about what reading
	// one event does per listPerEvent subjects. 0: the check never lists.
	listPerEvent uint64
	// listCheap is how many subjects are cheap to list every pollIdle
	// whatever the number of events: with no more, a pass lists at once,
	// without asking first whether there are events to check.
	listCheap uint64
	// listGroups is the most destinations with events to look for one by
	// one (unknown, or added after some of their events) a pass takes on.
	listGroups int
	// passEvents is how many events a pass is meant to settle: the check
	// waits between passes for about as long as that many take to come,
	// at least poll and at most pollIdle. listWait is how long it lets
	// events pile up for a list worth making before it reads them instead.
	passEvents               float64
	poll, pollIdle, listWait time.Duration
	// relist is how long reading goes on before it asks whether listing
	// would do again: relist at first, twice as long (up to 60 times) each
	// time listing then settles nothing, as when there are too many
	// destinations to look up (one counts for as long as any of its events
	// is stored).
	relist time.Duration
}

var defaultCheckTuning = checkTuning{
	countMin:         1000,
	subjectsPerEvent: 100,
	listPerEvent:     5,
	listCheap:        200,
	listGroups:       8,
	passEvents:       100,
	poll:             10 * time.Millisecond,
	pollIdle:         100 * time.Millisecond,
	listWait:         time.Second,
	relist:           5 * time.Second,
}

// listMaxSubjects is the most subjects a stream info response lists at once
// (the server's JSMaxSubjectDetails). A list of more comes in pages, each as
// of its own moment, and the check does not use it.
const listMaxSubjects = 100_000

// scanUnrouted checks every event stored after sequence checked, in order,
// until ctx ends, and stores in done the sequence up to which it has.
//
// What it can, it settles without reading events, in passes
// (followByListing): it lists the subjects of the events stream, which says
// which destinations have events stored, and looks up one by one only the
// events of destinations that are unknown (or were added after them). That
// needs an R1 stream (what the list says, and the lookups after it, must
// come from the same store) with few subjects for the events that come:
// every order key of an ordered destination is a subject. Otherwise it reads
// the headers of every event as it is stored (readFrom), until listing is
// worth it again. A backlog too large to read cheaply and with too many
// subjects to list is first counted (settleByCount).
func (r *Relay) scanUnrouted(ctx context.Context, checked uint64, done *atomic.Uint64) error {
	info, err := r.events.Info(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		r.log.Warn("cannot read the events stream's state for the unknown-destination check; reading the events instead", "err", err)
	} else if st, last := info.State, info.State.LastSeq; last > checked && st.Msgs > 0 {
		// Events at or before FirstSeq-1 aged out or were removed.
		n := last - max(checked, st.FirstSeq-1)
		if !(r.listable(info) && r.listWorth(info, n, 0)) && r.worthCounting(info, n) {
			settled, err := r.settleByCount(ctx, checked, last, st.FirstSeq)
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				r.log.Warn("cannot count events for the unknown-destination check; reading them instead", "err", err)
			}
			if settled > checked {
				r.cfg.Metrics.checkedCounted(settled - max(checked, st.FirstSeq-1))
				checked = settled
				done.Store(settled)
			}
		}
	}
	relistAfter := r.tune.relist
	for ctx.Err() == nil {
		before := checked
		if checked, err = r.followByListing(ctx, checked, done); err != nil {
			return err
		}
		relistAfter = r.tune.relistAfter(relistAfter, checked > before)
		if err := r.readFrom(ctx, checked, done, relistAfter); err != nil {
			return err
		}
		checked = done.Load()
	}
	return ctx.Err()
}

// listable says whether the check can settle events of the events stream
// described by info from the list of its subjects.
func (r *Relay) listable(info *jetstream.StreamInfo) bool {
	return r.tune.listPerEvent > 0 && info.Config.Replicas <= 1 && info.State.NumSubjects < listMaxSubjects
}

// listWorth says whether listing the subjects of the stream described by
// info costs less than reading its n unchecked events, or little anyway, a
// time since after the last list.
func (r *Relay) listWorth(info *jetstream.StreamInfo, n uint64, since time.Duration) bool {
	s := info.State.NumSubjects
	return n*r.tune.listPerEvent >= s || s <= r.tune.listCheap && since >= r.tune.pollIdle
}

// errNotListed says a pass could not settle events from the list of
// subjects: the events are to be read.
var errNotListed = errors.New("too many subjects or destinations to look up")

// followByListing settles the events stored after checked in passes
// (listPass) for as long as that is possible and worth it, and returns the
// sequence up to which it did. It returns with no error when the events are
// to be read instead.
//
// A pass costs about the same whatever the number of events it settles, so
// passes are spaced for about passEvents events each at the rate they came
// lately. With few subjects, a pass is one request: the list says the
// stream's state too. With more, the state is asked first, to tell whether
// listing is worth it.
func (r *Relay) followByListing(ctx context.Context, checked uint64, done *atomic.Uint64) (uint64, error) {
	if r.tune.listPerEvent == 0 {
		return checked, nil
	}
	var (
		subjects = uint64(math.MaxUint64) // in the stream, as last seen
		rate     float64                  // events stored per second, lately
		seen     = time.Now()             // when the stream's state was last seen
		last     uint64                   // its last sequence then
		listed   = time.Now()             // when a pass last settled events, or there were none
		wait     time.Duration
	)
	for {
		select {
		case <-ctx.Done():
			return checked, ctx.Err()
		case <-time.After(wait):
		}
		var info *jetstream.StreamInfo
		if subjects > r.tune.listCheap {
			var err error
			if info, err = r.events.Info(ctx); err != nil {
				return checked, fmt.Errorf("read the state of stream %s: %w", stream.EventsStream, err)
			}
			if !r.listable(info) {
				return checked, nil
			}
			var n uint64
			if st := info.State; st.LastSeq > checked && st.Msgs > 0 {
				n = st.LastSeq - max(checked, st.FirstSeq-1)
			}
			switch {
			case n == 0:
				if info.State.LastSeq > checked {
					checked = info.State.LastSeq // all that was stored is gone
					done.Store(checked)
				}
				listed = time.Now()
			case r.listWorth(info, n, time.Since(listed)):
				info = nil // list
			case time.Since(listed) >= r.tune.listWait:
				return checked, nil // events come too slowly for the subjects there are
			}
		}
		if info == nil {
			res, err := r.listPass(ctx, checked, done)
			switch {
			case errors.Is(err, errNotListed):
				r.log.Debug("the unknown-destination check reads events instead of listing subjects", "err", err)
				return checked, nil
			case err != nil:
				if ctx.Err() != nil {
					return checked, ctx.Err()
				}
				// Tried again from where it got: it moves past an
				// event only once it is settled.
				checked, wait = done.Load(), min(max(2*wait, 100*time.Millisecond), 5*time.Second)
				r.log.Warn("cannot check or dead-letter events for unknown destinations (retrying)", "checked", checked, "retry_in", wait, "err", err)
				continue
			}
			r.cfg.Metrics.checkedListed(res.n)
			checked, info, listed = res.settled, res.info, time.Now()
			done.Store(checked)
		}
		// The next pass: when about passEvents more have come.
		now, st := time.Now(), info.State
		if dt := now.Sub(seen).Seconds(); dt > 0 && last > 0 && st.LastSeq >= last {
			rate = (rate + float64(st.LastSeq-last)/dt) / 2
		}
		seen, last, subjects = now, st.LastSeq, st.NumSubjects
		wait = r.tune.passWait(rate)
	}
}

// relistAfter is how long reading goes on before it asks about listing
// again, after it went on for prev and listing then settled events or not.
func (t checkTuning) relistAfter(prev time.Duration, settled bool) time.Duration {
	if settled {
		return t.relist
	}
	return min(2*prev, 60*t.relist)
}

// passWait is how long the check waits for the next pass when events come
// at rate a second.
func (t checkTuning) passWait(rate float64) time.Duration {
	// In seconds first: passEvents/rate for a rate near 0 is more than a
	// time.Duration holds.
	secs := min(t.pollIdle.Seconds(), max(t.poll.Seconds(), t.passEvents/rate))
	if rate <= 0 || math.IsNaN(secs) {
		return t.pollIdle
	}
	return time.Duration(secs * float64(time.Second))
}

// listPass settles the events stored after checked, up to the last one
// stored when it asks, from the list of the events stream's subjects, and
// returns the sequence up to which it did. The server lists the subjects
// after it reads the stream's last sequence, so the list has the subject of
// every event stored up to it that is still there. A destination that has
// none is known. For each that is not (unknown, or added after some of its
// events), the events after checked on its subjects are looked up one by
// one, in stream order, and dead-lettered; done says how far it got.
func (r *Relay) listPass(ctx context.Context, checked uint64, done *atomic.Uint64) (passResult, error) {
	info, err := r.events.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return passResult{}, fmt.Errorf("list the subjects of stream %s: %w", stream.EventsStream, err)
	}
	st := info.State
	if info.Config.Replicas > 1 || len(st.Subjects) >= listMaxSubjects {
		return passResult{}, errNotListed
	}
	last := st.LastSeq
	if last <= checked || st.Msgs == 0 {
		return passResult{settled: max(checked, last), info: info}, nil
	}
	from := max(checked, st.FirstSeq-1)
	groups := r.unroutedFilters(st.Subjects, from+1)
	if len(groups) > r.tune.listGroups {
		return passResult{}, errNotListed
	}
	// The events to look up, in stream order across destinations, so that
	// how far the pass got is known at every step.
	heads := make([]listHead, 0, len(groups))
	for filter, before := range groups {
		h := listHead{filter: filter, before: min(before, last+1)}
		if err := r.nextListed(ctx, &h, from+1); err != nil {
			return passResult{}, err
		}
		heads = append(heads, h)
	}
	for {
		i := -1
		for j, h := range heads {
			if h.msg != nil && (i < 0 || h.msg.Sequence < heads[i].msg.Sequence) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		msg := heads[i].msg
		if ev, err := rawEvent(msg); err == nil && !r.routes(ev.dest, ev.seq) {
			if err := r.deadLetterUnrouted(ctx, ev, true); err != nil {
				return passResult{}, err
			}
		}
		done.Store(msg.Sequence)
		if err := r.nextListed(ctx, &heads[i], msg.Sequence+1); err != nil {
			return passResult{}, err
		}
	}
	return passResult{settled: last, n: last - from, info: info}, nil
}

// passResult is what a pass did: the sequence up to which it settled
// events, how many of those sequences were in the stream's range, and the
// stream as the list described it.
type passResult struct {
	settled, n uint64
	info       *jetstream.StreamInfo
}

// listHead is the next event a pass looks up on one filter: msg, nil when
// there is none before sequence before.
type listHead struct {
	filter string
	before uint64
	msg    *jetstream.RawStreamMsg
}

// nextListed looks up the first event on h's filter at or after sequence
// seq.
func (r *Relay) nextListed(ctx context.Context, h *listHead, seq uint64) error {
	h.msg = nil
	if seq >= h.before {
		return nil
	}
	msg, err := r.leaderGet(ctx, seq, h.filter)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("look up events on %s in stream %s: %w", h.filter, stream.EventsStream, err)
	case msg.Sequence < h.before:
		h.msg = msg
	}
	return nil
}

// unroutedFilters are filters for the events among subjects, the events
// stream's, that may be for no destination known here from stream sequence
// from on: each with the sequence before which its events are (the start of
// a destination added since, or the end of sequences).
func (r *Relay) unroutedFilters(subjects map[string]uint64, from uint64) map[string]uint64 {
	r.dests.mu.RLock()
	defer r.dests.mu.RUnlock()
	groups := map[string]uint64{}
	for subj := range subjects {
		p, err := stream.ParseSubject(subj)
		if err != nil {
			continue // not an event relay can read; nothing to route
		}
		before := uint64(math.MaxUint64)
		if d, ok := r.dests.dests[p.Dest]; ok {
			if d.StartSeq <= from {
				continue
			}
			before = d.StartSeq
		}
		// Every event of the destination on subjects of this shape.
		filter := subj
		switch {
		case p.Bucket >= 0:
			filter = stream.KeyedPrefix + "." + p.Dest + ".>"
		case p.KeyToken != "":
			filter = stream.InPrefix + "." + p.Dest + ".*"
		}
		groups[filter] = before
	}
	return groups
}

// worthCounting says whether n events of the events stream described by
// info are better counted than read. Counting is exact only when the stream
// and the counting consumers are in the same server's store: an R1 stream.
func (r *Relay) worthCounting(info *jetstream.StreamInfo, n uint64) bool {
	return info.Config.Replicas <= 1 && n >= r.tune.countMin && n*r.tune.subjectsPerEvent >= info.State.NumSubjects
}

// maxCountSegments bounds how many ranges settleByCount counts.
const maxCountSegments = 16

// settleByCount settles by counting (allRouted) the events stored in
// sequences (from, to], and returns the sequence up to which it did: to, or
// less when a count did not settle (at most countMin events before the
// first unknown event if nothing else stood in the way), when a count
// failed, or after maxCountSegments pieces. first is the stream's first
// sequence.
//
// A destination added in the middle of the range routes only the events
// stored after it was added, so the range is counted in pieces that start
// where such a destination does, each with the destinations known there.
func (r *Relay) settleByCount(ctx context.Context, from, to, first uint64) (uint64, error) {
	// What aged out is settled: no piece may lie wholly before the first
	// event (it could not count up). first >= 1: the stream has events.
	from = max(from, first-1)
	for range maxCountSegments {
		if from >= to {
			break
		}
		end := to
		r.dests.mu.RLock()
		for _, d := range r.dests.dests {
			if d.StartSeq > from+1 && d.StartSeq <= to {
				end = min(end, d.StartSeq-1)
			}
		}
		r.dests.mu.RUnlock()
		ok, err := r.allRouted(ctx, from, end, first)
		if err != nil {
			return from, err
		}
		if !ok {
			return r.settledPrefix(ctx, from, end, first)
		}
		from = end
	}
	return from, nil
}

// settledPrefix finds, by halving, how far from from on the events in
// (from, to] settle by count, knowing that all of them do not: reading then
// starts within countMin events of the first one that did not. No
// destination starts in (from+1, to], so the same filters count every part.
func (r *Relay) settledPrefix(ctx context.Context, from, to, first uint64) (uint64, error) {
	lo, hi := from, to // (from, lo] settles; (lo, hi] does not
	for hi-lo > max(r.tune.countMin, 1) {
		mid := lo + (hi-lo)/2
		ok, err := r.allRouted(ctx, lo, mid, first)
		if err != nil {
			return lo, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// allRouted reports whether every event stored in sequences (from, to] is on
// a subject of a destination relay knows, which routes it, without reading
// any of them. first is the stream's first sequence when to was its last.
//
// When a consumer is created, the server counts the stored events that
// match its filter subjects from its start sequence on (NumPending), and
// counts up from there as events are stored. With the filters of every
// known destination, a consumer created to start at from+1 counts a, and one
// created after it to start at to+1 counts b. Every event stored after to
// that a counted, b counted too (b's count began later), so a-b is at most
// the number of known events in the range: fewer if events were stored
// meanwhile. The range holds at most to-max(from, first-1) events (fewer if
// some were deleted). So when a-b reaches that, every event in the range is
// known; when not, the range is read.
//
// Two things this rests on: the server's NumPending is never more than the
// events there are (so in nats-server 2.15;
// TestCheckCountNeverSettlesARangeWithAnUnknownEvent would catch a server
// that counts more), and no event counted in a is deleted before b is
// counted. relay deletes no event; an operator purging events of a known
// destination within those milliseconds could make a range look settled.
func (r *Relay) allRouted(ctx context.Context, from, to, first uint64) (bool, error) {
	filters := r.routedFilters(from + 1)
	if len(filters) == 0 {
		return false, nil
	}
	a, err := r.countFrom(ctx, from+1, filters)
	if err != nil {
		return false, err
	}
	b, err := r.countFrom(ctx, to+1, filters) // only once a is counted: see above
	if err != nil {
		return false, err
	}
	return a >= b && a-b == to-max(from, first-1), nil
}

// routedFilters are the filter subjects of every destination known here
// that routes all events from stream sequence from on.
func (r *Relay) routedFilters(from uint64) []string {
	r.dests.mu.RLock()
	defer r.dests.mu.RUnlock()
	var fs []string
	for name, d := range r.dests.dests {
		if d.StartSeq <= from && stream.ValidateDestName(name) == nil {
			fs = append(fs, stream.DestFilters(name)...)
		}
	}
	return fs
}

// countFrom is how many events stored at or after sequence from match
// filters, as the server counts them when a consumer is created.
func (r *Relay) countFrom(ctx context.Context, from uint64, filters []string) (uint64, error) {
	c, err := r.cfg.JS.CreateConsumer(ctx, stream.EventsStream, jetstream.ConsumerConfig{
		Description:       "relay: counts events of known destinations for the unknown-destination check",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		FilterSubjects:    filters,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: 30 * time.Second, // if the delete below fails
	})
	if err != nil {
		return 0, fmt.Errorf("create a consumer on %s to count events: %w", stream.EventsStream, err)
	}
	info := c.CachedInfo()
	r.deleteConsumer(info.Name)
	return info.NumPending, nil
}

// deleteConsumer deletes a consumer of the events stream the check made,
// not waiting for its context; if that fails, it goes after its
// InactiveThreshold.
func (r *Relay) deleteConsumer(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := r.cfg.JS.DeleteConsumer(ctx, stream.EventsStream, name); err != nil {
		r.log.Debug("cannot delete a consumer of the unknown-destination check; it goes when inactive", "consumer", name, "err", err)
	}
}

// readFrom checks every event stored after sequence checked, in order,
// reading their headers, until ctx ends, and stores in done the sequence up
// to which it has. When it has caught up with the stream and the check can
// list its subjects again, it returns nil.
//
// It reads through an ephemeral consumer without acks, with pull requests
// of its own (puller). When the consumer skips an event, goes silent or is
// gone, it makes a new one after the last event checked, up to
// readRestarts times in a row without progress. (Until the ninth round it
// read through a nats.go ordered consumer, which took an event with an
// empty body and a Status header for a status of the pull protocol and
// never got past it.)
func (r *Relay) readFrom(ctx context.Context, checked uint64, done *atomic.Uint64, relistAfter time.Duration) error {
	rd := &reading{relisted: time.Now(), relistAfter: relistAfter}
	for restarts := 0; ; {
		before := done.Load()
		err := r.readWith(ctx, checked, done, rd)
		if !errors.Is(err, errReadGap) {
			return err
		}
		if done.Load() > before {
			restarts = 0
		}
		if restarts++; restarts > readRestarts {
			return fmt.Errorf("read stream %s: %w, %d times in a row at sequence %d", stream.EventsStream, err, readRestarts, done.Load())
		}
		r.log.Debug("the unknown-destination check reads again", "after", done.Load(), "err", err)
		checked = done.Load()
	}
}

// readRestarts is how often in a row readFrom makes a new consumer without
// getting further before it gives up (and the check starts again).
const readRestarts = 5

// errReadGap: the check's consumer skipped an event, went silent or is gone.
var errReadGap = errors.New("the consumer lost its place")

// reading is readFrom's count of what it read since it last asked whether
// listing would cost less.
type reading struct {
	relisted    time.Time
	read        uint64
	relistAfter time.Duration
}

// readHold is how many events the check asks for ahead.
const readHold = 1000

// readWith is readFrom through one consumer, from after checked.
func (r *Relay) readWith(ctx context.Context, checked uint64, done *atomic.Uint64, rd *reading) error {
	cfg := jetstream.ConsumerConfig{
		Description:   "relay unknown-destination check",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckNonePolicy,
		// It needs only the subject and sequence: no bodies on this path.
		HeadersOnly: true,
		// A consumer left behind by a replica that died goes soon.
		InactiveThreshold: 30 * time.Second,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if checked > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, checked+1
	}
	cons, err := r.cfg.JS.CreateConsumer(ctx, stream.EventsStream, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("read stream %s: %w", stream.EventsStream, err)
	}
	name := cons.CachedInfo().Name
	// Reading may stop and start again soon: do not leave it until its
	// InactiveThreshold.
	defer r.deleteConsumer(name)
	p, err := newPuller(r.cfg.JS, name, 30*time.Second, pullHeartbeat, 0)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream.EventsStream, err)
	}
	defer p.stop(time.Second)
	nc := r.cfg.JS.Conn()
	tick := time.NewTicker(pullHeartbeat / 2)
	defer tick.Stop()
	var (
		cseq uint64 // the consumer sequence of the last event read
		buf  []*nats.Msg
	)
	for {
		_ = p.fill(readHold, 0, time.Now()) // a failed ask is tried again in a second

		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			if p.silent(now) {
				return fmt.Errorf("%w: no heartbeat", errReadGap)
			}
			continue
		case <-p.signal:
		}
		got := p.take(buf)
		for _, m := range got {
			st, err := p.status(m, time.Now())
			switch st {
			case pullBeat, pullReleased:
				continue
			case pullLost:
				continue // asked again above
			case pullRefused:
				r.log.Warn("pull request of the unknown-destination check refused; asking again shortly", "err", err)
				continue
			case pullUnanswered, pullGone:
				return fmt.Errorf("%w: %w", errReadGap, err)
			}
			info, ok := parseAckReply(m.Reply)
			if !ok || info.consSeq != cseq+1 {
				return fmt.Errorf("%w: delivery %q after consumer sequence %d", errReadGap, m.Reply, cseq)
			}
			cseq = info.consSeq
			msg := &pulledMsg{msg: m, nc: nc}
			seq := info.streamSeq
			// What cannot be decided now is tried again, in place: the check
			// moves past an event only once it is settled.
			for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
				err := r.checkRouted(ctx, msg, seq)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.log.Warn("cannot check or dead-letter an event for an unknown destination (retrying)", "subject", m.Subject, "seq", seq, "retry_in", wait, "err", err)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
				}
			}
			r.cfg.Metrics.checkedRead()
			done.Store(seq)
			rd.read++
			if info.pending == 0 && r.tune.listPerEvent > 0 && time.Since(rd.relisted) >= rd.relistAfter {
				// Caught up: would listing every listWait cost less now?
				perWait := rd.read * uint64(r.tune.listWait) / uint64(max(time.Since(rd.relisted), 1))
				if si, err := r.events.Info(ctx); err == nil && r.listable(si) && r.listWorth(si, perWait, r.tune.pollIdle) {
					return nil
				}
				rd.relisted, rd.read = time.Now(), 0
			}
		}
		clear(got)
		buf = got
	}
}

// checkRouted returns nil when msg, stored at seq, is for a destination
// known here, or once it is dead-lettered. It runs for every event: the
// common case takes only the subject apart.
func (r *Relay) checkRouted(ctx context.Context, msg jetstream.Msg, seq uint64) error {
	p, err := stream.ParseSubject(msg.Subject())
	if err != nil {
		return nil // not an event relay can read; nothing to route
	}
	if r.routes(p.Dest, seq) {
		return nil
	}
	ev, err := eventOf(msg)
	if err != nil {
		return nil
	}
	return r.deadLetterUnrouted(ctx, ev, false)
}

// routes says whether a destination known here routes events of dest
// stored at seq.
func (r *Relay) routes(dest string, seq uint64) bool {
	d, ok := r.dests.get(dest)
	return ok && seq >= d.StartSeq
}

// deadLetterUnrouted asks the store, which is authoritative, whether ev's
// destination exists; if not, it dead-letters ev. whole says ev has its
// body; without it, it is read first.
func (r *Relay) deadLetterUnrouted(ctx context.Context, ev event, whole bool) error {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	// A token no destination can be named (nor the store hold as a key)
	// is unknown without asking.
	if stream.ValidateDestName(ev.dest) == nil {
		d, err := r.store.Get(ctx, ev.dest)
		switch {
		case err == nil:
			if ev.seq >= d.StartSeq {
				return nil
			}
		case errors.Is(err, errStoredCorrupt):
			// It exists, but relay cannot read it (and does not deliver
			// it): its events wait for an operator, in the stream.
			r.log.Debug("event for a destination stored corrupt left in the stream", "dest", ev.dest, "seq", ev.seq, "err", err)
			return nil
		case !errors.Is(err, ErrNotFound):
			return err
		}
	}
	if !whole {
		// Read with headers only: read the whole event for the letter.
		full, err := r.leaderGet(ctx, ev.seq, "")
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil // gone meanwhile (deleted, or aged out): nothing to keep
			}
			return err
		}
		ev.body, ev.hdr = full.Data, full.Header
	}
	out := Outcome{Dest: ev.dest, EventID: ev.id, Seq: ev.seq, Decision: Decision{Action: DeadLetter, Reason: ReasonUnknownDestination}}
	if err := r.writeDeadLetter(ctx, ev, 0, &out); err != nil {
		if !errors.Is(err, dlq.ErrPermanent) {
			return err
		}
		// Trying again would stop the check here for good: reported, and
		// the check goes on.
		r.deadLetterFailed(ctx, ev, out.Decision.Reason, err)
		out.Err = err
	}
	r.logOutcome(out)
	if r.cfg.OnDelivery != nil {
		r.cfg.OnDelivery(out)
	}
	return nil
}

// leaderGet reads the event stored at sequence seq of the events stream, or
// with filter, the first one at or after seq on a subject filter matches.
// It asks the stream's leader, as the check's list did: a direct get can
// be answered by a mirror that has not caught up, and its "not found"
// would skip an event.
func (r *Relay) leaderGet(ctx context.Context, seq uint64, filter string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj,omitempty"`
	}{seq, filter})
	if err != nil {
		return nil, err
	}
	resp, err := r.cfg.JS.Conn().RequestWithContext(ctx, stream.APIPrefix(r.cfg.JS)+"STREAM.MSG.GET."+stream.EventsStream, req)
	if err != nil {
		return nil, err
	}
	var got struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &got); err != nil {
		return nil, fmt.Errorf("read the response to a message get: %w", err)
	}
	switch {
	case got.Error != nil && got.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case got.Error != nil:
		return nil, got.Error
	case got.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	m := got.Message
	var hdr nats.Header
	if len(m.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return nil, fmt.Errorf("read the headers of event %d: %w", m.Sequence, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Header: hdr, Data: m.Data, Time: m.Time}, nil
}
