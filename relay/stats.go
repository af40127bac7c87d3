package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
)

// DestStats is the state of one destination, read from JetStream and Redis.
type DestStats struct {
	// Dest is the destination (a stream.DestRef: tenant=name for a
	// tenant's; the API shows the name within the tenant).
	Dest string `json:"dest"`
	// Tenant is the tenant of the destination; omitted for none.
	Tenant string `json:"tenant,omitempty"`
	// Backlog is the number of events not yet handed to a relay.
	Backlog uint64 `json:"backlog"`
	// InFlight is the number of events handed out and not yet acknowledged:
	// being delivered, or waiting in JetStream for a retry.
	InFlight int `json:"in_flight"`
	// Retrying is the number of those that have been delivered more than once.
	Retrying int `json:"retrying"`
	// Parked is the number of events waiting in Redis for a later attempt;
	// -1 when Redis was not asked.
	Parked int64 `json:"parked"`
	// OldestDue is the due time of the earliest parked event.
	OldestDue time.Time `json:"oldest_due,omitzero"`
	// DeadLetters is the number of dead letters kept for it.
	DeadLetters uint64 `json:"dead_letters"`
	// DeadLetterFailures, when set, counts its events whose dead letter
	// could not be stored for good (they stay in the event log).
	DeadLetterFailures *DeadLetterFailures `json:"dead_letter_failures,omitempty"`
	// Ordered destinations only: partitions whose head event is being
	// retried, holding back the later events of its keys.
	Partitions        int `json:"partitions,omitempty"`
	BlockedPartitions int `json:"blocked_partitions,omitempty"`
	// State is active, probing (the circuit's pause is over and a probe
	// decides), or why it is paused: operator, circuit_open, retry_after, or
	// gone (a 410 disabled it).
	State       string    `json:"state"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// paused counts the paused destinations summed into this one
	// (sumTenants).
	paused int
	// Unconsumed, when set, says why relay does not consume its events:
	// some of its consumers are missing and the events stream holds all
	// the consumers its limit allows ('relay run --max-consumers').
	Unconsumed string `json:"unconsumed,omitempty"`
	// OldestUndelivered is when the oldest event not yet acknowledged was
	// published (zero when none; parked events are not counted here).
	OldestUndelivered time.Time `json:"oldest_undelivered,omitzero"`
	// Shared: the destination is served by the shared consumer. Its
	// Backlog counts its events waiting in its lane, and those the shared
	// consumer has not handed out yet while there are at most 100 shared
	// destinations (relay_shared_backlog has them all together); InFlight
	// and Retrying count its lane's only (the shared consumer's are not told apart by
	// destination: relay_in_flight on each replica's /metrics counts its
	// attempts in progress).
	Shared bool `json:"shared,omitempty"`
}

// Stats reads the state of every destination. sched may be nil.
func Stats(ctx context.Context, js jetstream.JetStream, sched *schedule.Store) ([]DestStats, error) {
	return stats(ctx, js, sched, time.Now)
}

// stats is Stats with the clock that decides each destination's State.
func stats(ctx context.Context, js jetstream.JetStream, sched *schedule.Store, now func() time.Time) ([]DestStats, error) {
	st, err := destination.NewStore(ctx, js, destination.WithClock(now))
	if err != nil {
		return nil, err
	}
	dests, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	ds, err := dlq.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	dead, err := ds.Counts(ctx)
	if err != nil {
		return nil, err
	}
	state, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return nil, err
	}
	evs, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return nil, err
	}
	evInfo := evs.CachedInfo()
	limit := destination.StreamConsumerLimit(evInfo.Config)
	full := evInfo.State.Consumers >= limit
	// Every consumer's state in one listing, not one request per
	// destination.
	infos := map[string]*jetstream.ConsumerInfo{}
	lister := evs.ListConsumers(ctx)
	for info := range lister.Info() {
		infos[info.Name] = info
	}
	if err := lister.Err(); err != nil {
		return nil, err
	}
	shared := infos[destination.SharedConsumer]
	nShared := 0
	for _, d := range dests {
		if d.Shared {
			nShared++
		}
	}
	out := make([]DestStats, 0, len(dests))
	for _, d := range dests {
		d = d.WithDefaults()
		s := DestStats{Dest: d.Name, Tenant: d.Tenant(), Parked: -1, DeadLetters: dead[d.Name], State: d.State(now())}
		if s.State != destination.StateActive && s.State != destination.StateProbing {
			s.PausedUntil = d.PausedUntil
		}
		if f, _, err := readDeadLetterFailures(ctx, state, d.Name); err != nil {
			return nil, err
		} else if f.Count > 0 {
			s.DeadLetterFailures = &f
		}
		var floor uint64
		pending := false
		if d.Ordered {
			s.Partitions = d.Partitions
		}
		if d.Shared {
			s.Shared = true
			// Counted per destination while they are few: one
			// short-lived consumer each.
			if shared != nil && shared.NumPending > 0 && nShared <= maxSharedCounts {
				after := max(shared.Delivered.Stream, d.StartSeq-1)
				n, err := destination.CountAfter(ctx, js, stream.DestFilters(d.Name), after)
				if err != nil {
					return nil, err
				}
				s.Backlog += n
				if n > 0 {
					floor, pending = after, true
				}
			}
		}
		for i, name := range d.ConsumerNames() {
			info := infos[name]
			switch {
			case info == nil && d.Shared:
				continue // no lane: it always kept up
			case info == nil:
				// No relay has run since it was added, or the
				// stream has no room for it.
				if full && s.Unconsumed == "" {
					s.Unconsumed = fmt.Sprintf("consumer %s is missing and the events stream holds %d consumers, its limit: raise 'relay run --max-consumers' or remove destinations no longer used", name, evInfo.State.Consumers)
				}
				continue
			}
			if !d.Shared && (info.NumPending > 0 || info.NumAckPending > 0) {
				if !pending || info.AckFloor.Stream < floor {
					floor = max(info.AckFloor.Stream, d.StartSeq-1)
				}
				pending = true
			}
			s.Backlog += info.NumPending
			s.InFlight += info.NumAckPending
			s.Retrying += info.NumRedelivered
			if i > 0 && info.NumRedelivered > 0 {
				s.BlockedPartitions++
			}
		}
		if pending {
			s.OldestUndelivered = oldestAfter(ctx, js, d.Name, floor)
		}
		if d.Shared {
			// Its lane's, which may hold older ones (by when they
			// were moved there).
			if t := oldestInLane(ctx, js, d.Name); !t.IsZero() && (s.OldestUndelivered.IsZero() || t.Before(s.OldestUndelivered)) {
				s.OldestUndelivered = t
			}
		}
		if sched != nil {
			ps, err := sched.Stats(ctx, d.Name)
			if err != nil {
				return nil, err
			}
			s.Parked, s.OldestDue = ps.Parked, ps.OldestDue
		}
		out = append(out, s)
	}
	return out, nil
}

// maxSharedCounts is the most shared destinations whose backlog in the
// shared consumer Stats counts one by one.
const maxSharedCounts = 100

// oldestInLane returns the time the oldest event in dest's lane was stored
// there (moved), zero if none.
func oldestInLane(ctx context.Context, js jetstream.JetStream, dest string) time.Time {
	c, err := js.Consumer(ctx, stream.EventsStream, destination.LaneConsumerName(dest))
	if err != nil {
		return time.Time{}
	}
	info := c.CachedInfo()
	if info.NumPending == 0 && info.NumAckPending == 0 {
		return time.Time{}
	}
	st, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return time.Time{}
	}
	m, err := st.GetMsg(ctx, info.AckFloor.Stream+1, jetstream.WithGetMsgSubject(stream.LaneSubject(dest)))
	if err != nil {
		return time.Time{}
	}
	return m.Time
}

// oldestAfter returns the publish time of dest's first event after seq.
func oldestAfter(ctx context.Context, js jetstream.JetStream, dest string, seq uint64) time.Time {
	st, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return time.Time{}
	}
	var oldest time.Time
	for _, subj := range stream.DestFilters(dest) {
		m, err := st.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			continue
		}
		if oldest.IsZero() || m.Time.Before(oldest) {
			oldest = m.Time
		}
	}
	return oldest
}
