package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	// Skip is set once an operator skipped it (SkipHead): relay
	// dead-letters it at its next delivery.
	Skip string `json:"skip,omitempty"`
}

// ErrNotAHead is returned by SkipHead for an event that is not the head of
// a partition waiting for a retry.
var ErrNotAHead = errors.New("not the head of a partition waiting for a retry")

// Heads lists the heads of the ordered destination name's partitions: the
// events handed out and not acknowledged, one at most per partition.
func (s *Store) Heads(ctx context.Context, name string) ([]Head, error) {
	d, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	d = d.WithDefaults()
	if !d.Ordered {
		return nil, fmt.Errorf("destination %s is not ordered: no key of it waits for another event", name)
	}
	events, err := s.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	attempts, err := s.js.KeyValue(ctx, stream.AttemptsBucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", stream.AttemptsBucket, err)
	}
	var heads []Head
	for i := range d.Partitions {
		c, err := s.js.Consumer(ctx, stream.EventsStream, PartitionConsumerName(name, i))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // no relay has run since it was added
		}
		if err != nil {
			return nil, err
		}
		info := c.CachedInfo()
		if info.NumAckPending == 0 {
			continue
		}
		// A partition hands out one event at a time (MaxAckPending 1):
		// the one it delivered last is the one not acknowledged.
		seq := info.Delivered.Stream
		m, err := events.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed meanwhile: the partition moves on
		}
		if err != nil {
			return nil, fmt.Errorf("read event %d: %w", seq, err)
		}
		ev, err := rawEvent(m)
		if err != nil {
			return nil, err
		}
		h := Head{Partition: i, Seq: seq, EventID: ev.id, Key: ev.hdr.Get(stream.HdrKey)}
		if e, err := attempts.Get(ctx, historyKey(ev)); err == nil {
			var l attemptLog
			_ = json.Unmarshal(e.Value(), &l)
			h.Attempts, h.Skip = l.Made, l.Skip
			if n := len(l.Attempts); n > 0 {
				last := l.Attempts[n-1]
				h.LastAttempt, h.LastError = last.At, last.Error
				if h.LastError == "" && last.Status != 0 {
					h.LastError = fmt.Sprintf("status %d", last.Status)
				}
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read attempts of event %d: %w", seq, err)
		}
		heads = append(heads, h)
	}
	return heads, nil
}

// SkipHead gives up on the head seq of the ordered destination name: relay
// dead-letters it (reason skipped, with why and its history) at its next
// delivery, without attempting it, and the keys of its partition go on.
// It naks the head's last delivery so that the next delivery is now, not
// after its backoff. The head must have failed an attempt already.
func (s *Store) SkipHead(ctx context.Context, name string, seq uint64, why string) (Head, error) {
	heads, err := s.Heads(ctx, name)
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
	attempts, err := s.js.KeyValue(ctx, stream.AttemptsBucket)
	if err != nil {
		return Head{}, fmt.Errorf("open bucket %s: %w", stream.AttemptsBucket, err)
	}
	key := historyKey(event{dest: name, id: h.EventID})
	for range 10 {
		e, err := attempts.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Head{}, fmt.Errorf("event %d of %s: %w: no attempt of it has failed yet (it may be being attempted now; look again with 'relay dest heads %s')", seq, name, ErrNotAHead, name)
		}
		if err != nil {
			return Head{}, err
		}
		var l attemptLog
		if err := json.Unmarshal(e.Value(), &l); err != nil {
			return Head{}, fmt.Errorf("attempts of event %d are stored corrupt: %w", seq, err)
		}
		l.Skip = why
		b, _ := json.Marshal(l)
		if _, err := attempts.Update(ctx, key, b, e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // an attempt was recorded meanwhile: again
			}
			return Head{}, err
		}
		h.Skip = why
		if l.Reply != "" {
			// A nak from an earlier delivery is accepted: the event
			// comes back now instead of after its backoff.
			nc := s.js.Conn()
			if err := nc.Publish(l.Reply, []byte("-NAK")); err == nil {
				_ = nc.FlushWithContext(ctx)
			}
		}
		return h, nil
	}
	return Head{}, fmt.Errorf("event %d of %s is being retried concurrently; try again", seq, name)
}
