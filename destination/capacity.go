package destination

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// ErrNoConsumerRoom is returned by Add for a destination whose consumers
// would not fit under the events stream's consumer limit: relay could
// never consume its events.
var ErrNoConsumerRoom = errors.New("no room for the destination's consumers on the events stream")

// ConsumerRoom is how the events stream's consumer limit is shared out.
type ConsumerRoom struct {
	// Limit is the events stream's consumer limit ('relay run
	// --max-consumers'), or the server's default where the stream sets
	// none.
	Limit int
	// Reserved is kept for relay's own short-lived readers.
	Reserved int
	// Dests is the number of stored destinations, Used the consumers they
	// need.
	Dests, Used int
}

// Free is how many more consumers destinations may have.
func (c ConsumerRoom) Free() int { return max(0, c.Limit-c.Reserved-c.Used) }

// consumerCount is how many consumers d needs (see consumerNames).
func (d Destination) ConsumerCount() int {
	if d.Shared {
		return 0
	}
	if !d.Ordered {
		return 1
	}
	p := d.Partitions
	if p == 0 {
		p = DefaultPartitions
	}
	return 1 + p
}

// streamConsumerLimit is the consumer limit the server applies to a stream
// of configuration cfg.
func StreamConsumerLimit(cfg jetstream.StreamConfig) int {
	if cfg.MaxConsumers > 0 {
		return cfg.MaxConsumers
	}
	return stream.ServerDefaultMaxConsumers
}

// roomCount is the consumers the stored destinations needed when the
// destinations bucket was at revision rev: a Store that adds many
// destinations in a row counts them once, not once per Add.
type roomCount struct {
	mu          sync.Mutex
	rev         uint64
	dests, used int
}

// consumerRoom counts the consumers the stored destinations need against
// the events stream's limit: one read of the destinations bucket, unless
// it has not changed since this Store last counted.
func (s *Store) consumerRoom(ctx context.Context, info *jetstream.StreamInfo) (ConsumerRoom, error) {
	room := ConsumerRoom{Limit: StreamConsumerLimit(info.Config), Reserved: stream.ReservedConsumers}
	rev, err := s.destsRev(ctx)
	if err != nil {
		return room, err
	}
	s.rooms.mu.Lock()
	if rev != 0 && s.rooms.rev == rev {
		room.Dests, room.Used = s.rooms.dests, s.rooms.used
		s.rooms.mu.Unlock()
		return room, nil
	}
	s.rooms.mu.Unlock()
	if err := s.countRoom(ctx, &room); err != nil {
		return room, err
	}
	// Cached only if nothing changed while it counted.
	if after, err := s.destsRev(ctx); err == nil && after == rev {
		s.rooms.mu.Lock()
		s.rooms.rev, s.rooms.dests, s.rooms.used = rev, room.Dests, room.Used
		s.rooms.mu.Unlock()
	}
	return room, nil
}

// added records in the count that this Store stored a destination needing
// need consumers at revision rev.
func (s *Store) added(rev uint64, need int) {
	s.rooms.mu.Lock()
	defer s.rooms.mu.Unlock()
	if s.rooms.rev != 0 && s.rooms.rev == rev-1 {
		s.rooms.rev, s.rooms.dests, s.rooms.used = rev, s.rooms.dests+1, s.rooms.used+need
	}
}

// destsRev is the destinations bucket's last revision.
func (s *Store) destsRev(ctx context.Context) (uint64, error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("destination bucket: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, nil // never cached
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// countRoom reads every stored destination's layout into room.
func (s *Store) countRoom(ctx context.Context, room *ConsumerRoom) error {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read destinations: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return fmt.Errorf("read destinations: %w", ctx.Err())
		case e = <-w.Updates():
		}
		if e == nil {
			return nil
		}
		// Only the layout counts; a record that does not parse
		// counts as one consumer.
		var d struct {
			Ordered    bool `json:"ordered"`
			Partitions int  `json:"partitions"`
			Shared     bool `json:"shared"`
		}
		_ = json.Unmarshal(e.Value(), &d)
		room.Dests++
		room.Used += Destination{Ordered: d.Ordered, Partitions: d.Partitions, Shared: d.Shared}.ConsumerCount()
	}
}

// checkRoom refuses d when its consumers do not fit in room.
func checkRoom(d Destination, room ConsumerRoom) error {
	need := d.ConsumerCount()
	if need <= room.Free() {
		return nil
	}
	what := "1 consumer"
	if d.Ordered {
		what = fmt.Sprintf("%d consumers (1 + %d partitions)", need, d.Partitions)
	}
	return fmt.Errorf("%w: %s needs %s, and %d are free: of the events stream's limit of %d, %d destinations take %d and relay keeps %d for its own readers; "+
		"add an unordered destination with --shared (served by relay's shared consumer: none of its own), start 'relay run' with a higher --max-consumers (each consumer costs the NATS server about 53 KB), remove destinations no longer used, or give an ordered destination fewer --partitions",
		ErrNoConsumerRoom, d.Name, what, room.Free(), room.Limit, room.Dests, room.Used, room.Reserved)
}

// ConsumerLimitError reports whether err is JetStream's refusal of a
// consumer beyond the stream's (or account's) limit.
func ConsumerLimitError(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMaximumConsumersLimit
}
