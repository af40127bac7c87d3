package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/stream"
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

// leasedJob is work one replica at a time does on the events stream, under
// a lease whose value records how far it got (the unknown-destination
// check, the router).
type leasedJob struct {
	// what names the job in logs.
	what string
	key  string
	// holder says which replica holds a value ("": released).
	holder func(value []byte) (string, error)
	// take returns the value this replica writes when it takes the lease
	// over the value old (nil: none yet), the events stream having been
	// created at created.
	take func(old []byte, created time.Time) ([]byte, error)
	// value returns the value with the job's progress, held by holder (""
	// releases it).
	value func(holder string) []byte
	// work runs while the lease is held, until ctx ends or it fails.
	work func(ctx context.Context) error
	// written, if set, is called with each renewal's value once written
	// (tests wait for it: TestSignals).
	written func(value []byte)
}

// errStreamRecreated says the events stream was deleted and created again
// under a job: its sequences start over.
var errStreamRecreated = errors.New("the events stream was created again")

// streamCheckEvery is how many renewals pass between looks at whether the
// events stream was created again under a job.
const streamCheckEvery = 10

// runLeased takes part in job until ctx ends: it waits for the lease, works
// while it holds it, and waits again; a failure is logged and tried again
// a second later.
func runLeased(ctx context.Context, js jetstream.JetStream, id string, takeover time.Duration, now func() time.Time, log *slog.Logger, job leasedJob) {
	for ctx.Err() == nil {
		err := holdLeased(ctx, js, id, takeover, now, log, job)
		switch {
		case ctx.Err() != nil || err == nil:
		case errors.Is(err, errStreamRecreated):
			log.Warn(job.what+" starts over", "err", err)
			continue
		default:
			log.Error(job.what+" stopped (retrying in 1s)", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// holdLeased acquires job's lease, runs job.work while it holds it, renewing
// the lease with the job's progress every leaseRenew, and releases it
// with the progress made.
func holdLeased(ctx context.Context, js jetstream.JetStream, id string, takeover time.Duration, now func() time.Time, log *slog.Logger, job leasedJob) error {
	kv, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	events, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	created := events.CachedInfo().Created
	l := &lease{kv: kv, key: job.key, id: id, takeover: takeover, now: now, holder: job.holder}
	if _, err := l.acquire(ctx, func(old []byte) ([]byte, error) { return job.take(old, created) }, log.Warn); err != nil {
		return err
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	kept := make(chan error, 1)
	go func() {
		renewals := 0
		var last []byte // the value keep writes; both of its calls are on this goroutine
		kept <- l.keep(wctx, leaseRenew, func() []byte { last = job.value(id); return last }, func(ctx context.Context) error {
			if job.written != nil {
				job.written(last)
			}
			if renewals++; renewals%streamCheckEvery != 0 {
				return nil
			}
			cctx, cancel := context.WithTimeout(ctx, leaseRenew)
			s, err := js.Stream(cctx, stream.EventsStream)
			cancel()
			if err == nil && !s.CachedInfo().Created.Equal(created) {
				return fmt.Errorf("%w: %s", errStreamRecreated, stream.EventsStream)
			}
			return nil
		})
		stop() // lease lost: stop working at once
	}()
	err = job.work(wctx)
	stop()
	lerr := <-kept
	// Unless the lease is another replica's now, release it with the
	// progress made, so that another replica (or this one) goes on from
	// there at once. After errStreamRecreated that is recorded against the
	// old stream, so the next holder starts from the beginning.
	if !errors.Is(lerr, errLeaseLost) {
		_, _ = l.write(job.value(""))
	}
	switch {
	case lerr != nil:
		return lerr
	case ctx.Err() != nil:
		return nil
	}
	return err
}
