package relay

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/history"
)

func attemptOf(n int, at time.Time, res Result) dlq.Attempt {
	a := dlq.Attempt{N: n, At: at.Add(-res.Duration).UTC(), Duration: res.Duration, Status: res.Status}
	switch {
	case res.Err != nil:
		a.Error = res.Err.Error()
	case res.Snippet != "":
		a.Error = res.Snippet
	}
	if res.Pooled {
		i := res.URL
		a.URL = &i
	}
	return a
}

func historyKey(ev event) string { return history.Key(ev.dest, ev.id) }

// attemptLog returns what is recorded for ev (nothing if that fails).
func (r *Relay) attemptLog(ctx context.Context, ev event) history.Log {
	l, _ := r.readLog(ctx, ev)
	return l
}

// readLog returns what is recorded for ev, and whether a record was found.
func (r *Relay) readLog(ctx context.Context, ev event) (history.Log, bool) {
	l, _, err := history.Read(ctx, r.attempts, historyKey(ev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.log.Warn("cannot read attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
	return l, err == nil
}

func (r *Relay) history(ctx context.Context, ev event) []dlq.Attempt {
	return r.attemptLog(ctx, ev).Attempts
}

// recordAttempt adds a failed attempt to ev's history, with reply, the ack
// subject of its delivery, and returns an operator's reason to skip ev if
// one was set. A failure to record is logged: the history is then
// incomplete, the event is not affected. It is a compare-and-set, so that a
// mark set meanwhile (Store.SkipHead) is kept.
func (r *Relay) recordAttempt(ctx context.Context, ev event, attempt int, res Result, reply string) string {
	skip, _ := r.recordFailure(ctx, ev, attempt, res, reply, false)
	return skip
}

// recordFailure is recordAttempt, and with parking it records as well that
// relay is about to park ev (attemptLog.Parking), in the same write. It
// reports whether the write succeeded: an event must not be parked unless
// it did, since after a crash nothing else would tell its message from
// its copy in Redis.
func (r *Relay) recordFailure(ctx context.Context, ev event, attempt int, res Result, reply string, parking bool) (string, bool) {
	l, err := history.Change(ctx, r.attempts, historyKey(ev), true, 5, func(l *history.Log, found bool) error {
		if found && l.Origin != 0 && l.Origin != ev.origin {
			r.log.Warn("two messages with one event id are in retry at once: their attempts share one record (publish each event id once)",
				"dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "other_seq", l.Origin)
		}
		if found && l.Origin == ev.origin && ev.seq > l.Parking {
			// A later message of the event is its copy from Redis: the
			// park begun before it was done.
			l.Parked = max(l.Parked, l.Parking)
		}
		l.Attempts = dlq.TrimHistory(append(l.Attempts, attemptOf(attempt, r.cfg.Now(), res)))
		l.Made = max(l.Made, attempt)
		l.Event, l.Reply, l.Origin = ev.id, reply, ev.origin
		if parking {
			l.Parking = max(l.Parking, ev.seq)
		}
		return nil
	})
	if err != nil {
		r.log.Warn("cannot record attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
		return "", false
	}
	return l.SkipAt(ev.seq, ev.origin), true
}

// forgetHistory deletes ev's attempt log once ev is settled. Where the log
// says the event was parked, a done mark keeps that first (markDone): the
// messages it was parked from, and this one, may still come back after a
// crash.
func (r *Relay) forgetHistory(ctx context.Context, ev event) {
	r.markDone(ctx, ev)
	r.deleteLog(ctx, ev)
}

// markDone records, where ev was parked, that ev's messages up to this one
// are settled (doneKey): a done mark, which outlives the attempt log.
func (r *Relay) markDone(ctx context.Context, ev event) {
	if ev.parked == 0 {
		return
	}
	b, _ := json.Marshal(doneMark{Parked: max(ev.parked, ev.seq), Origin: ev.origin})
	if _, err := r.attempts.Put(ctx, doneKey(ev), b); err != nil {
		r.log.Warn("cannot record that a parked event is settled (a crash of the NATS server could deliver it again)", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
}

// deleteLog deletes ev's attempt log.
func (r *Relay) deleteLog(ctx context.Context, ev event) {
	if err := r.attempts.Delete(ctx, historyKey(ev)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.log.Warn("cannot delete attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
}
