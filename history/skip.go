package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/stream"
)

// Head is the event at the head of a partition of an ordered destination
// that has been handed out and not acknowledged: while relay retries it, the
// keys of its partition wait.
type Head struct {
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	EventID   string `json:"event_id"`
	// Key is the event's order key, when its producer sent it in the
	// Relay-Order-Key header (relay's CLI and Go package do).
	Key string `json:"key,omitempty"`
	// Attempts is how many attempts have failed; 0 while the first runs.
	Attempts    int       `json:"attempts"`
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// LastURL is the index, in the destination's URL pool, of the URL the
	// last failed attempt went to (nil without a pool).
	LastURL *int `json:"last_url,omitempty"`
	// Skip is set once an operator skipped it (SkipHead): relay
	// dead-letters it at its next delivery.
	Skip string `json:"skip,omitempty"`
}

// The operator's reason of a skip (SkipHead, SkipEvent), kept with the dead
// letter as its note.
const (
	// DefaultSkipReason is the reason of a skip given none.
	DefaultSkipReason = "skipped by an operator"
	// MaxSkipReason is the most characters (Unicode code points) of a
	// skip's reason, after its surrounding white space is trimmed.
	MaxSkipReason = 200
)

// SkipReason is reason as a skip keeps it: trimmed of surrounding white
// space, DefaultSkipReason when blank. It must then be one line of valid
// UTF-8 text (no control character: it is shown in tables and on
// terminals) of at most MaxSkipReason characters; an error says what is
// wrong otherwise. Characters rather than bytes: a reason is read by
// people, in any script.
func SkipReason(reason string) (string, error) {
	why := strings.TrimSpace(reason)
	if why == "" {
		return DefaultSkipReason, nil
	}
	if !utf8.ValidString(why) {
		return "", errors.New("a skip reason must be UTF-8 text")
	}
	n := 0
	for _, c := range why {
		n++
		if unicode.IsControl(c) {
			return "", fmt.Errorf("a skip reason is one line of text: character %d is a control character (%U)", n, c)
		}
	}
	if n > MaxSkipReason {
		return "", fmt.Errorf("a skip reason of %d characters: give at most %d", n, MaxSkipReason)
	}
	return why, nil
}

// ErrNotAHead is returned by SkipHead for an event that is not the head of
// a partition waiting for a retry.
var ErrNotAHead = errors.New("not the head of a partition waiting for a retry")

// Heads lists the heads of the ordered destination name's partitions: the
// events handed out and not acknowledged, one at most per partition.
func Heads(ctx context.Context, s *destination.Store, name string) ([]Head, error) {
	d, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	d = d.WithDefaults()
	if !d.Ordered {
		return nil, fmt.Errorf("destination %s is not ordered: no key of it waits for another event", name)
	}
	events, err := s.JetStream().Stream(ctx, stream.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	attempts, err := s.JetStream().KeyValue(ctx, stream.AttemptsBucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", stream.AttemptsBucket, err)
	}
	seal, err := stream.LoadSeal(ctx, s.JetStream())
	if err != nil {
		return nil, err
	}
	var heads []Head
	for i := range d.Partitions {
		c, err := s.JetStream().Consumer(ctx, stream.EventsStream, destination.PartitionConsumerName(name, i))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // no relay has run since it was added
		}
		if err != nil {
			return nil, err
		}
		info := c.CachedInfo()
		// A partition hands out one event at a time (MaxAckPending 1):
		// the one it delivered last is the one not acknowledged.
		seq := info.Delivered.Stream
		if info.NumAckPending == 0 || info.AckFloor.Stream >= seq {
			continue
		}
		m, err := events.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed meanwhile: the partition moves on
		}
		if err != nil {
			return nil, fmt.Errorf("read event %d: %w", seq, err)
		}
		ev, err := stream.Decode(m.Subject, m.Sequence, m.Time, m.Header, m.Data, seal)
		if err != nil {
			return nil, err
		}
		h := Head{Partition: i, Seq: seq, EventID: ev.ID, Key: ev.Key}
		if l, _, err := Get(ctx, attempts, Key(name, ev.ID)); err == nil {
			h.Attempts, h.Skip = l.Made, l.SkipAt(ev.Seq, ev.Origin)
			h.LastAttempt, h.LastError, h.LastURL = l.last()
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read attempts of event %d: %w", seq, err)
		}
		heads = append(heads, h)
	}
	return heads, nil
}

// SkipHead gives up on the head seq of the ordered destination name: relay
// dead-letters it (reason skipped, with why, as SkipReason keeps it, and
// its history) at its next delivery, without attempting it, and the keys
// of its partition go on. The head must have failed an attempt already.
// If it is waiting for its next attempt, SkipHead naks its last delivery
// so that the next one is now, not after its backoff. If an attempt of it
// is in flight, that attempt decides: delivered, the skip is moot; failed,
// relay dead-letters it at once.
func SkipHead(ctx context.Context, s *destination.Store, name string, seq uint64, why string) (Head, error) {
	why, err := SkipReason(why)
	if err != nil {
		return Head{}, err
	}
	heads, err := Heads(ctx, s, name)
	if err != nil {
		return Head{}, err
	}
	var h Head
	for _, c := range heads {
		if c.Seq == seq {
			h = c
		}
	}
	if h.Seq == 0 {
		return Head{}, fmt.Errorf("event %d of %s: %w ('relay dest heads %s' lists them)", seq, name, ErrNotAHead, name)
	}
	l, err := markSkip(ctx, s, Key(name, h.EventID), func(l *Log) error {
		l.Skip, l.SkipSeq = why, seq
		return nil
	})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Head{}, fmt.Errorf("event %d of %s: %w: no attempt of it has failed (it may have been delivered, or be in its first attempt; look again with 'relay dest heads %s')", seq, name, ErrNotAHead, name)
	case err != nil:
		return Head{}, fmt.Errorf("event %d of %s: %w", seq, name, err)
	}
	h.Skip = why
	if err := nakIfWaiting(ctx, s, name, h.Partition, l.Reply); err != nil {
		return h, fmt.Errorf("event %d of %s is marked, and is dead-lettered at its next delivery, but bringing that forward failed: %w", seq, name, err)
	}
	return h, nil
}

// headPoll is how often WaitHeadLeft looks at the partition's ack floor.
const headPoll = 100 * time.Millisecond

// WaitHeadLeft waits up to wait for the head h of the ordered destination
// name (as Heads or SkipHead returned it) to leave its partition: its
// partition's consumer has acknowledged it (ack floor at or past h.Seq).
// It returns whether the head left and, if it did, its dead letter (nil
// when it left delivered): the letter of h.Seq that died after the head's
// Last attempt, by relay's clock, less a second for this machine's. A head
// still there after wait is no error (left false); ctx ending is.
func WaitHeadLeft(ctx context.Context, s *destination.Store, name string, h Head, wait time.Duration) (left bool, letter *dlq.Letter, err error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(headPoll)
	defer tick.Stop()
	for last := false; ; {
		c, err := s.JetStream().Consumer(ctx, stream.EventsStream, destination.PartitionConsumerName(name, h.Partition))
		if err != nil {
			return false, nil, fmt.Errorf("partition %d of %s: %w", h.Partition, name, err)
		}
		if c.CachedInfo().AckFloor.Stream >= h.Seq {
			break
		}
		if last {
			return false, nil, nil
		}
		select {
		case <-tick.C:
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return false, nil, err
			}
			last = true // one more look, at the end of wait
		}
	}
	letters, err := dlq.Open(ctx, s.JetStream())
	if err != nil {
		return true, nil, err
	}
	ls, err := letters.List(ctx, dlq.Filter{Dest: name, Since: h.LastAttempt.Add(-time.Second)}, 0)
	if err != nil {
		return true, nil, err
	}
	for i := range ls {
		if ls[i].StreamSeq == h.Seq {
			return true, &ls[i], nil
		}
	}
	return true, nil, nil
}

// markSkip sets an operator's skip mark in the attempt record under key,
// with a compare-and-set, again when an attempt was recorded meanwhile.
// mark edits the record as read, or refuses it with an error. It returns
// the record as written; jetstream.ErrKeyNotFound when there is none.
func markSkip(ctx context.Context, s *destination.Store, key string, mark func(*Log) error) (Log, error) {
	attempts, err := s.JetStream().KeyValue(ctx, stream.AttemptsBucket)
	if err != nil {
		return Log{}, fmt.Errorf("open bucket %s: %w", stream.AttemptsBucket, err)
	}
	return Change(ctx, attempts, key, false, 10, func(l *Log, _ bool) error { return mark(l) })
}

// Retrying is an event with failed attempts on record, waiting for its next
// (Store.Retrying lists them; Store.SkipEvent marks one).
type Retrying struct {
	// EventID is the event's id.
	EventID string `json:"event_id"`
	// Seq is the event's sequence in the events stream at its last failed
	// attempt (a parked event comes back under a new one).
	Seq         uint64    `json:"seq"`
	Attempts    int       `json:"attempts"`
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// LastURL is as Head's.
	LastURL *int `json:"last_url,omitempty"`
	// Skip is set once an operator skipped it: relay dead-letters it at
	// its next delivery.
	Skip string `json:"skip,omitempty"`
	// Origin is the stream sequence the event first came in as (it names
	// the event's entry in Redis).
	Origin uint64 `json:"origin,omitempty"`
}

// retryingOf describes the event of attempt record l. A skip mark shows
// only while it applies to the event's last failed delivery (not when it
// was left behind for a replay of the same id).
func retryingOf(l Log) Retrying {
	seq := ackSeq(l.Reply)
	r := Retrying{EventID: l.Event, Seq: seq, Attempts: l.Made, Origin: l.Origin}
	if l.SkipSeq == seq || l.SkipOrigin != 0 && l.SkipOrigin == l.Origin {
		r.Skip = l.Skip
	}
	r.LastAttempt, r.LastError, r.LastURL = l.last()
	return r
}

// ListRetrying lists up to limit events of destination name that have failed
// attempts on record (limit 0: all), the ones whose last attempt failed
// longest ago first. It reads every record of the destination, in one
// pass. An ordered destination's are the heads of its partitions ('relay
// dest heads' says more about them).
func ListRetrying(ctx context.Context, s *destination.Store, name string, limit int) ([]Retrying, error) {
	if _, err := s.Get(ctx, name); err != nil {
		return nil, err
	}
	attempts, err := s.JetStream().KeyValue(ctx, stream.AttemptsBucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", stream.AttemptsBucket, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := attempts.WatchFiltered(wctx, []string{name + ".*"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", stream.AttemptsBucket, err)
	}
	defer func() { _ = w.Stop() }()
	// The watcher gives each key's latest value, then nil; what comes after
	// that is written later, and not waited for.
	byKey := map[string]Retrying{}
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read bucket %s: the watch ended early", stream.AttemptsBucket)
			}
			if e == nil {
				done = true
				break
			}
			var l Log
			_ = json.Unmarshal(e.Value(), &l)
			byKey[e.Key()] = retryingOf(l)
		case <-ctx.Done():
			return nil, fmt.Errorf("read bucket %s: %w", stream.AttemptsBucket, ctx.Err())
		}
	}
	out := slices.Collect(maps.Values(byKey))
	slices.SortFunc(out, func(a, b Retrying) int {
		return cmp.Or(a.LastAttempt.Compare(b.LastAttempt), cmp.Compare(a.EventID, b.EventID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ErrNotRetrying is returned by SkipEvent for an event with no failed
// attempt on record.
var ErrNotRetrying = errors.New("no failed attempt of it is on record")

// SkipEvent gives up on event id of the unordered destination name, which
// has failed an attempt and waits for its next: relay dead-letters it
// (reason skipped, with why as SkipReason keeps it, and its history) at its
// next delivery instead of attempting it, whether that delivery comes from
// JetStream when its backoff ends or from Redis, where it may be parked.
// If an attempt of it is in flight, that attempt decides: delivered, the
// skip is moot; failed, relay dead-letters it at once.
//
// Unlike SkipHead it does not bring the next delivery forward: an
// unordered consumer's last delivery says nothing about one event, so
// relay cannot tell whether an attempt of it is in flight, and a nak while
// one is would hand it out twice at once.
func SkipEvent(ctx context.Context, s *destination.Store, name, id, why string) (Retrying, error) {
	why, err := SkipReason(why)
	if err != nil {
		return Retrying{}, err
	}
	d, err := s.Get(ctx, name)
	if err != nil {
		return Retrying{}, err
	}
	if d.Ordered {
		return Retrying{}, &kindError{msg: fmt.Sprintf("destination %s is ordered: its events in retry are the heads of their partitions ('relay dest heads %s', 'relay dest skip-head')", name, name), kind: ErrOrdered}
	}
	l, err := markSkip(ctx, s, Key(name, id), func(l *Log) error {
		seq := ackSeq(l.Reply)
		if seq == 0 {
			// No delivery recorded: nothing says where it waits.
			return fmt.Errorf("%w that says where it waits; try again after its next attempt", ErrNotRetrying)
		}
		l.Skip, l.SkipSeq, l.SkipOrigin = why, seq, l.Origin
		return nil
	})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Retrying{}, fmt.Errorf("event %s of %s: %w (it may have been delivered or dead-lettered, be in its first attempt, or not exist; 'relay dlq list --dest %s' lists the dead letters)", id, name, ErrNotRetrying, name)
	case err != nil:
		return Retrying{}, fmt.Errorf("event %s of %s: %w", id, name, err)
	}
	sk := retryingOf(l)
	sk.EventID = id
	return sk, nil
}

// nakIfWaiting naks the delivery reply of partition i's head if that is
// still the partition's last delivery: the head is waiting for its next
// attempt, and comes back now. A later delivery means an attempt is in
// flight (or its delivery was read after the mark was set, and it is
// dead-lettered without one): a nak would hand the head out a second time
// while that attempt runs.
func nakIfWaiting(ctx context.Context, s *destination.Store, name string, i int, reply string) error {
	md, ok := stream.ParseAck(reply)
	if !ok {
		return nil // no delivery recorded: the next one comes after the backoff
	}
	c, err := s.JetStream().Consumer(ctx, stream.EventsStream, destination.PartitionConsumerName(name, i))
	if err != nil {
		return err
	}
	if c.CachedInfo().Delivered.Consumer != md.Sequence.Consumer {
		return nil
	}
	// A nak from an earlier delivery is accepted; this one is the last.
	nc := s.JetStream().Conn()
	if err := stream.NakSubject(nc, reply); err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return nc.FlushWithContext(fctx)
}

// ErrOrdered: the operation is not for an ordered destination.
var ErrOrdered = errors.New("the destination is ordered")

// kindError is an error whose text says it all and which is, for
// errors.Is, one of relay's sentinel errors.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// ackSeq is the stream sequence of the delivery with ack subject reply, 0
// if reply is none.
func ackSeq(reply string) uint64 {
	md, _ := stream.ParseAck(reply)
	return md.Sequence.Stream
}
