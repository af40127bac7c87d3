package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A lease is one replica's hold on a key of a KV bucket: while it holds it,
// it rewrites the key's value every renewal with a compare-and-set on the
// revision it last wrote, so that a replica that lost it finds out at its
// next write. Another replica takes it over once it has seen the key
// unchanged for takeover (its own clock: the holder's is not its), or at
// once when the value names no holder.
//
// The unknown-destination check holds one lease among all replicas, and
// each replica holds one of its own in the replicas bucket, where the
// bucket's age limit removes the key of a replica that stopped renewing.
type lease struct {
	kv  jetstream.KeyValue
	key string
	id  string // this replica
	// holder says which replica holds a value ("": released).
	holder func(value []byte) (string, error)
	// takeover is how long a key must stay unchanged for another replica
	// to take it.
	takeover time.Duration
	now      func() time.Time
	rev      uint64 // the key's revision as this replica last wrote it
}

// errLeaseLost says another replica holds the lease now, or an operator
// removed it.
var errLeaseLost = errors.New("the lease is another replica's now (this one did not renew it in time)")

// acquire waits until this replica holds the lease: it creates the key
// with next(nil), or replaces a released, abandoned or own value v with
// next(v). It returns what it wrote. warn reports reads that keep failing.
func (l *lease) acquire(ctx context.Context, next func(old []byte) ([]byte, error), warn func(msg string, args ...any)) ([]byte, error) {
	var (
		seenRev uint64
		seenAt  time.Time
		failing int // reads failed in a row
	)
	for {
		e, err := l.kv.Get(ctx, l.key)
		var old []byte
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			v, err := next(nil)
			if err != nil {
				return nil, err
			}
			rev, err := l.kv.Create(ctx, l.key, v)
			if err == nil {
				l.rev = rev
				return v, nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return nil, fmt.Errorf("create %s: %w", l.key, err)
			}
			continue // another replica created it first
		case err != nil:
			// NATS unreachable, a leader election: look again. The
			// holder's silence is still measured right: a holder that
			// renewed meanwhile has a new revision when we next read it.
			failing++
			if failing == max(int(l.takeover/leaseRenew), 1) {
				warn("cannot read a lease (retrying)", "key", l.key, "err", err)
			}
		default:
			failing = 0
			old = e.Value()
			holder, err := l.holder(old)
			if err != nil {
				return nil, err
			}
			take := holder == "" || holder == l.id
			if !take {
				if e.Revision() != seenRev {
					seenRev, seenAt = e.Revision(), l.now()
				} else if silent := l.now().Sub(seenAt); silent >= l.takeover {
					warn("taking over a lease from a replica that stopped renewing it", "key", l.key, "holder", holder, "silent_for", silent.Round(time.Millisecond))
					take = true
				}
			}
			if take {
				if v, ok, err := l.replace(ctx, old, e.Revision(), next); ok || err != nil {
					return v, err
				}
				continue // someone else wrote it meanwhile: look again
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(leaseRenew):
		}
	}
}

// replace writes next(old) over revision rev; ok is false when the key
// changed since.
func (l *lease) replace(ctx context.Context, old []byte, rev uint64, next func([]byte) ([]byte, error)) (v []byte, ok bool, err error) {
	if v, err = next(old); err != nil {
		return nil, false, err
	}
	n, err := l.kv.Update(ctx, l.key, v, rev)
	switch {
	case err == nil:
		l.rev = n
		return v, true, nil
	case isWrongRevision(err):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("take %s: %w", l.key, err)
}

// keep renews the lease with value() every `every` until ctx ends, and
// calls renewed after each write that went through. It returns
// errLeaseLost when the lease was lost, or renewed's error.
func (l *lease) keep(ctx context.Context, every time.Duration, value func() []byte, renewed func(context.Context) error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ok, err := l.write(value())
		if err != nil {
			return err
		}
		if ok && renewed != nil {
			if err := renewed(ctx); err != nil {
				return err
			}
		}
	}
}

// write replaces the lease's value if this replica still holds it, and
// says whether it did. An error other than errLeaseLost (NATS unreachable)
// is not returned: the next write tries again, and if it lasts, another
// replica takes over and a later write finds out.
//
// It does not use the caller's context: a write cancelled after the server
// applied it would leave l.rev behind, and the next write would fail.
func (l *lease) write(value []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*leaseRenew)
	defer cancel()
	rev, err := l.kv.Update(ctx, l.key, value, l.rev)
	if err == nil {
		l.rev = rev
		return true, nil
	}
	if !isWrongRevision(err) {
		return false, nil
	}
	// Changed since our last write. Still ours (an earlier write that
	// timed out here but was applied)? Then write again on its revision.
	e, gerr := l.kv.Get(ctx, l.key)
	if errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return false, errLeaseLost // removed: an operator, or the bucket's age limit
	}
	if gerr != nil {
		return false, nil // cannot tell now; the next write asks again
	}
	if h, herr := l.holder(e.Value()); herr != nil || h != l.id {
		return false, errLeaseLost
	}
	rev, err = l.kv.Update(ctx, l.key, value, e.Revision())
	if err == nil {
		l.rev = rev
		return true, nil
	}
	if isWrongRevision(err) {
		return false, errLeaseLost
	}
	return false, nil
}

// leaseRenew is how often a lease's holder renews it by default.
const leaseRenew = time.Second

// isWrongRevision reports an Update that lost its compare-and-set: the key
// changed since (error code 10071, or 10164 on a replicated bucket).
func isWrongRevision(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }
