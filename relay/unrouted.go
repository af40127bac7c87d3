package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// The unknown-destination check.
//
// A producer can publish for a destination that does not exist: a typo, one
// not added yet, one removed. No destination consumer reads such an event,
// so one replica at a time goes through every event, in stream order, and
// dead-letters those whose destination is unknown.
//
// It reads the headers of each event as it is stored. What was stored
// before it started (while relay was down, say) it first tries to settle
// without reading: the server counts how many of those events are on
// subjects of known destinations, and when that is all of them, there is
// nothing to read (scanUnrouted). Nothing is acked, and the server keeps no
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

// checkTuning says when the check counts rather than reads.
type checkTuning struct {
	// countMin is the fewest events worth counting rather than reading.
	countMin uint64
	// subjectsPerEvent: counting walks the stream's index of subjects, and
	// costs about what reading one event does per subjectsPerEvent subjects.
	subjectsPerEvent uint64
}

var defaultCheckTuning = checkTuning{countMin: 1000, subjectsPerEvent: 100}

// scanUnrouted checks every event stored after sequence checked, in order,
// until ctx ends, and stores in done the sequence up to which it has.
//
// It starts by trying to settle, without reading them, the events stored
// up to now: after relay was down, or when a replica takes over from one
// that fell behind, they can be millions. When the server counts every one
// of them on a subject of a known destination (settleByCount), there is
// nothing to read. From there, or from checked when the count does not
// settle it, it reads the headers of every event as it is stored
// (readFrom). Counting the events as they come instead would need a moment
// without new events, which a steady stream does not give, and would check
// each event later.
func (r *Relay) scanUnrouted(ctx context.Context, checked uint64, done *atomic.Uint64) error {
	info, err := r.events.Info(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		r.log.Warn("cannot read the events stream's state for the unknown-destination check; reading the events instead", "err", err)
	} else if st, last := info.State, info.State.LastSeq; last > checked && st.Msgs > 0 {
		// Events at or before FirstSeq-1 aged out or were removed.
		if n := last - max(checked, st.FirstSeq-1); r.worthCounting(info, n) {
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
	return r.readFrom(ctx, checked, done)
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
// to which it has.
func (r *Relay) readFrom(ctx context.Context, checked uint64, done *atomic.Uint64) error {
	cfg := jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// It needs only the subject and sequence: no bodies on this path.
		HeadersOnly: true,
		// A consumer left behind by a replica that died goes soon.
		InactiveThreshold: 30 * time.Second,
		// The client recreates the consumer when it loses its place; if
		// that keeps failing, the scan stops with an error and starts
		// again (and another replica can take over) rather than hang.
		MaxResetAttempts: 5,
	}
	if checked > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, checked+1
	}
	cons, err := r.cfg.JS.OrderedConsumer(ctx, stream.EventsStream, cfg)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream.EventsStream, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(1000), jetstream.PullHeartbeat(pullHeartbeat)) // a stall ends within 4s, as in consume
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream.EventsStream, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		iter.Stop()
	}()
	for ctx.Err() == nil {
		msg, err := stream.NextMsg(ctx, iter, r.cfg.JS.Conn())
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			return fmt.Errorf("read stream %s: %w", stream.EventsStream, err)
		}
		info, ok := parseAckReply(msg.Reply())
		if !ok {
			meta, err := msg.Metadata()
			if err != nil {
				continue // not from a consumer; cannot happen
			}
			info.streamSeq = meta.Sequence.Stream
		}
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
			r.log.Warn("cannot check or dead-letter an event for an unknown destination (retrying)", "subject", msg.Subject(), "seq", seq, "retry_in", wait, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		r.cfg.Metrics.checkedRead()
		done.Store(seq)
	}
	return ctx.Err()
}

// checkRouted returns nil when msg, stored at seq, is for a destination
// known here, or once it is dead-lettered. It runs for every event: the
// common case takes only the subject apart.
func (r *Relay) checkRouted(ctx context.Context, msg jetstream.Msg, seq uint64) error {
	p, err := stream.ParseSubject(msg.Subject())
	if err != nil {
		return nil // not an event relay can read; nothing to route
	}
	if d, ok := r.dests.get(p.Dest); ok && seq >= d.StartSeq {
		return nil
	}
	ev, err := eventOf(msg)
	if err != nil {
		return nil
	}
	return r.deadLetterUnrouted(ctx, ev)
}

// deadLetterUnrouted asks the store, which is authoritative, whether ev's
// destination exists; if not, it dead-letters ev.
func (r *Relay) deadLetterUnrouted(ctx context.Context, ev event) error {
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
	// The check reads headers only: read the whole event for the letter.
	full, err := r.events.GetMsg(ctx, ev.seq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // gone meanwhile (deleted, or aged out): nothing to keep
		}
		return err
	}
	ev.body, ev.hdr = full.Data, full.Header
	out := Outcome{Dest: ev.dest, EventID: ev.id, Seq: ev.seq, Decision: Decision{Action: DeadLetter, Reason: ReasonUnknownDestination}}
	if err := r.writeDeadLetter(ctx, ev, 0, &out); err != nil {
		return err
	}
	r.logOutcome(out)
	if r.cfg.OnDelivery != nil {
		r.cfg.OnDelivery(out)
	}
	return nil
}
