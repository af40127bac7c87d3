package relay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// listMaxSubjects is the most subjects a stream info response lists at once
// (the server's JSMaxSubjectDetails). A list of more comes in pages, each as
// of its own moment, and the check does not use it.
const listMaxSubjects = 100_000

// listable says whether the check can settle events of the events stream
// described by info from the list of its subjects.
func (r *Relay) listable(info *jetstream.StreamInfo) bool {
	return r.tune.listPerEvent > 0 && info.Config.Replicas <= 1 && info.State.NumSubjects < listMaxSubjects
}

// listWorth says whether listing the subjects of the stream described by
// info costs less than reading its n unchecked events, or little anyway, a
// time since after the last list.
func (r *Relay) listWorth(info *jetstream.StreamInfo, n uint64, since time.Duration) bool {
	s := info.State.NumSubjects
	return n*r.tune.listPerEvent >= s || s <= r.tune.listCheap && since >= r.tune.pollIdle
}

// errNotListed says a pass could not settle events from the list of
// subjects: the events are to be read.
var errNotListed = errors.New("too many subjects or destinations to look up")

// followByListing settles the events stored after checked in passes
// (listPass) for as long as that is possible and worth it, and returns the
// sequence up to which it did. It returns with no error when the events are
// to be read instead.
//
// A pass costs about the same whatever the number of events it settles, so
// passes are spaced for about passEvents events each at the rate they came
// lately. With few subjects, a pass is one request: the list says the
// stream's state too. With more, the state is asked first, to tell whether
// listing is worth it.
func (r *Relay) followByListing(ctx context.Context, checked uint64, done *atomic.Uint64) (uint64, error) {
	if r.tune.listPerEvent == 0 {
		return checked, nil
	}
	var (
		subjects = uint64(math.MaxUint64) // in the stream, as last seen
		rate     float64                  // events stored per second, lately
		seen     = time.Now()             // when the stream's state was last seen
		last     uint64                   // its last sequence then
		listed   = time.Now()             // when a pass last settled events, or there were none
		wait     time.Duration
	)
	for {
		select {
		case <-ctx.Done():
			return checked, ctx.Err()
		case <-time.After(wait):
		}
		var info *jetstream.StreamInfo
		if subjects > r.tune.listCheap {
			var err error
			if info, err = r.events.Info(ctx); err != nil {
				return checked, fmt.Errorf("read the state of stream %s: %w", stream.EventsStream, err)
			}
			if !r.listable(info) {
				return checked, nil
			}
			var n uint64
			if st := info.State; st.LastSeq > checked && st.Msgs > 0 {
				n = st.LastSeq - max(checked, st.FirstSeq-1)
			}
			switch {
			case n == 0:
				if info.State.LastSeq > checked {
					checked = info.State.LastSeq // all that was stored is gone
					done.Store(checked)
				}
				listed = time.Now()
			case r.listWorth(info, n, time.Since(listed)):
				info = nil // list
			case time.Since(listed) >= r.tune.listWait:
				return checked, nil // events come too slowly for the subjects there are
			}
		}
		if info == nil {
			res, err := r.listPass(ctx, checked, done)
			switch {
			case errors.Is(err, errNotListed):
				r.log.Debug("the unknown-destination check reads events instead of listing subjects", "err", err)
				return checked, nil
			case err != nil:
				if ctx.Err() != nil {
					return checked, ctx.Err()
				}
				// Tried again from where it got: it moves past an
				// event only once it is settled.
				checked, wait = done.Load(), min(max(2*wait, 100*time.Millisecond), 5*time.Second)
				r.log.Warn("cannot check or dead-letter events for unknown destinations (retrying)", "checked", checked, "retry_in", wait, "err", err)
				continue
			}
			r.cfg.Metrics.checkedListed(res.n)
			checked, info, listed = res.settled, res.info, time.Now()
			done.Store(checked)
		}
		// The next pass: when about passEvents more have come.
		now, st := time.Now(), info.State
		if dt := now.Sub(seen).Seconds(); dt > 0 && last > 0 && st.LastSeq >= last {
			rate = (rate + float64(st.LastSeq-last)/dt) / 2
		}
		seen, last, subjects = now, st.LastSeq, st.NumSubjects
		wait = r.tune.passWait(rate)
	}
}

// relistAfter is how long reading goes on before it asks about listing
// again, after it went on for prev and listing then settled events or not.
func (t checkTuning) relistAfter(prev time.Duration, settled bool) time.Duration {
	if settled {
		return t.relist
	}
	return min(2*prev, 60*t.relist)
}

// passWait is how long the check waits for the next pass when events come
// at rate a second.
func (t checkTuning) passWait(rate float64) time.Duration {
	// In seconds first: passEvents/rate for a rate near 0 is more than a
	// time.Duration holds.
	secs := min(t.pollIdle.Seconds(), max(t.poll.Seconds(), t.passEvents/rate))
	if rate <= 0 || math.IsNaN(secs) {
		return t.pollIdle
	}
	return time.Duration(secs * float64(time.Second))
}

// listPass settles the events stored after checked, up to the last one
// stored when it asks, from the list of the events stream's subjects, and
// returns the sequence up to which it did. The server lists the subjects
// after it reads the stream's last sequence, so the list has the subject of
// every event stored up to it that is still there. A destination that has
// none is known. For each that is not (unknown, or added after some of its
// events), the events after checked on its subjects are looked up one by
// one, in stream order, and dead-lettered; done says how far it got.
func (r *Relay) listPass(ctx context.Context, checked uint64, done *atomic.Uint64) (passResult, error) {
	info, err := r.events.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return passResult{}, fmt.Errorf("list the subjects of stream %s: %w", stream.EventsStream, err)
	}
	st := info.State
	if info.Config.Replicas > 1 || len(st.Subjects) >= listMaxSubjects {
		return passResult{}, errNotListed
	}
	last := st.LastSeq
	if last <= checked || st.Msgs == 0 {
		return passResult{settled: max(checked, last), info: info}, nil
	}
	from := max(checked, st.FirstSeq-1)
	groups := r.unroutedFilters(st.Subjects, from+1)
	if len(groups) > r.tune.listGroups {
		return passResult{}, errNotListed
	}
	// The events to look up, in stream order across destinations, so that
	// how far the pass got is known at every step.
	heads := make([]listHead, 0, len(groups))
	for filter, before := range groups {
		h := listHead{filter: filter, before: min(before, last+1)}
		if err := r.nextListed(ctx, &h, from+1); err != nil {
			return passResult{}, err
		}
		heads = append(heads, h)
	}
	for {
		i := -1
		for j, h := range heads {
			if h.msg != nil && (i < 0 || h.msg.Sequence < heads[i].msg.Sequence) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		msg := heads[i].msg
		if ev, err := rawEvent(msg); err == nil && !r.routes(ev.dest, ev.seq) {
			if err := r.deadLetterUnrouted(ctx, ev, true); err != nil {
				return passResult{}, err
			}
		}
		done.Store(msg.Sequence)
		if err := r.nextListed(ctx, &heads[i], msg.Sequence+1); err != nil {
			return passResult{}, err
		}
	}
	return passResult{settled: last, n: last - from, info: info}, nil
}

// passResult is what a pass did: the sequence up to which it settled
// events, how many of those sequences were in the stream's range, and the
// stream as the list described it.
type passResult struct {
	settled, n uint64
	info       *jetstream.StreamInfo
}

// listHead is the next event a pass looks up on one filter: msg, nil when
// there is none before sequence before.
type listHead struct {
	filter string
	before uint64
	msg    *jetstream.RawStreamMsg
}

// nextListed looks up the first event on h's filter at or after sequence
// seq.
func (r *Relay) nextListed(ctx context.Context, h *listHead, seq uint64) error {
	h.msg = nil
	if seq >= h.before {
		return nil
	}
	msg, err := r.leaderGet(ctx, seq, h.filter)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("look up events on %s in stream %s: %w", h.filter, stream.EventsStream, err)
	case msg.Sequence < h.before:
		h.msg = msg
	}
	return nil
}

// unroutedFilters are filters for the events among subjects, the events
// stream's, that may be for no destination known here from stream sequence
// from on: each with the sequence before which its events are (the start of
// a destination added since, or the end of sequences).
func (r *Relay) unroutedFilters(subjects map[string]uint64, from uint64) map[string]uint64 {
	r.dests.mu.RLock()
	defer r.dests.mu.RUnlock()
	groups := map[string]uint64{}
	for subj := range subjects {
		p, err := stream.ParseSubject(subj)
		if err != nil {
			continue // not an event relay can read; nothing to route
		}
		before := uint64(math.MaxUint64)
		if d, ok := r.dests.dests[p.Dest]; ok {
			if d.StartSeq <= from {
				continue
			}
			before = d.StartSeq
		}
		// Every event of the destination on subjects of this shape.
		filter := subj
		switch {
		case p.Bucket >= 0:
			filter = stream.KeyedPrefix + "." + p.Dest + ".>"
		case p.KeyToken != "":
			filter = stream.InPrefix + "." + p.Dest + ".*"
		}
		groups[filter] = before
	}
	return groups
}
