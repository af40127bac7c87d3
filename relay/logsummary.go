package relay

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// summaryEvery is how often relay logs each active destination's
// deliveries, in one line: the attempts themselves are in the delivery log.
const summaryEvery = time.Minute

// retryLogEvery is how often an attempt that failed and will be retried is
// logged at INFO per destination; the others go to DEBUG, and the next INFO
// line says how many were not logged.
const retryLogEvery = 10 * time.Second

// summaries count each destination's outcomes between two summary lines.
type summaries struct {
	m    sync.Map // destination name -> *outcomeCounts
	last atomic.Int64
}

type outcomeCounts struct {
	delivered, retried, deadLettered, filtered atomic.Int64
}

// add counts o, an outcome of a delivery of dest.
func (s *summaries) add(dest string, a Action) {
	v, ok := s.m.Load(dest)
	if !ok {
		v, _ = s.m.LoadOrStore(dest, &outcomeCounts{})
	}
	c := v.(*outcomeCounts)
	switch a {
	case Ack:
		c.delivered.Add(1)
	case Retry, Park:
		c.retried.Add(1)
	case DeadLetter:
		c.deadLettered.Add(1)
	case AckFiltered:
		c.filtered.Add(1)
	}
}

// flush logs one INFO line per destination with outcomes since the last
// flush, by name, and starts counting again. It logs nothing when called
// again within summaryEvery, unless final (at stop).
func (s *summaries) flush(log *slog.Logger, now time.Time, final bool) {
	last := s.last.Load()
	switch {
	case last == 0 && !final:
		s.last.CompareAndSwap(0, now.UnixNano()) // the first interval starts
		return
	case last != 0 && !final && now.Sub(time.Unix(0, last)) < summaryEvery:
		return
	}
	if !s.last.CompareAndSwap(last, now.UnixNano()) {
		return // another flush took it
	}
	if last == 0 {
		last = now.UnixNano()
	}
	var dests []string
	s.m.Range(func(k, _ any) bool {
		dests = append(dests, k.(string))
		return true
	})
	slices.Sort(dests)
	over := now.Sub(time.Unix(0, last)).Round(time.Second)
	for _, d := range dests {
		v, _ := s.m.Load(d)
		c := v.(*outcomeCounts)
		n := [4]int64{c.delivered.Swap(0), c.retried.Swap(0), c.deadLettered.Swap(0), c.filtered.Swap(0)}
		if n == [4]int64{} {
			continue
		}
		log.LogAttrs(context.Background(), slog.LevelInfo, "deliveries", slog.String("dest", d),
			slog.Int64("delivered", n[0]), slog.Int64("retried", n[1]), slog.Int64("dead_lettered", n[2]), slog.Int64("filtered", n[3]),
			slog.Duration("over", over))
	}
}
