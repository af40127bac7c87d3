package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
