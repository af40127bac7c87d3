// Package lease is one replica's hold on a key of a KV bucket (Lease), and
// the work one replica at a time does under one (Job, Run).
package lease

import (
	"context"
	"encoding/json"
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
type Lease struct {
	KV  jetstream.KeyValue
	Key string
	ID  string // this replica
	// holder says which replica holds a value ("": released).
	Holder func(value []byte) (string, error)
	// takeover is how long a key must stay unchanged for another replica
	// to take it.
	Takeover time.Duration
	Now      func() time.Time
	Rev      uint64 // the key's revision as this replica last wrote it
}

// errLeaseLost says another replica holds the lease now, or an operator
// removed it.
var ErrLost = errors.New("the lease is another replica's now (this one did not renew it in time)")

// acquire waits until this replica holds the lease: it creates the key
// with next(nil), or replaces a released, abandoned or own value v with
// next(v). It returns what it wrote. warn reports reads that keep failing.
func (l *Lease) Acquire(ctx context.Context, next func(old []byte) ([]byte, error), warn func(msg string, args ...any)) ([]byte, error) {
	var (
		seenRev uint64
		seenAt  time.Time
		failing int // reads failed in a row
	)
	for {
		e, err := l.KV.Get(ctx, l.Key)
		var old []byte
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			v, err := next(nil)
			if err != nil {
				return nil, err
			}
			rev, err := l.KV.Create(ctx, l.Key, v)
			if err == nil {
				l.Rev = rev
				return v, nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return nil, fmt.Errorf("create %s: %w", l.Key, err)
			}
			continue // another replica created it first
		case err != nil:
			// NATS unreachable, a leader election: look again. The
			// holder's silence is still measured right: a holder that
			// renewed meanwhile has a new revision when we next read it.
			failing++
			if failing == max(int(l.Takeover/Renew), 1) {
				warn("cannot read a lease (retrying)", "key", l.Key, "err", err)
			}
		default:
			failing = 0
			old = e.Value()
			holder, err := l.Holder(old)
			if err != nil {
				return nil, err
			}
			take := holder == "" || holder == l.ID
			if !take {
				if e.Revision() != seenRev {
					seenRev, seenAt = e.Revision(), l.Now()
				} else if silent := l.Now().Sub(seenAt); silent >= l.Takeover {
					warn("taking over a lease from a replica that stopped renewing it", "key", l.Key, "holder", holder, "silent_for", silent.Round(time.Millisecond))
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
		case <-time.After(Renew):
		}
	}
}

// replace writes next(old) over revision rev; ok is false when the key
// changed since.
func (l *Lease) replace(ctx context.Context, old []byte, rev uint64, next func([]byte) ([]byte, error)) (v []byte, ok bool, err error) {
	if v, err = next(old); err != nil {
		return nil, false, err
	}
	n, err := l.KV.Update(ctx, l.Key, v, rev)
	switch {
	case err == nil:
		l.Rev = n
		return v, true, nil
	case IsWrongRevision(err):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("take %s: %w", l.Key, err)
}

// keep renews the lease with value() every `every` until ctx ends, and
// calls renewed after each write that went through. It returns
// errLeaseLost when the lease was lost, or renewed's error.
func (l *Lease) Keep(ctx context.Context, every time.Duration, value func() []byte, renewed func(context.Context) error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ok, err := l.Write(value())
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
func (l *Lease) Write(value []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*Renew)
	defer cancel()
	rev, err := l.KV.Update(ctx, l.Key, value, l.Rev)
	if err == nil {
		l.Rev = rev
		return true, nil
	}
	if !IsWrongRevision(err) {
		return false, nil
	}
	// Changed since our last write. Still ours (an earlier write that
	// timed out here but was applied)? Then write again on its revision.
	e, gerr := l.KV.Get(ctx, l.Key)
	if errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return false, ErrLost // removed: an operator, or the bucket's age limit
	}
	if gerr != nil {
		return false, nil // cannot tell now; the next write asks again
	}
	if h, herr := l.Holder(e.Value()); herr != nil || h != l.ID {
		return false, ErrLost
	}
	rev, err = l.KV.Update(ctx, l.Key, value, e.Revision())
	if err == nil {
		l.Rev = rev
		return true, nil
	}
	if IsWrongRevision(err) {
		return false, ErrLost
	}
	return false, nil
}

// leaseRenew is how often a lease's holder renews it by default.
const Renew = time.Second

// isWrongRevision reports an Update that lost its compare-and-set: the key
// changed since (error code 10071, or 10164 on a replicated bucket).
func IsWrongRevision(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }

// Job is work one replica at a time does on the events stream, under a
// lease whose value, S as JSON, records who holds it and how far the work
// got (the unknown-destination check, the router, the operator-events
// job).
type Job[S any] interface {
	// Take returns the state this replica writes when it takes the lease
	// over old (nil: none yet), the events stream having been created at
	// created.
	Take(old *S, created time.Time) (S, error)
	// Progress returns the state with the job's progress, held by holder
	// ("" releases it).
	Progress(holder string) S
	// Holder says which replica holds s ("": released).
	Holder(s S) string
	// Work runs while the lease is held, until ctx ends or it fails.
	Work(ctx context.Context) error
}

// Watched is a Job that is told each state renewed (tests wait for it).
type Watched[S any] interface {
	// Written is called with each renewal's state once it is written.
	Written(st S)
}

// Config names a job's lease and how it is held.
type Config struct {
	// Name names the job in logs.
	Name string
	// Key is the lease's key in stream.StateBucket.
	Key string
	// ID is this replica's.
	ID string
	// Takeover is how long the key must stay unchanged for another
	// replica to take it.
	Takeover time.Duration
	Now      func() time.Time
	Log      *slog.Logger
}

// errStreamRecreated says the events stream was deleted and created again
// under a job: its sequences start over.
var errStreamRecreated = errors.New("the events stream was created again")

// streamCheckEvery is how many renewals pass between looks at whether the
// events stream was created again under a job.
const streamCheckEvery = 10

// Run takes part in job until ctx ends: it waits for the lease, works
// while it holds it, and waits again; a failure is logged and tried again
// a second later.
func Run[S any](ctx context.Context, js jetstream.JetStream, cfg Config, job Job[S]) {
	for ctx.Err() == nil {
		err := hold(ctx, js, cfg, job)
		switch {
		case ctx.Err() != nil || err == nil:
		case errors.Is(err, errStreamRecreated):
			cfg.Log.Warn(cfg.Name+" starts over", "err", err)
			continue
		default:
			cfg.Log.Error(cfg.Name+" stopped (retrying in 1s)", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Decode reads a job's state S from the value of key.
func Decode[S any](key string, v []byte) (S, error) {
	var st S
	if err := json.Unmarshal(v, &st); err != nil {
		return st, fmt.Errorf("%s/%s holds %q, not a %T: %w", stream.StateBucket, key, v, st, err)
	}
	return st, nil
}

func encode[S any](st S) []byte {
	b, _ := json.Marshal(st) // a job's state is plain data
	return b
}

// hold acquires job's lease, runs job.Work while it holds it, renewing the
// lease with the job's progress every Renew, and releases it with the
// progress made.
func hold[S any](ctx context.Context, js jetstream.JetStream, cfg Config, job Job[S]) error {
	kv, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	events, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	created := events.CachedInfo().Created
	l := &Lease{KV: kv, Key: cfg.Key, ID: cfg.ID, Takeover: cfg.Takeover, Now: cfg.Now, Holder: func(v []byte) (string, error) {
		st, err := Decode[S](cfg.Key, v)
		return job.Holder(st), err
	}}
	take := func(old []byte) ([]byte, error) {
		var prev *S
		if old != nil {
			st, err := Decode[S](cfg.Key, old)
			if err != nil {
				return nil, err
			}
			prev = &st
		}
		st, err := job.Take(prev, created)
		if err != nil {
			return nil, err
		}
		return encode(st), nil
	}
	if _, err := l.Acquire(ctx, take, cfg.Log.Warn); err != nil {
		return err
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	kept := make(chan error, 1)
	go func() {
		renewals := 0
		watched, _ := job.(Watched[S])
		var last S // the state Keep writes; both of its calls are on this goroutine
		kept <- l.Keep(wctx, Renew, func() []byte { last = job.Progress(cfg.ID); return encode(last) }, func(ctx context.Context) error {
			if watched != nil {
				watched.Written(last)
			}
			if renewals++; renewals%streamCheckEvery != 0 {
				return nil
			}
			cctx, cancel := context.WithTimeout(ctx, Renew)
			s, err := js.Stream(cctx, stream.EventsStream)
			cancel()
			if err == nil && !s.CachedInfo().Created.Equal(created) {
				return fmt.Errorf("%w: %s", errStreamRecreated, stream.EventsStream)
			}
			return nil
		})
		stop() // lease lost: stop working at once
	}()
	err = job.Work(wctx)
	stop()
	lerr := <-kept
	// Unless the lease is another replica's now, release it with the
	// progress made, so that another replica (or this one) goes on from
	// there at once. After errStreamRecreated that is recorded against the
	// old stream, so the next holder starts from the beginning.
	if !errors.Is(lerr, ErrLost) {
		_, _ = l.Write(encode(job.Progress("")))
	}
	switch {
	case lerr != nil:
		return lerr
	case ctx.Err() != nil:
		return nil
	}
	return err
}
