package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/relaydev/relay/stream"
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
// disabling after a 410. probing says the attempt was the circuit's probe.
func (r *Relay) affect(d Destination, dec Decision, probing bool, eventID string) {
	switch dec.Effect {
	case Healthy:
		r.breakers.succeeded(d.Name)
		if d.PauseReason == PauseCircuitOpen {
			r.closeCircuit(d.Name)
		}
	case Failing:
		if probing || r.breakers.failed(d.Name, d.BreakerThreshold) {
			r.openCircuit(d.Name)
		}
	case PauseRequested:
		r.pause(d, r.cfg.Now().Add(dec.Pause), PauseRetryAfter)
	case Disabled:
		r.pause(d, Forever, PauseGone)
		r.log.Error("destination answered 410 Gone: disabled until 'relay dest resume'", "dest", d.Name, "event_id", eventID)
	}
}

// openCircuit pauses a destination for its breaker pause, doubled for each
// consecutive opening.
func (r *Relay) openCircuit(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	now := r.cfg.Now()
	d, err := r.store.Update(ctx, name, func(d *Destination) error {
		if now.Before(d.PausedUntil) {
			return errNoChange // already paused (by another replica, or longer)
		}
		pause := time.Duration(d.BreakerPause)
		for range min(d.BreakerTrips, 20) {
			pause *= 2
		}
		d.PausedUntil = now.Add(min(pause, max(time.Duration(d.Retry.Max), time.Duration(d.BreakerPause))))
		d.PauseReason = PauseCircuitOpen
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
	r.cfg.Metrics.paused(name, PauseCircuitOpen)
	r.log.Warn("circuit open: destination paused after consecutive failures", "dest", name, "until", d.PausedUntil, "trips", d.BreakerTrips)
}

func (r *Relay) closeCircuit(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	_, err := r.store.Update(ctx, name, func(d *Destination) error {
		if d.PauseReason != PauseCircuitOpen {
			return errNoChange
		}
		d.PausedUntil, d.PauseReason, d.BreakerTrips = time.Time{}, "", 0
		return nil
	})
	if err == nil {
		r.log.Info("circuit closed: the probe succeeded", "dest", name)
	} else if !errors.Is(err, errNoChange) {
		r.log.Error("cannot close the circuit", "dest", name, "err", err)
	}
}

// pause pauses d until until for reason, unless it is paused longer already.
func (r *Relay) pause(d Destination, until time.Time, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	_, err := r.store.Update(ctx, d.Name, func(d *Destination) error {
		if !d.PausedUntil.Before(until) {
			return errNoChange
		}
		d.PausedUntil, d.PauseReason = until, reason
		return nil
	})
	if err == nil {
		r.cfg.Metrics.paused(d.Name, reason)
		r.log.Warn("destination paused", "dest", d.Name, "reason", reason, "until", until)
	} else if !errors.Is(err, errNoChange) {
		r.log.Error("cannot pause destination", "dest", d.Name, "err", err)
	}
}

var errNoChange = errors.New("no change")

// applyPause pauses or resumes d's consumers in JetStream to match d.
func (r *Relay) applyPause(d Destination) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := r.store.ApplyPause(ctx, d); err != nil {
		r.log.Warn("cannot pause or resume consumers", "dest", d.Name, "err", err)
	}
}

// ApplyPause pauses or resumes d's consumers in JetStream to match
// d.PausedUntil. Consumers that do not exist yet are created paused later.
func (s *Store) ApplyPause(ctx context.Context, d Destination) error {
	paused := time.Now().Before(d.PausedUntil)
	var errs []error
	for _, c := range d.WithDefaults().consumerNames() {
		var err error
		if paused {
			_, err = s.js.PauseConsumer(ctx, stream.EventsStream, c, d.PausedUntil)
		} else {
			_, err = s.js.ResumeConsumer(ctx, stream.EventsStream, c)
		}
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			errs = append(errs, fmt.Errorf("consumer %s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}

// limits holds each destination's rate limiter in this replica. A
// destination's limit is shared equally by the live replicas.
type limits struct {
	mu       sync.Mutex
	byDest   map[string]*limit
	replicas int
}

// limit is a destination's rate limit in this replica: a limiter for its
// share, and the turns of the events it hands back to JetStream.
//
// Events handed back get turns: one per interval of the share, after the
// turns given before, so they come back about as fast as the limit lets
// them through. Handing them all back for the next free slot (plus some
// randomness) sent 150 events at 5/s out and back 486 times for the first
// 50 deliveries instead of 144 (TestRateLimitedBacklogComesBackInTurn).
type limit struct {
	perSecond float64
	replicas  int
	lim       *rate.Limiter
	every     time.Duration // between turns: 1 / the share, at most maxRateWait

	// mu makes a reservation and its cancel one step (a cancel gives the
	// limiter its token back only if no reservation came after it), and
	// guards next.
	mu   sync.Mutex
	next time.Time // the next free turn
}

// maxRateWait is the longest an event is handed back to JetStream for a
// rate limit: a limit raised meanwhile is used within it.
const maxRateWait = 5 * time.Minute

func newLimit(perSecond float64, replicas int) *limit {
	share := perSecond / float64(replicas)
	return &limit{
		perSecond: perSecond,
		replicas:  replicas,
		lim:       rate.NewLimiter(rate.Limit(share), 1),
		every:     time.Duration(min(float64(time.Second)/share, float64(maxRateWait))),
	}
}

// reserve takes the limiter's next slot if it comes within longest, and
// reports the wait; otherwise it takes nothing and reports how long the
// wait would have been.
func (l *limit) reserve(longest time.Duration) (res *rate.Reservation, wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	res = l.lim.Reserve()
	wait = res.Delay()
	if wait > longest {
		res.Cancel()
		return nil, wait, false
	}
	return res, wait, true
}

// turn returns how long an event handed back at now waits for its turn: at
// least earliest (when the limit next allows one), at most maxRateWait.
func (l *limit) turn(now time.Time, earliest time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := now.Add(earliest)
	if l.next.After(t) {
		t = l.next
	}
	if last := now.Add(maxRateWait); t.After(last) {
		t = last
	}
	l.next = t.Add(l.every)
	return t.Sub(now)
}

func (r *Relay) limiter(d Destination) *limit {
	if d.RateLimit <= 0 {
		return nil
	}
	r.limits.mu.Lock()
	defer r.limits.mu.Unlock()
	n := max(r.limits.replicas, 1)
	l := r.limits.byDest[d.Name]
	if l == nil || l.perSecond != d.RateLimit || l.replicas != n {
		nl := newLimit(d.RateLimit, n)
		if l != nil && l.perSecond == d.RateLimit {
			// Only the replicas changed: the turns given stand.
			l.mu.Lock()
			nl.next = l.next
			l.mu.Unlock()
		}
		l = nl
		r.limits.byDest[d.Name] = l
	}
	return l
}

// heartbeatEvery is how often a replica announces itself; a replica silent
// for the replicas bucket's TTL (3 heartbeats) no longer counts.
const heartbeatEvery = 5 * time.Second

// runRegistry announces this replica in the replicas bucket and keeps the
// count of live replicas, which rate limits are divided by.
func (r *Relay) runRegistry(ctx context.Context, id string) {
	kv, err := r.cfg.JS.KeyValue(ctx, stream.ReplicasBucket)
	if err != nil {
		r.log.Warn("no replicas bucket: rate limits apply per replica", "err", err)
		return
	}
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		rec, _ := json.Marshal(replicaRecord{At: r.cfg.Now().UTC(), NetPolicy: r.cfg.NetPolicy})
		if _, err := kv.Put(ctx, id, rec); err == nil {
			if keys, err := kv.Keys(ctx); err == nil {
				r.limits.mu.Lock()
				r.limits.replicas = max(len(keys), 1)
				r.limits.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = kv.Delete(dctx, id)
			cancel()
			return
		case <-t.C:
		}
	}
}

// replicaID names this process in the replicas bucket.
func replicaID() string {
	return fmt.Sprintf("r-%s", NewEventID()[4:])
}
