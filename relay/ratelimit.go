package relay

import (
	"sync"
	"time"

	"github.com/relaydev/relay/destination"
	"golang.org/x/time/rate"
)

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

func (r *Relay) limiter(d destination.Destination) *limit {
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
