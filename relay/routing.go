package relay

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/stream"
)

// deadLetterTooLarge dead-letters the copy of p for dest, which the events
// stream refused as too large.
func (r *Relay) deadLetterTooLarge(ctx context.Context, p routing.Routed, dest string, cause error) {
	r.deadLetterCopy(ctx, p, dest, ReasonInvalidEvent, "too large to copy for this destination once relay's headers are added: "+cause.Error())
}

// deadLetterMismatch dead-letters typed event p for its subscriber dest:
// its body does not satisfy its type's schema (cause says where).
func (r *Relay) deadLetterMismatch(ctx context.Context, p routing.Routed, dest string, cause error) {
	r.deadLetterCopy(ctx, p, dest, ReasonSchemaMismatch, "does not satisfy the schema of event type "+p.Envelope.Type+": "+cause.Error())
}

// deadLetterCopy dead-letters typed event p for its subscriber dest, which
// gets no copy of it, for reason.
func (r *Relay) deadLetterCopy(ctx context.Context, p routing.Routed, dest, reason, note string) {
	subject := stream.InSubject(dest, p.Envelope.Key)
	ev := event{dest: dest, id: p.Envelope.ID, typ: p.Envelope.Type, seq: p.Seq, subject: subject, body: p.Envelope.Body, hdr: p.Envelope.Header(stream.Routed, r.seal)}
	out := Outcome{Dest: dest, EventID: p.Envelope.ID, Seq: p.Seq, Decision: Decision{Action: DeadLetter, Reason: reason, Note: note}}
	if err := r.writeDeadLetter(ctx, ev, 0, &out); err != nil {
		if errors.Is(err, dlq.ErrPermanent) {
			r.deadLetterFailed(ctx, ev, out.Decision.Reason, err)
		} else {
			r.log.Error("cannot dead-letter a typed event; it is not delivered to this destination", "reason", reason, "dest", dest, "event_id", p.Envelope.ID, "seq", p.Seq, "err", err)
		}
		out.Err = err
	}
	r.logOutcome(out)
	if r.cfg.OnDelivery != nil {
		r.cfg.OnDelivery(out)
	}
}

// runRouter takes part in routing until ctx ends.
func (r *Relay) runRouter(ctx context.Context, id string) {
	routing.RunRouter(ctx, routing.RouterConfig{JS: r.cfg.JS, ID: id, Store: r.store, Dests: r.dests, Seal: r.seal, Log: r.log, Now: r.cfg.Now,
		Takeover: r.cfg.CheckTakeover, Metrics: r.cfg.Metrics, Recorded: r.recordRouting, TooLarge: r.deadLetterTooLarge,
		Catalog: r.cfg.Catalog, Mismatched: r.deadLetterMismatch,
		Written: func(st routing.State) { r.signals.RouterWritten.Signal(st) }})
}

// runUnrouted takes part in the unknown-destination check until ctx ends.
func (r *Relay) runUnrouted(ctx context.Context, id string) {
	routing.RunCheck(ctx, routing.CheckConfig{JS: r.cfg.JS, ID: id, Dests: r, Letters: r, Log: r.log, Now: r.cfg.Now,
		Takeover: r.cfg.CheckTakeover, Metrics: r.cfg.Metrics, ListMax: r.cfg.checkListMax,
		Written: func(st routing.CheckState) { r.signals.CheckWritten.Signal(st) }})
}

// Routes: see knownDests (the unknown-destination check).
func (r *Relay) Routes(dest string, seq uint64) bool {
	d, ok := r.dests.Get(dest)
	return ok && seq >= d.StartSeq
}

// Exists: see knownDests (the unknown-destination check).
func (r *Relay) Exists(ctx context.Context, dest string, seq uint64) (bool, error) {
	// A token no destination can be named (nor the store hold as a key)
	// is unknown without asking.
	if stream.ValidateDestRef(dest) != nil {
		return false, nil
	}
	d, err := r.store.Get(ctx, dest)
	switch {
	case err == nil:
		return seq >= d.StartSeq, nil
	case errors.Is(err, destination.ErrStoredCorrupt):
		// It exists, but relay cannot read it (and does not deliver it):
		// its events wait for an operator, in the stream.
		r.log.Debug("event for a destination stored corrupt left in the stream", "dest", dest, "seq", seq, "err", err)
		return true, nil
	case errors.Is(err, destination.ErrNotFound):
		return false, nil
	}
	return false, err
}

// DeadLetterUnknown: see unknownLetters (the unknown-destination check). m may have its headers only: the
// whole event is read for the letter.
func (r *Relay) DeadLetterUnknown(ctx context.Context, m *jetstream.RawStreamMsg) error {
	full, err := stream.GetMsg(ctx, r.cfg.JS, stream.EventsStream, m.Sequence, "")
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // gone meanwhile (deleted, or aged out): nothing to keep
		}
		return err
	}
	ev, err := rawEvent(full, r.seal)
	if err != nil {
		return nil // not an event relay can read
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
