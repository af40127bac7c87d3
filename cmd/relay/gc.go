package main

import (
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// maxGCPercent bounds the GOGC the heap floor sets. The percentage is
// worked out after each collection from the heap that collection found
// live. If the live heap grows tenfold within one cycle, the goal the
// runtime sets at that cycle's end is up to this many times too high,
// until the floor's next tune a moment later. The bound also means that
// while the live heap is small the goal is at most 40 MiB (the runtime's
// heap minimum at GOGC=1000) or 11 times the live heap and stacks: a floor
// above that is reached only once the live heap has grown.
const maxGCPercent = 1000

// maxHeapFloor bounds --gc-heap-floor (and keeps floor*100 in a uint64).
const maxHeapFloor = 1 << 40

// heapMinimum is the Go runtime's least heap goal at GOGC=100; it scales
// with GOGC.
const heapMinimum = 4 << 20

// gcPercent is the GOGC that puts the heap goal at floor bytes, given the
// live heap and the other roots the collector scans (goroutine stacks and
// globals). Since Go 1.18 the goal is live + (live+roots)*GOGC/100, and at
// least heapMinimum*GOGC/100. It is never below the default of 100: the
// floor only makes collections rarer while the heap is small, never more
// frequent.
func gcPercent(floor, live, roots uint64) int {
	if live >= floor {
		return 100
	}
	p := min((floor-live)*100/max(live+roots, 1), floor*100/heapMinimum)
	return int(min(max(p, 100), maxGCPercent))
}

// heapFloor keeps the garbage collector from running before the heap
// reaches a floor. relay's live heap is small (the events in flight and
// little else) while it allocates a few KB per delivery, so with the
// default GOGC of 100 it collects many times a second at a steady load:
// about a tenth of its CPU in the benchmark's latency scenario. After
// each collection the floor sets GOGC so that the next one comes when the
// heap reaches the floor, or at twice the live heap once that is larger.
type heapFloor struct {
	floor   uint64
	stopped atomic.Bool
	set     atomic.Int64 // the GOGC last set
	cycles  atomic.Int64 // collections seen

	mu      sync.Mutex // the samples are reused
	samples []metrics.Sample
}

// startHeapFloor starts keeping GOGC so that the heap goal is at least
// floor bytes. Stop it with stop, which puts GOGC back to 100.
func startHeapFloor(floor uint64) *heapFloor {
	h := &heapFloor{floor: floor, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
	h.tune()
	h.arm()
	return h
}

// arm asks to be called after the next collection: the runtime runs a
// cleanup once the object it is attached to has been collected.
func (h *heapFloor) arm() {
	s := new(gcSentinel)
	runtime.AddCleanup(s, func(h *heapFloor) {
		if h.stopped.Load() {
			return
		}
		h.cycles.Add(1)
		h.tune()
		h.arm()
	}, h)
}

// gcSentinel is collected in the cycle after it is armed (one made while
// a cycle marks survives that cycle, so now and then a cycle is skipped).
// It holds a pointer so that it is not a tiny allocation, which may share
// a block with others and be collected late.
type gcSentinel struct{ _ *int }

func (h *heapFloor) tune() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped.Load() {
		return // a cleanup that ran as stop did
	}
	metrics.Read(h.samples)
	var v [3]uint64
	for i, s := range h.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	p := gcPercent(h.floor, v[0], v[1]+v[2])
	// Setting GOGC is cheap (no stop of the world), but only a change
	// of more than a tenth is worth making.
	if old := h.set.Load(); old == 0 || math.Abs(float64(p-int(old))) > float64(old)/10 {
		debug.SetGCPercent(p)
		h.set.Store(int64(p))
	}
}

func (h *heapFloor) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped.Store(true)
	debug.SetGCPercent(100)
}

// applyHeapFloor starts the heap floor of --gc-heap-floor, unless it is 0
// or the GOGC environment variable (gogc here) chose the collector's pace
// already. It returns nil when it starts nothing.
func applyHeapFloor(log *slog.Logger, floor int64, gogc string) (*heapFloor, error) {
	switch {
	case floor < 0 || floor > maxHeapFloor:
		return nil, usagef("--gc-heap-floor %d: give a size in bytes up to %d, or 0 for Go's default pace", floor, int64(maxHeapFloor))
	case floor == 0:
		return nil, nil
	case gogc != "":
		log.Info("GOGC is set, so --gc-heap-floor is not applied", "GOGC", gogc)
		return nil, nil
	}
	return startHeapFloor(uint64(floor)), nil
}
