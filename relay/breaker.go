package relay

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/opevent"
)

// breakers counts consecutive failures per destination in this replica and
// admits one probe at a time once a circuit's pause is over.
type breakers struct {
	mu       sync.Mutex
	failures map[string]int
	probing  map[string]bool
}

func (b *breakers) tryProbe(dest string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probing[dest] {
		return false
	}
	b.probing[dest] = true
	return true
}

func (b *breakers) endProbe(dest string) {
	b.mu.Lock()
	delete(b.probing, dest)
	b.mu.Unlock()
}

// failed counts a failure and reports whether the threshold was reached
// (and resets the count then).
func (b *breakers) failed(dest string, threshold int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures[dest]++
	if threshold > 0 && b.failures[dest] >= threshold {
		b.failures[dest] = 0
		return true
	}
	return false
}

func (b *breakers) succeeded(dest string) {
	b.mu.Lock()
	delete(b.failures, dest)
	b.mu.Unlock()
}

// affect applies what an attempt's decision says about destination d: the
// circuit breaker's count, a pause the destination asked for, or its
// disabling after a 410. probing says the attempt was the circuit's probe;
// emit, that a change it makes may be told in an operator event (not when
// the attempt delivered one: no feedback loop).
func (r *Relay) affect(d destination.Destination, dec Decision, probing bool, eventID string, emit bool) {
	switch dec.Effect {
	case Healthy:
		r.breakers.succeeded(d.Name)
		if d.PauseReason == destination.PauseCircuitOpen {
			r.closeCircuit(d.Name, emit)
		}
	case Failing:
		if probing || r.breakers.failed(d.Name, d.BreakerThreshold) {
			r.openCircuit(d.Name, emit)
		}
	case PauseRequested:
		r.pause(d, r.cfg.Now().Add(dec.Pause), destination.PauseRetryAfter)
	case Disabled:
		if r.pause(d, destination.Forever, destination.PauseGone) && emit {
			now := r.cfg.Now()
			r.emitOp(opevent.Event{Type: opevent.Disabled, ID: opevent.ID(opevent.Disabled, d.Name, destination.PauseGone, opevent.Millis(now)),
				Data: opevent.DisabledBody{Dest: d.Name, At: now.UTC(), Reason: destination.PauseGone, EventID: eventID}})
		}
		r.log.Error("destination answered 410 Gone: disabled until 'relay dest resume'", "dest", d.Name, "event_id", eventID)
	}
}

// openCircuit pauses a destination for its breaker pause, doubled for each
// consecutive opening; with emit, the replica that opens it says so in an
// operator event.
func (r *Relay) openCircuit(name string, emit bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	now := r.cfg.Now()
	d, err := r.store.Update(ctx, name, func(d *destination.Destination) error {
		if now.Before(d.PausedUntil) {
			return errNoChange // already paused (by another replica, or longer)
		}
		pause := time.Duration(d.BreakerPause)
		for range min(d.BreakerTrips, 20) {
			pause *= 2
		}
		d.PausedUntil = now.Add(min(pause, max(time.Duration(d.Retry.Max), time.Duration(d.BreakerPause))))
		d.PauseReason = destination.PauseCircuitOpen
		d.BreakerTrips++
		return nil
	})
	if errors.Is(err, errNoChange) {
		return
	}
	if err != nil {
		r.log.Error("cannot open the circuit", "dest", name, "err", err)
		return
	}
	r.cfg.Metrics.paused(name, destination.PauseCircuitOpen)
	r.log.Warn("circuit open: destination paused after consecutive failures", "dest", name, "until", d.PausedUntil, "trips", d.BreakerTrips)
	if emit {
		r.emitOp(opevent.Event{Type: opevent.BreakerOpened, ID: opevent.ID(opevent.BreakerOpened, name, strconv.Itoa(d.BreakerTrips), opevent.Millis(d.PausedUntil)),
			Data: opevent.BreakerOpenedBody{Dest: name, At: now.UTC(), PausedUntil: d.PausedUntil.UTC(), Trips: d.BreakerTrips, Threshold: d.BreakerThreshold}})
	}
}

func (r *Relay) closeCircuit(name string, emit bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	_, err := r.store.Update(ctx, name, func(d *destination.Destination) error {
		if d.PauseReason != destination.PauseCircuitOpen {
			return errNoChange
		}
		d.PausedUntil, d.PauseReason, d.BreakerTrips = time.Time{}, "", 0
		return nil
	})
	if err == nil {
		r.log.Info("circuit closed: the probe succeeded", "dest", name)
		if emit {
			now := r.cfg.Now()
			r.emitOp(opevent.Event{Type: opevent.BreakerClosed, ID: opevent.ID(opevent.BreakerClosed, name, opevent.Millis(now)), Data: opevent.BreakerClosedBody{Dest: name, At: now.UTC()}})
		}
	} else if !errors.Is(err, errNoChange) {
		r.log.Error("cannot close the circuit", "dest", name, "err", err)
	}
}

// pause pauses d until until for reason, unless it is paused longer
// already; it reports whether it did.
func (r *Relay) pause(d destination.Destination, until time.Time, reason string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	_, err := r.store.Update(ctx, d.Name, func(d *destination.Destination) error {
		if !d.PausedUntil.Before(until) {
			return errNoChange
		}
		d.PausedUntil, d.PauseReason = until, reason
		return nil
	})
	if err == nil {
		r.cfg.Metrics.paused(d.Name, reason)
		r.log.Warn("destination paused", "dest", d.Name, "reason", reason, "until", until)
		return true
	}
	if !errors.Is(err, errNoChange) {
		r.log.Error("cannot pause destination", "dest", d.Name, "err", err)
	}
	return false
}

var errNoChange = errors.New("no change")

// applyPause pauses or resumes d's consumers in JetStream to match d.
func (r *Relay) applyPause(d destination.Destination) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := r.store.ApplyPause(ctx, d); err != nil {
		r.log.Warn("cannot pause or resume consumers", "dest", d.Name, "err", err)
	}
}

// emitOp queues an operator event for publishOps (an operator event is
// never worth holding a delivery for). It waits only while the queue is
// full.
func (r *Relay) emitOp(ev opevent.Event) {
	if r.cfg.NoOperatorEvents {
		return
	}
	r.ops <- ev
}
