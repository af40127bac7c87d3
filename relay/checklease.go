package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// leaseRenew is how often the holder of the check rewrites its lease.
const leaseRenew = time.Second

// checkLease is one replica's hold on the check.
type checkLease struct {
	kv       jetstream.KeyValue
	id       string
	takeover time.Duration
	rev      uint64    // the key's revision as this replica last wrote it
	stream   time.Time // when the events stream was created
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
			// The first check of this stream: from its start.
			const start = 0
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
