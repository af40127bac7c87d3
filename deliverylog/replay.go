package deliverylog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// LogReplay selects events to deliver again from the event log.
type LogReplay struct {
	// Dest is the destination whose events are replayed. Required.
	Dest string
	// ToDest receives them instead of Dest (to backfill a new destination).
	// Optional.
	ToDest string
	// Key selects one order key. Optional.
	Key string
	// Type, a type pattern, replays the typed events of the matching types
	// (whether or not Dest subscribed to them when they were published) to
	// Dest instead: to backfill a destination that subscribed later.
	// Optional.
	Type string
	// Since and Until bound the publish time (Until excluded). Since is
	// required; Until defaults to now.
	Since, Until time.Time
}

// ReplayedEvent is one event a log replay republished (or would have).
type ReplayedEvent struct {
	ID        string
	Seq       uint64 // in the log
	NewSeq    uint64 // of the republished copy; 0 in a dry run
	Duplicate bool   // replayed within the duplicate window before: not published again
	// Stored is when the original was stored in the events stream: a
	// replay cut short goes on from the last one's with --since.
	Stored time.Time
}

// ReplayLog republishes the events that were published for r.Dest between
// r.Since and r.Until, delivered or not, with their event ids. Copies made by
// relay itself (retries republished from Redis, earlier replays) are not
// replayed again, so each event is replayed once. Each republish uses the dedup
// id log:<dest>:<seq>, so re-running an interrupted replay within the
// duplicate window publishes nothing twice. fn, when set, is called per event;
// dryRun only calls it.
func ReplayLog(ctx context.Context, js jetstream.JetStream, r LogReplay, dryRun bool, fn func(ReplayedEvent) error) (int, error) {
	return ReplayAt(ctx, js, r, dryRun, fn, time.Now)
}

// ReplayAt is ReplayLog with the clock that gives Until its default.
func ReplayAt(ctx context.Context, js jetstream.JetStream, r LogReplay, dryRun bool, fn func(ReplayedEvent) error, now func() time.Time) (int, error) {
	if err := stream.ValidateDestRef(r.Dest); err != nil {
		return 0, err
	}
	if r.Type != "" {
		if err := stream.ValidateTypePattern(r.Type); err != nil {
			return 0, err
		}
		if r.ToDest != "" {
			return 0, errors.New("log replay: a replay by type goes to Dest; ToDest applies to a destination's own events")
		}
	}
	if r.Since.IsZero() {
		return 0, errors.New("log replay needs a start time")
	}
	if r.Until.IsZero() {
		r.Until = now()
	}
	if !r.Until.After(r.Since) {
		return 0, errors.New("log replay: until must be after since")
	}
	to := r.Dest
	if r.ToDest != "" {
		to = r.ToDest
	}
	st, err := destination.NewStore(ctx, js)
	if err != nil {
		return 0, err
	}
	if _, err := st.Get(ctx, to); err != nil {
		return 0, err
	}
	seal, err := stream.LoadSeal(ctx, js)
	if err != nil {
		return 0, err
	}
	filters := stream.DestFilters(r.Dest)
	switch {
	case r.Type != "":
		// A tenant's destination gets the typed events of its tenant.
		filters = []string{stream.TypeFilter(r.Type)}
		if t, _ := stream.SplitDestRef(r.Dest); t != "" {
			filters = []string{stream.TenantTypeSubject(t, r.Type)}
		}
	case r.Key != "":
		// The stored subject keeps the key's bucket, not the key: read
		// the bucket and match Relay-Order-Key below.
		filters = stream.KeyedSubjects(r.Dest, r.Key)
	}
	n := 0
	err = stream.Read(ctx, js, stream.EventsStream, stream.ReadOptions{Filters: filters, Since: r.Since}, func(m *jetstream.RawStreamMsg) error {
		var ev stream.Envelope
		var err error
		if r.Type != "" {
			ev, err = stream.DecodeTyped(m.Subject, m.Sequence, m.Time, m.Header, m.Data)
		} else {
			ev, err = stream.Decode(m.Subject, m.Sequence, m.Time, m.Header, m.Data, seal)
		}
		if err != nil {
			return nil // not an event relay could deliver either
		}
		if !ev.Stored.Before(r.Until) {
			return stream.ErrStop
		}
		if r.Key != "" && (ev.Key == "" || stream.KeyToken(ev.Key) != stream.KeyToken(r.Key)) {
			return nil // another key of the bucket (or of the type)
		}
		if ev.Copied {
			return nil // a copy relay made; its original is replayed
		}
		out := ReplayedEvent{ID: ev.ID, Seq: ev.Seq, Stored: ev.Stored}
		if !dryRun {
			subject := stream.InSubject(to, ev.Key)
			if r.Type == "" {
				p, _ := stream.ParseSubject(ev.Subject)
				p.Dest = to
				subject = p.InputSubject(ev.Key)
			}
			ev.Dest = to
			ack, err := js.PublishMsg(ctx, ev.Msg(stream.ReplayedLog, subject, seal))
			if err != nil {
				return fmt.Errorf("replay event %s (seq %d): %w", ev.ID, ev.Seq, err)
			}
			out.NewSeq, out.Duplicate = ack.Sequence, ack.Duplicate
		}
		n++
		if fn != nil {
			return fn(out)
		}
		return nil
	})
	return n, err
}
