package dlq

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

// NotReplayable says why l can never be replayed ("" if it can): it is
// malformed, or holds a parked entry relay could not use. Its text is not
// made printable.
func (l Letter) NotReplayable() string {
	switch {
	case l.Malformed != "":
		return "malformed: " + l.Malformed
	case l.Reason == ReasonCorruptParkedEntry:
		return "a parked entry relay could not use (" + l.LastError + ")"
	}
	return ""
}

// ReplayOptions are how ReplayEach replays.
type ReplayOptions struct {
	// ToDest, when not empty, receives the letters instead of their own
	// destinations (it must exist: ReplayEach does not check).
	ToDest string
	// DryRun replays nothing: each letter is only reported.
	DryRun bool
	// Interval is the least time between two replays (0: no limit).
	Interval time.Duration
}

// ReplayStep is what ReplayEach did with one dead letter.
type ReplayStep struct {
	Letter Letter
	// Dest is where the letter goes: ToDest, or its own destination.
	Dest string
	// Skipped says why the letter can never be replayed (NotReplayable);
	// it was left as it is.
	Skipped string
	// Ack is the republished event's, when it was replayed (nil in a dry
	// run). Ack.Duplicate: it had been replayed before, within the
	// duplicate window, and was not published again.
	Ack *jetstream.PubAck
	// Err is why the replay failed.
	Err error
}

// ErrInterrupted is returned by ReplayEach when ctx ended while it waited
// for its next replay (Interval).
var ErrInterrupted = errors.New("replay interrupted")

// ReplayEach replays the dead letters f selects, oldest first, as Replay
// does, and calls step after each with what it did (i counts the letters
// from 0, of total). A letter that cannot be replayed is skipped. A step
// returning an error ends ReplayEach with it; to go on after a failed
// replay, return nil.
func (s *Store) ReplayEach(ctx context.Context, f Filter, o ReplayOptions, step func(i, total int, st ReplayStep) error) error {
	// Listed without their bodies, each read whole when its turn comes:
	// a replay of many large letters holds one at a time.
	ls, err := s.Summaries(ctx, f, 0)
	if err != nil {
		return err
	}
	var tick *time.Ticker
	if o.Interval > 0 && !o.DryRun {
		tick = time.NewTicker(o.Interval)
		defer tick.Stop()
	}
	for i, l := range ls {
		st := ReplayStep{Letter: l, Dest: l.Dest, Skipped: l.NotReplayable()}
		if o.ToDest != "" {
			st.Dest = o.ToDest
		}
		if st.Skipped == "" && !o.DryRun {
			if tick != nil && i > 0 {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
				}
			}
			full, err := s.Get(ctx, l.Seq)
			switch {
			case errors.Is(err, ErrLetterNotFound):
				st.Skipped = "gone since it was listed (replayed or purged meanwhile)"
			case err != nil:
				st.Err = err
			default:
				st.Letter = full
				st.Ack, st.Err = s.Replay(ctx, full, o.ToDest)
			}
		}
		if err := step(i, len(ls), st); err != nil {
			return err
		}
	}
	return nil
}

// DeleteAll deletes the dead letters ls (purge), and returns how many it
// deleted: all of them, or those before the one it failed to delete.
func (s *Store) DeleteAll(ctx context.Context, ls []Letter) (int, error) {
	for i, l := range ls {
		if err := s.Delete(ctx, l.Seq); err != nil {
			return i, fmt.Errorf("%w (deleted %d of %d before this)", err, i, len(ls))
		}
	}
	return len(ls), nil
}

// Body is a letter's body in JSON: JSON as itself; text as a JSON string,
// with its exact bytes in Base64 too; anything else in Base64 only.
type Body struct {
	JSON   json.RawMessage `json:"body,omitempty"`
	Base64 string          `json:"body_base64,omitempty"`
}

// BodyOf is b in JSON (see Body).
func BodyOf(b []byte) Body {
	switch {
	case json.Valid(b):
		return Body{JSON: b}
	case utf8.Valid(b):
		s, _ := json.Marshal(string(b))
		return Body{JSON: s, Base64: base64.StdEncoding.EncodeToString(b)}
	}
	return Body{Base64: base64.StdEncoding.EncodeToString(b)}
}
