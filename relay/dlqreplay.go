package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/opevent"
)

// DeadLetterReplay is a replay of dead letters, as 'relay dlq replay' and
// POST /v1/dead-letters/replay make it (ReplayDeadLetters).
type DeadLetterReplay struct {
	// Letters is the dead-letter store. Required.
	Letters *dlq.Store
	// JS is where relay.replay.finished is published. Required unless
	// DryRun.
	JS jetstream.JetStream
	// By names what replays, in relay.replay.finished: "relay dlq replay"
	// or "api". Required.
	By string
	// Filter selects the letters.
	Filter dlq.Filter
	// Options are ToDest (which must exist: it is not checked here),
	// DryRun and Interval.
	Options dlq.ReplayOptions
	// StopOnFailure ends the replay at the first letter that fails, with
	// an error that says how far it came. Optional: by default a failed
	// letter is counted in Failed and the replay goes on.
	StopOnFailure bool
	// Step, when set, is called after each letter with what was done with
	// it (i counts the letters from 0, of total).
	Step func(i, total int, s dlq.ReplayStep)
	// Now is the clock of relay.replay.finished's "at". Optional, default
	// time.Now.
	Now func() time.Time
}

// LetterOutcome is a dead letter a replay skipped or failed, and why.
type LetterOutcome struct {
	Seq    uint64 `json:"seq"`
	Detail string `json:"detail"`
}

// ReplayReport is what ReplayDeadLetters did.
type ReplayReport struct {
	// Matched is how many letters the filter selected.
	Matched int
	// Replayed counts the letters replayed (in a dry run, those that would
	// be), Duplicates among them those replayed before, within the
	// duplicate window, and not published again.
	Replayed, Duplicates int
	// Skipped are the letters that can never be replayed (or were gone
	// when their turn came), left as they are.
	Skipped []LetterOutcome
	// Failed are the letters whose replay failed (without StopOnFailure).
	Failed []LetterOutcome
	// EventErr is why relay.replay.finished could not be published (nil:
	// it was, or there was nothing to tell).
	EventErr error
}

// ReplayInterruptedError is ReplayDeadLetters' error when its context ended
// while it waited for its next replay (Options.Interval).
type ReplayInterruptedError struct {
	Replayed, Matched int
	Err               error // wraps dlq.ErrInterrupted
}

func (e *ReplayInterruptedError) Error() string {
	return fmt.Sprintf("interrupted after %d of %d; re-running is safe", e.Replayed, e.Matched)
}

func (e *ReplayInterruptedError) Unwrap() error { return e.Err }

// ReplayDeadLetters replays the dead letters r.Filter selects, oldest first
// (dlq.Store.ReplayEach), and then, if it published any event that was not
// a duplicate, publishes relay.replay.finished with its counts (not in a
// dry run, nor after an error). A letter that can never be replayed is
// skipped; one whose replay fails ends the replay (StopOnFailure) or is
// counted and the replay goes on. Re-running a replay is safe: a letter
// replayed again within the duplicate window is not published again.
func ReplayDeadLetters(ctx context.Context, r DeadLetterReplay) (ReplayReport, error) {
	rep := ReplayReport{Skipped: []LetterOutcome{}, Failed: []LetterOutcome{}}
	switch {
	case r.Letters == nil:
		return rep, errors.New("replay dead letters: no dead-letter store")
	case r.JS == nil && !r.Options.DryRun:
		return rep, errors.New("replay dead letters: no JetStream to publish relay.replay.finished to")
	case r.By == "":
		return rep, errors.New("replay dead letters: By is required (who replays, for relay.replay.finished)")
	}
	err := r.Letters.ReplayEach(ctx, r.Filter, r.Options, func(i, total int, s dlq.ReplayStep) error {
		rep.Matched = total
		if r.Step != nil {
			r.Step(i, total, s)
		}
		switch {
		case s.Skipped != "":
			rep.Skipped = append(rep.Skipped, LetterOutcome{s.Letter.Seq, s.Skipped})
		case s.Err != nil && r.StopOnFailure:
			return fmt.Errorf("%w (replayed %d of %d before this; re-running is safe)", s.Err, rep.Replayed, total)
		case s.Err != nil:
			rep.Failed = append(rep.Failed, LetterOutcome{s.Letter.Seq, s.Err.Error()})
		default:
			rep.Replayed++
			if s.Ack != nil && s.Ack.Duplicate {
				rep.Duplicates++
			}
		}
		return nil
	})
	if errors.Is(err, dlq.ErrInterrupted) {
		return rep, &ReplayInterruptedError{Replayed: rep.Replayed, Matched: rep.Matched, Err: err}
	}
	if err != nil || r.Options.DryRun || rep.Replayed == rep.Duplicates {
		return rep, err // nothing published: nothing to tell
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	rep.EventErr = opevent.Publish(ctx, r.JS, opevent.Event{Type: opevent.ReplayFinished, ID: opevent.NewReplayID(), Data: opevent.ReplayFinishedBody{
		At: now().UTC(), By: r.By, Dest: r.Filter.Dest, ToDest: r.Options.ToDest, Matched: rep.Matched,
		Replayed: rep.Replayed, Duplicates: rep.Duplicates, Skipped: len(rep.Skipped), Failed: len(rep.Failed)}})
	return rep, nil
}
