// Package quiet keeps a warning that can come once per event to a line
// per interval and key.
package quiet

import (
	"sync"
	"time"
)

// Limiter lets a warning that can come once per event through once per
// interval and key, and counts the rest: while Redis cannot take parks,
// every long wait would log one.
type Limiter struct {
	Interval time.Duration

	mu      sync.Mutex
	last    map[string]time.Time
	dropped map[string]int
}

// Allow reports whether the warning for key may be logged at now, and how
// many were held back since the last one that was.
func (q *Limiter) Allow(key string, now time.Time) (bool, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last == nil {
		q.last, q.dropped = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := q.last[key]; ok && now.Sub(t) < q.Interval {
		q.dropped[key]++
		return false, 0
	}
	n := q.dropped[key]
	q.last[key], q.dropped[key] = now, 0
	return true, n
}
