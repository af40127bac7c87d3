package relay

import (
	"github.com/relaydev/relay/destination"
	"slices"
	"sync"
	"time"
)

// URL pools: a destination with several URLs sends each attempt to one of
// them. Each replica keeps, in memory, the health of every URL of every pool
// it delivers to: a URL whose attempts failed urlFailuresToCool times in a
// row cools down (attempts avoid it) for a while, and when every URL is
// cooling down the one whose cool-down ends first is used, so that the pool
// never holds an event back.

// urlFailuresToCool is how many consecutive failed attempts to a URL make it
// cool down. Once it has cooled down, one failure of the attempt that probes
// it again is enough.
const urlFailuresToCool = 3

// DefaultURLCooldown is a URL's first cool-down (Config.URLCooldown).
const DefaultURLCooldown = 30 * time.Second

// maxURLCooldownDoublings caps a URL's cool-down at 8 times the first.
const maxURLCooldownDoublings = 3

// urlPools is the state of the URL pools of one replica.
type urlPools struct {
	// cooldown is a URL's first cool-down; it doubles with each
	// consecutive one.
	cooldown time.Duration

	mu     sync.Mutex
	byDest map[string]*poolState
}

// poolState is the state of one destination's pool.
type poolState struct {
	pool []string // the pool this state is for: a changed pool starts afresh
	urls []urlState
	next int // round-robin: the index whose turn it is
}

// urlState is the health of one URL of a pool.
type urlState struct {
	failures int       // consecutive failed attempts since the last cool-down
	trips    int       // consecutive cool-downs; a success resets them
	until    time.Time // cooling down until then
	probing  bool      // an attempt tries it again after a cool-down
}

func newURLPools(cooldown time.Duration) *urlPools {
	return &urlPools{cooldown: cooldown, byDest: map[string]*poolState{}}
}

// state is d's pool state, new if the pool changed. The caller holds mu.
func (p *urlPools) state(name string, pool []string) *poolState {
	st := p.byDest[name]
	if st == nil || !slices.Equal(st.pool, pool) {
		st = &poolState{pool: slices.Clone(pool), urls: make([]urlState, len(pool))}
		p.byDest[name] = st
	}
	return st
}

// available reports whether u may take an attempt at now: it is not cooling
// down, and after a cool-down no other attempt probes it already.
func (u *urlState) available(now time.Time) bool {
	return !now.Before(u.until) && !(u.trips > 0 && u.probing)
}

// pick is the index in d's pool of the URL the next attempt goes to.
// Each pick of a destination with a pool must be followed by a report of
// the attempt's effect.
func (p *urlPools) pick(d destination.Destination, now time.Time) int {
	pool := d.Pool()
	if len(pool) < 2 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.state(d.Name, pool)
	n := len(pool)
	start := 0
	rr := d.URLStrategy == destination.URLRoundRobin
	if rr {
		start = st.next % n
	}
	chosen := -1
	for k := range n {
		if i := (start + k) % n; st.urls[i].available(now) {
			chosen = i
			break
		}
	}
	if chosen < 0 {
		// Every URL is cooling down (or being probed): the one whose
		// cool-down ends first, rather than hold the event back.
		chosen = 0
		for i := range st.urls {
			if st.urls[i].until.Before(st.urls[chosen].until) {
				chosen = i
			}
		}
	}
	if rr {
		st.next = (chosen + 1) % n
	}
	if u := &st.urls[chosen]; u.trips > 0 && !now.Before(u.until) {
		u.probing = true
	}
	return chosen
}

// report records what an attempt to URL i of d's pool said about it at now.
func (p *urlPools) report(d destination.Destination, i int, eff Effect, now time.Time) {
	pool := d.Pool()
	if len(pool) < 2 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.byDest[d.Name]
	if st == nil || !slices.Equal(st.pool, pool) || i < 0 || i >= len(st.urls) {
		return // the pool changed meanwhile
	}
	u := &st.urls[i]
	u.probing = false
	switch eff {
	case Healthy:
		*u = urlState{}
	case Failing, PauseRequested:
		if now.Before(u.until) {
			return // an attempt started before the URL cooled down
		}
		u.failures++
		if u.failures >= urlFailuresToCool || u.trips > 0 {
			u.until = now.Add(p.cooldown << min(u.trips, maxURLCooldownDoublings))
			u.trips++
			u.failures = 0
		}
	}
}
