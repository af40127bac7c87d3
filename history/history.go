// Package history keeps what relay knows of each event in retry (its
// failed attempts, the attempts counted, where it was parked) in the
// relay_attempts bucket, and the operator's marks on it: skipping the head
// of an ordered partition or an event in retry.
package history

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/dlq"
)

// Key is the key of the attempt log of event id of destination
// dest in the relay_attempts bucket.
func Key(dest, id string) string {
	sum := sha256.Sum256([]byte(id))
	return dest + "." + hex.EncodeToString(sum[:16])
}

// Log is what relay keeps about an event in retry: its failed
// attempts (the history, trimmed) and how many attempts counted so far.
type Log struct {
	// Event is the event's id (the key is a hash of it).
	Event    string        `json:"event,omitempty"`
	Attempts []dlq.Attempt `json:"attempts,omitempty"`
	Made     int           `json:"made"`
	// Reply is the ack subject of the delivery whose attempt failed last:
	// Store.SkipHead naks it (nakIfWaiting) so that the event comes back
	// at once.
	Reply string `json:"reply,omitempty"`
	// Skip, set by an operator (Store.SkipHead, Store.SkipEvent), says why: the event
	// stored at SkipSeq is dead-lettered at its next delivery, without an
	// attempt, or after the attempt in flight if that fails. The sequence
	// keeps a mark left behind from applying to a replay of the event,
	// which has the same id.
	Skip    string `json:"skip,omitempty"`
	SkipSeq uint64 `json:"skip_seq,omitempty"`
	// Origin is the origin (event.origin) of the delivery whose attempt
	// failed last. SkipOrigin, set by Store.SkipEvent, makes the mark apply
	// as well to the messages that bring the event back from Redis under
	// new sequences; a replay of the event is a message of its own origin.
	Origin     uint64 `json:"origin,omitempty"`
	SkipOrigin uint64 `json:"skip_origin,omitempty"`
	// Parked is the last sequence of the event (origin Origin) that relay
	// parked in Redis: that message and those before it were handed to
	// Redis, and come back only because an ack was lost (parkedAlready).
	Parked uint64 `json:"parked,omitempty"`
	// Parking is the last sequence of the event (origin Origin) that relay
	// began to park: it is recorded with the failed attempt, before the
	// entry is written to Redis. While Parked is below it, the park is in
	// doubt (parkInDoubt): a crash may have come after Redis stored the
	// entry and before Parked was recorded.
	Parking uint64 `json:"parking,omitempty"`
}

// SkipAt is the operator's reason to skip the event's message at stream
// sequence seq, first come in as origin, if l marks it.
func (l Log) SkipAt(seq, origin uint64) string {
	if l.Skip != "" && (l.SkipSeq == seq || l.SkipOrigin != 0 && l.SkipOrigin == origin) {
		return l.Skip
	}
	return ""
}

// Last is when the last recorded attempt was made, how it failed, and the
// index of the URL of the destination's pool it went to (nil without a pool).
func (l Log) last() (time.Time, string, *int) {
	if len(l.Attempts) == 0 {
		return time.Time{}, "", nil
	}
	a := l.Attempts[len(l.Attempts)-1]
	switch {
	case a.Status == 0:
		return a.At, a.Error, a.URL
	case a.Error == "":
		return a.At, fmt.Sprintf("status %d", a.Status), a.URL
	}
	return a.At, fmt.Sprintf("status %d: %s", a.Status, a.Error), a.URL
}

// Get reads the attempt log stored under key in the
// relay_attempts bucket kv, and its revision (for a compare-and-set). A log
// stored corrupt reads as empty.
func Get(ctx context.Context, kv jetstream.KeyValue, key string) (Log, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return Log{}, 0, err
	}
	var l Log
	_ = json.Unmarshal(e.Value(), &l)
	return l, e.Revision(), nil
}

// errLogRaced: other writers changed the attempt log under every try of
// changeLog.
var ErrRaced = errors.New("it is being retried concurrently; try again")

// Change applies change to the attempt log stored under key in kv, as a
// compare-and-set: an operator's mark or another replica's attempt written
// meanwhile is never lost, and the change is tried again on the new log, up
// to tries times. found tells change whether there was a log. With create,
// a missing log is created; a log that cannot be read (the bucket failing:
// one stored corrupt reads as empty) is then only created where there is
// none, never overwritten, since a write without its revision would replace
// the history, the count and an operator's mark with this change alone.
// Without create, a missing or unreadable log is an error.
func Change(ctx context.Context, kv jetstream.KeyValue, key string, create bool, tries int, change func(l *Log, found bool) error) (Log, error) {
	for range tries {
		l, rev, rerr := Get(ctx, kv, key)
		found := rerr == nil
		if !found && !create {
			return Log{}, rerr
		}
		if !found {
			l = Log{}
		}
		if err := change(&l, found); err != nil {
			return Log{}, err
		}
		b, _ := json.Marshal(l)
		var err error
		if found {
			_, err = kv.Update(ctx, key, b, rev)
		} else {
			_, err = kv.Create(ctx, key, b)
		}
		switch {
		case err == nil:
			return l, nil
		case !errors.Is(err, jetstream.ErrKeyExists):
			return Log{}, err // failed for another reason than a race
		case !found && !errors.Is(rerr, jetstream.ErrKeyNotFound):
			return Log{}, rerr // there is a log that cannot be read: leave it
		}
	}
	return Log{}, ErrRaced
}

// ParkedAlready reports whether l says the event's message at seq (first
// come in as origin) was handed to Redis: it is a message of the event l records, at or below the last sequence parked, or
// below the last one relay began to park (a message of the event that
// came after ev is its copy). Its copy carries on; this message only came
// back because its ack was lost.
func (l Log) ParkedAlready(seq, origin uint64) bool {
	return origin == l.Origin && (seq <= l.Parked || seq < l.Parking)
}

// ParkInDoubt reports whether l says relay began to park the message at
// seq itself and
// never recorded that Redis took it: a crash came between, before or after
// the entry was written. Whether ev has a copy must be found out
// (Relay.findPark) before it is attempted.
func (l Log) ParkInDoubt(seq, origin uint64) bool {
	return origin == l.Origin && seq == l.Parking && l.Parked < l.Parking
}

// HandedOn is the last sequence of the event l records that relay parked,
// or began to park (0: none).
func (l Log) HandedOn() uint64 { return max(l.Parked, l.Parking) }
