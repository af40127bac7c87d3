package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// worthCounting says whether n events of the events stream described by
// info are better counted than read. Counting is exact only when the stream
// and the counting consumers are in the same server's store: an R1 stream.
func (r *Relay) worthCounting(info *jetstream.StreamInfo, n uint64) bool {
	return info.Config.Replicas <= 1 && n >= r.tune.countMin && n*r.tune.subjectsPerEvent >= info.State.NumSubjects
}

// maxCountSegments bounds how many ranges settleByCount counts.
const maxCountSegments = 16

// settleByCount settles by counting (allRouted) the events stored in
// sequences (from, to], and returns the sequence up to which it did: to, or
// less when a count did not settle (at most countMin events before the
// first unknown event if nothing else stood in the way), when a count
// failed, or after maxCountSegments pieces. first is the stream's first
// sequence.
//
// A destination added in the middle of the range routes only the events
// stored after it was added, so the range is counted in pieces that start
// where such a destination does, each with the destinations known there.
func (r *Relay) settleByCount(ctx context.Context, from, to, first uint64) (uint64, error) {
	// What aged out is settled: no piece may lie wholly before the first
	// event (it could not count up). first >= 1: the stream has events.
	from = max(from, first-1)
	for range maxCountSegments {
		if from >= to {
			break
		}
		end := to
		r.dests.mu.RLock()
		for _, d := range r.dests.dests {
			if d.StartSeq > from+1 && d.StartSeq <= to {
				end = min(end, d.StartSeq-1)
			}
		}
		r.dests.mu.RUnlock()
		ok, err := r.allRouted(ctx, from, end, first)
		if err != nil {
			return from, err
		}
		if !ok {
			return r.settledPrefix(ctx, from, end, first)
		}
		from = end
	}
	return from, nil
}

// settledPrefix finds, by halving, how far from from on the events in
// (from, to] settle by count, knowing that all of them do not: reading then
// starts within countMin events of the first one that did not. No
// destination starts in (from+1, to], so the same filters count every part.
func (r *Relay) settledPrefix(ctx context.Context, from, to, first uint64) (uint64, error) {
	lo, hi := from, to // (from, lo] settles; (lo, hi] does not
	for hi-lo > max(r.tune.countMin, 1) {
		mid := lo + (hi-lo)/2
		ok, err := r.allRouted(ctx, lo, mid, first)
		if err != nil {
			return lo, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// allRouted reports whether every event stored in sequences (from, to] is on
// a subject of a destination relay knows, which routes it, without reading
// any of them. first is the stream's first sequence when to was its last.
//
// When a consumer is created, the server counts the stored events that
// match its filter subjects from its start sequence on (NumPending), and
// counts up from there as events are stored. With the filters of every
// known destination, a consumer created to start at from+1 counts a, and one
// created after it to start at to+1 counts b. Every event stored after to
// that a counted, b counted too (b's count began later), so a-b is at most
// the number of known events in the range: fewer if events were stored
// meanwhile. The range holds at most to-max(from, first-1) events (fewer if
// some were deleted). So when a-b reaches that, every event in the range is
// known; when not, the range is read.
//
// Two things this rests on: the server's NumPending is never more than the
// events there are (so in nats-server 2.15;
// TestCheckCountNeverSettlesARangeWithAnUnknownEvent would catch a server
// that counts more), and no event counted in a is deleted before b is
// counted. relay deletes no event; an operator purging events of a known
// destination within those milliseconds could make a range look settled.
func (r *Relay) allRouted(ctx context.Context, from, to, first uint64) (bool, error) {
	filters := r.routedFilters(from + 1)
	if len(filters) == 0 {
		return false, nil
	}
	a, err := r.countFrom(ctx, from+1, filters)
	if err != nil {
		return false, err
	}
	b, err := r.countFrom(ctx, to+1, filters) // only once a is counted: see above
	if err != nil {
		return false, err
	}
	return a >= b && a-b == to-max(from, first-1), nil
}

// routedFilters are the filter subjects of every destination known here
// that routes all events from stream sequence from on.
func (r *Relay) routedFilters(from uint64) []string {
	r.dests.mu.RLock()
	defer r.dests.mu.RUnlock()
	var fs []string
	for name, d := range r.dests.dests {
		if d.StartSeq <= from && stream.ValidateDestName(name) == nil {
			fs = append(fs, stream.DestFilters(name)...)
		}
	}
	return fs
}

// countFrom is how many events stored at or after sequence from match
// filters, as the server counts them when a consumer is created.
func (r *Relay) countFrom(ctx context.Context, from uint64, filters []string) (uint64, error) {
	c, err := r.cfg.JS.CreateConsumer(ctx, stream.EventsStream, jetstream.ConsumerConfig{
		Description:       "relay: counts events of known destinations for the unknown-destination check",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		FilterSubjects:    filters,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: 30 * time.Second, // if the delete below fails
	})
	if err != nil {
		return 0, fmt.Errorf("create a consumer on %s to count events: %w", stream.EventsStream, err)
	}
	info := c.CachedInfo()
	r.deleteConsumer(info.Name)
	return info.NumPending, nil
}

// deleteConsumer deletes a consumer of the events stream the check made,
// not waiting for its context; if that fails, it goes after its
// InactiveThreshold.
func (r *Relay) deleteConsumer(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := r.cfg.JS.DeleteConsumer(ctx, stream.EventsStream, name); err != nil {
		r.log.Debug("cannot delete a consumer of the unknown-destination check; it goes when inactive", "consumer", name, "err", err)
	}
}
