package relay

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/stream"
)

// ReasonDeadLetterFailed terminates an event whose dead letter cannot be
// stored for a reason retrying does not change (dlq.ErrPermanent). The
// event stays in the event log until its retention ends.
const ReasonDeadLetterFailed = "dead_letter_failed"

// DeadLetterFailures counts the events of one destination whose dead letter
// could not be stored for good, and describes the last one. It is kept in
// the state bucket, for 'relay stats'.
type DeadLetterFailures struct {
	Count       uint64    `json:"count"`
	LastAt      time.Time `json:"last_at"`
	LastEventID string    `json:"last_event_id"`
	LastSeq     uint64    `json:"last_seq"`
	LastError   string    `json:"last_error"`
}

// deadLetterFailuresKey is dest's key in the state bucket.
func deadLetterFailuresKey(dest string) string { return "dead-letter-failures." + dest }

// readDeadLetterFailures reads dest's record from the state bucket kv (zero
// and no error when there is none).
func readDeadLetterFailures(ctx context.Context, kv jetstream.KeyValue, dest string) (DeadLetterFailures, uint64, error) {
	e, err := kv.Get(ctx, deadLetterFailuresKey(dest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DeadLetterFailures{}, 0, nil
	}
	if err != nil {
		return DeadLetterFailures{}, 0, err
	}
	var f DeadLetterFailures
	_ = json.Unmarshal(e.Value(), &f) // one stored corrupt starts again from zero
	return f, e.Revision(), nil
}

// deadLetterFailed reports ev, whose dead letter cannot be stored for good
// (err wraps dlq.ErrPermanent): logged, counted in
// relay_dead_letter_failures_total and in the state bucket.
func (r *Relay) deadLetterFailed(ctx context.Context, ev event, reason string, err error) {
	r.log.Error("cannot store the event's dead letter, and retrying would not change that: the event is given up and stays in the event log until its retention ends ('relay replay' delivers it again)",
		"dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "reason", reason, "err", err)
	r.cfg.Metrics.deadLetterFailed(ev.dest)
	if stream.ValidateDestName(ev.dest) != nil {
		return // no key can name it; the log and the metric have it
	}
	kv, kerr := r.cfg.JS.KeyValue(ctx, stream.StateBucket)
	for i := 0; kerr == nil && i < 5; i++ {
		var f DeadLetterFailures
		var rev uint64
		if f, rev, kerr = readDeadLetterFailures(ctx, kv, ev.dest); kerr != nil {
			break
		}
		f.Count++
		f.LastAt, f.LastEventID, f.LastSeq, f.LastError = r.cfg.Now().UTC(), ev.id, ev.seq, dlq.OneLine(err.Error(), 512)
		b, _ := json.Marshal(f)
		if rev == 0 {
			_, kerr = kv.Create(ctx, deadLetterFailuresKey(ev.dest), b)
		} else {
			_, kerr = kv.Update(ctx, deadLetterFailuresKey(ev.dest), b, rev)
		}
		if kerr == nil || !errors.Is(kerr, jetstream.ErrKeyExists) && !lease.IsWrongRevision(kerr) {
			break
		}
	}
	if kerr != nil {
		r.log.Warn("cannot record the dead-letter failure for 'relay stats'", "dest", ev.dest, "event_id", ev.id, "err", kerr)
	}
}
