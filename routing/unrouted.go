package routing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/stream"
)

// The unknown-destination check.
//
// A producer can publish for a destination that does not exist: a typo, one
// not added yet, one removed. No destination consumer reads such an event,
// so one replica at a time reads the headers of every event as it is stored
// and dead-letters those whose destination is unknown.
//
// Nothing is acked, and the server keeps no state per event for it. The
// replica doing the check holds a lease (UnroutedCheckKey in the
// relay_state bucket) whose value also says up to which stream sequence
// every event has been checked; another replica takes over from there when
// the holder stops renewing it. Events are checked at least once: those
// checked since the last renewal are checked again after a crash, and a
// dead letter written twice is stored once (dead letters are deduplicated
// by destination and stream sequence).

// CheckKey is the relay_state key of the unknown-destination check.
const CheckKey = "unrouted-check"

// CheckState is the value of UnroutedCheckKey.
type CheckState struct {
	// Holder is the replica doing the check; empty when released.
	Holder string `json:"holder,omitempty"`
	// Checked is the stream sequence up to which every event of the events
	// stream has been checked.
	Checked uint64 `json:"checked"`
	// Stream is when the events stream Checked counts in was created: a
	// stream deleted and created again starts at sequence 1 again, and is
	// checked from there.
	Stream time.Time `json:"stream_created"`
}

// ReadCheckState returns the state of the unknown-destination check, and
// false when no relay has run it yet.
func ReadCheckState(ctx context.Context, js jetstream.JetStream) (CheckState, bool, error) {
	kv, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return CheckState{}, false, fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	e, err := kv.Get(ctx, CheckKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return CheckState{}, false, nil
	}
	if err != nil {
		return CheckState{}, false, fmt.Errorf("read %s/%s: %w", stream.StateBucket, CheckKey, err)
	}
	st, err := decodeCheckState(e.Value())
	return st, err == nil, err
}

// checkFilters are the subjects the check reads: every event published
// for a destination (typed events and subscription marks are the
// router's).
var checkFilters = []string{stream.InPrefix + ".*", stream.KeyedPrefix + ".>", stream.TenantPrefix + ".*.in.*", stream.TenantKeyedPrefix + ".>"}

// CheckLag is how many events published for a destination the
// unknown-destination check has not gone through yet: all of them when it
// has never run, or ran on an earlier incarnation of the stream.
func CheckLag(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, _, err := ReadCheckState(ctx, js)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	return destination.CountAfter(ctx, js, checkFilters, st.checkedIn(s.CachedInfo().Created))
}

func decodeCheckState(b []byte) (CheckState, error) {
	var st CheckState
	if err := json.Unmarshal(b, &st); err != nil {
		return CheckState{}, fmt.Errorf("%s/%s holds %q, not a check state: %w", stream.StateBucket, CheckKey, b, err)
	}
	return st, nil
}

// checkedIn is st.Checked if it counts in the events stream created at
// created, and 0 (nothing checked) if it counts in an earlier one.
func (st CheckState) checkedIn(created time.Time) uint64 {
	if !st.Stream.Equal(created) {
		return 0
	}
	return st.Checked
}

// KnownDests says which destinations exist.
type KnownDests interface {
	// Routes says, from what this process knows, whether the events of
	// dest stored at seq are delivered. It may say no for a destination
	// added a moment ago.
	Routes(dest string, seq uint64) bool
	// Exists asks the store, which is authoritative, the same.
	Exists(ctx context.Context, dest string, seq uint64) (bool, error)
}

// UnknownLetters dead-letters an event whose destination does not exist.
type UnknownLetters interface {
	DeadLetterUnknown(ctx context.Context, m *jetstream.RawStreamMsg) error
}

// CheckCounters count the check's work (relay's Metrics do).
type CheckCounters interface {
	// CheckedListed counts n events checked by listing their subjects.
	CheckedListed(n uint64)
	// CheckedRead counts an event checked by reading its headers.
	CheckedRead()
}

// CheckConfig is what the unknown-destination check needs of the engine.
// JS, ID, Dests, Letters and Log are required; the rest is optional.
type CheckConfig struct {
	JS jetstream.JetStream
	// ID is this replica's.
	ID       string
	Dests    KnownDests
	Letters  UnknownLetters
	Log      *slog.Logger
	Now      func() time.Time
	Takeover time.Duration
	Metrics  CheckCounters
	// ListMax replaces checkListMax (tests); 0 is checkListMax.
	ListMax int
	// Written, if set, is called with the check's state each time it is
	// written to relay_state (tests wait for it).
	Written func(CheckState)
}

// RunCheck takes part in the unknown-destination check until ctx ends.
func RunCheck(ctx context.Context, cfg CheckConfig) {
	if cfg.Metrics == nil {
		cfg.Metrics = noCounters{}
	}
	c := &unroutedCheck{js: cfg.JS, dests: cfg.Dests, letters: cfg.Letters, id: cfg.ID, log: cfg.Log, metrics: cfg.Metrics, listMax: cfg.ListMax}
	lease.Run(ctx, cfg.JS, lease.Config{Name: "the unknown-destination check", Key: CheckKey,
		ID: cfg.ID, Takeover: cfg.Takeover, Now: cfg.Now, Log: cfg.Log}, lease.Job[CheckState](&checkJob{c: c, written: cfg.Written}))
}

// unroutedCheck is one replica's part in the unknown-destination check.
type unroutedCheck struct {
	js      jetstream.JetStream
	dests   KnownDests
	letters UnknownLetters
	id      string // this replica
	log     *slog.Logger
	metrics CheckCounters
	// listMax replaces checkListMax (tests).
	listMax int
}

// checkJob is the check as a leased job: its lease value is a CheckState.
type checkJob struct {
	written func(CheckState)
	c       *unroutedCheck
	done    atomic.Uint64 // the sequence up to which events are checked
	created time.Time
}

func (j *checkJob) Holder(st CheckState) string { return st.Holder }

func (j *checkJob) Written(st CheckState) {
	if j.written != nil {
		j.written(st)
	}
}

func (j *checkJob) Take(old *CheckState, created time.Time) (CheckState, error) {
	j.created = created
	var checked uint64 // the first check of this stream: from its start
	if old != nil {
		if checked = old.checkedIn(created); checked != old.Checked {
			j.c.log.Warn("the events stream was created again since the unknown-destination check last ran: checking it from the start", "stream", stream.EventsStream, "created", created, "checked_seq_before", old.Checked)
		}
	}
	j.done.Store(checked)
	return CheckState{Holder: j.c.id, Checked: checked, Stream: created}, nil
}

func (j *checkJob) Progress(holder string) CheckState {
	return CheckState{Holder: holder, Checked: j.done.Load(), Stream: j.created}
}

func (j *checkJob) Work(ctx context.Context) error { return j.c.rounds(ctx, &j.done) }

// checkListMax is the most subjects the check lists in a round; a stream
// with more is checked by reading every event's headers.
const checkListMax = 20000

// checkEvery is the pause between the check's rounds: an event of an
// unknown destination is dead-lettered within about this.
const checkEvery = 500 * time.Millisecond

// rounds runs the check in rounds until ctx ends, done being the sequence
// up to which every event is checked. Each round takes the events stored
// since the last one, up to the stream's last sequence when it began. It
// lists the stream's event subjects (one per destination, one per
// destination and order-key bucket) and reads the events of only those
// subjects whose destination this replica does not know to route all of
// them: in the common case, no event is read at all, where reading each
// event's headers cost the NATS server as much again as delivering it
// (docs/performance.md). With more than checkListMax subjects, it reads
// every event's headers.
func (c *unroutedCheck) rounds(ctx context.Context, done *atomic.Uint64) error {
	s, err := c.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	for {
		if err := c.round(ctx, s, done); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(checkEvery):
		}
	}
}

// round checks the events stored after done up to the stream's last
// sequence now.
func (c *unroutedCheck) round(ctx context.Context, s jetstream.Stream, done *atomic.Uint64) error {
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	after, last := done.Load(), info.State.LastSeq
	if last <= after {
		return nil
	}
	filters, listed := checkFilters, false
	listMax := c.listMax
	if listMax == 0 {
		listMax = checkListMax
	}
	if info.State.NumSubjects <= uint64(listMax) {
		// Every event stored up to last is on a subject listed now: the
		// list is taken after last.
		suspect, err := c.suspects(ctx, s, after+1)
		if err != nil {
			return err
		}
		if len(suspect) == 0 {
			c.metrics.CheckedListed(last - after)
			done.Store(last)
			return nil
		}
		filters, listed = suspect, true
	}
	err = stream.Read(ctx, c.js, stream.EventsStream, stream.ReadOptions{After: after, HeadersOnly: true,
		Description: "relay unknown-destination check", Filters: filters},
		func(m *jetstream.RawStreamMsg) error {
			if m.Sequence > last {
				return stream.ErrStop
			}
			if err := c.settle(ctx, m); err != nil {
				return err
			}
			c.metrics.CheckedRead()
			done.Store(m.Sequence)
			return nil
		})
	if err != nil {
		return err
	}
	if listed {
		c.metrics.CheckedListed(last - after)
	}
	done.Store(last)
	return nil
}

// suspects lists the event subjects of s whose destination this replica
// does not know to route every event stored from seq on: a destination it
// has not heard of (unknown, removed, or added a moment ago), or one
// created after seq. Their events are read and settled one by one.
func (c *unroutedCheck) suspects(ctx context.Context, s jetstream.Stream, seq uint64) ([]string, error) {
	var out []string
	for _, f := range checkFilters {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return nil, fmt.Errorf("list the subjects of %s: %w", stream.EventsStream, err)
		}
		for subj := range info.State.Subjects {
			p, err := stream.ParseSubject(subj)
			if err != nil || !c.dests.Routes(p.Dest, seq) {
				out = append(out, subj)
			}
		}
	}
	return out, nil
}

// settle returns once m is for a destination that exists, or is
// dead-lettered. What cannot be decided now is tried again, in place: the
// check moves past an event only once it is settled.
func (c *unroutedCheck) settle(ctx context.Context, m *jetstream.RawStreamMsg) error {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := c.check(ctx, m)
		if err == nil {
			return nil // settled, also if ctx ended meanwhile: the progress must say so
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.log.Warn("cannot check or dead-letter an event for an unknown destination (retrying)", "subject", m.Subject, "seq", m.Sequence, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// check returns nil when m is for a destination that exists, or once it
// is dead-lettered. It runs for every event: the common case takes only
// the subject apart.
func (c *unroutedCheck) check(ctx context.Context, m *jetstream.RawStreamMsg) error {
	p, err := stream.ParseSubject(m.Subject)
	if err != nil {
		return nil // not an event relay can read; nothing to route
	}
	if c.dests.Routes(p.Dest, m.Sequence) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	if ok, err := c.dests.Exists(ctx, p.Dest, m.Sequence); ok || err != nil {
		return err
	}
	return c.letters.DeadLetterUnknown(ctx, m)
}

// lookupTimeout bounds the store's answer, and a dead letter's write, for
// one event of an unknown destination.
const lookupTimeout = 10 * time.Second
