package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
)

func TestGCPercentPutsTheHeapGoalAtTheFloor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name              string
		floor, live, root uint64
		want              int
	}{
		{"small heap", 64 * mib, 4 * mib, 1 * mib, 1000}, // (64-4)/5 = 1200%, capped
		{"between", 64 * mib, 10 * mib, 2 * mib, 450},    // 10 + 12*4.5 = 64
		{"near the floor", 64 * mib, 40 * mib, 8 * mib, 100},
		{"above the floor", 64 * mib, 80 * mib, 1 * mib, 100},
		{"at the floor", 64 * mib, 64 * mib, 0, 100},
		{"nothing measured", 64 * mib, 0, 0, 1000},
		{"heap minimum", 32 * mib, 1 * mib, 1 * mib, 800}, // 4 MiB * 800% = 32
		{"small floor", 2 * mib, 1 * mib, 0, 100},
	} {
		if got := gcPercent(tc.floor, tc.live, tc.root); got != tc.want {
			t.Errorf("%s: gcPercent(%d, %d, %d) = %d, want %d", tc.name, tc.floor, tc.live, tc.root, got, tc.want)
		}
	}
}

var garbage []byte

// collections allocates n bytes in 32 KiB pieces, none kept, and returns
// how many garbage collections ran meanwhile.
func collections(n int) uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	for range n / (32 << 10) {
		garbage = make([]byte, 32<<10)
	}
	garbage = nil
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}

func TestHeapFloorMakesCollectionsRarer(t *testing.T) {
	const floor = 256 << 20
	const churn = 1 << 30
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)

	base := collections(churn)

	// A collection first: the live heap the floor reads is what the last
	// collection marked, which includes what was allocated while it ran.
	runtime.GC()
	h := startHeapFloor(floor)
	set := h.set.Load()
	tuned := collections(churn)
	seen := h.cycles.Load()
	h.stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC after stop = %d, want 100", got)
	}

	t.Logf("1 GiB allocated: %d collections with GOGC=100, %d with a 256 MiB floor (GOGC set to %d, %d collections seen)", base, tuned, set, seen)
	if tuned == 0 {
		t.Fatalf("no collection with the floor; want some (the goal is at most 40 MiB while the live heap is small)")
	}
	// The floor re-arms after each collection; it can miss one now and
	// then (see gcSentinel), not half of them.
	if seen*2 < int64(tuned) {
		t.Errorf("the floor saw %d of %d collections", seen, tuned)
	}
	if tuned*4 > base {
		t.Errorf("%d collections with the floor against %d without: want at most a quarter", tuned, base)
	}
	if set <= 100 {
		t.Errorf("GOGC set to %d, want above 100 while the live heap is under the floor", set)
	}
}

func TestHeapFloorFlag(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))

	for _, bad := range []int64{-1, 1<<40 + 1} {
		_, err := applyHeapFloor(log, bad, "")
		var u usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), fmt.Sprintf("--gc-heap-floor %d", bad)) {
			t.Errorf("floor %d: err = %v, want a usage error naming the flag and its value", bad, err)
		}
	}
	for _, tc := range []struct {
		floor int64
		gogc  string
	}{{0, ""}, {64 << 20, "50"}, {64 << 20, "off"}} {
		h, err := applyHeapFloor(log, tc.floor, tc.gogc)
		if err != nil || h != nil {
			t.Errorf("floor %d, GOGC %q: started %v, err %v; want nothing started", tc.floor, tc.gogc, h != nil, err)
		}
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("floor %d, GOGC %q: GOGC changed to %d", tc.floor, tc.gogc, got)
		}
	}
	if !strings.Contains(logs.String(), "GOGC is set") {
		t.Errorf("no log says why the floor was not applied: %q", logs.String())
	}

	runtime.GC() // see TestHeapFloorMakesCollectionsRarer
	h, err := applyHeapFloor(slog.New(slog.NewTextHandler(io.Discard, nil)), 64<<20, "")
	if err != nil || h == nil {
		t.Fatalf("floor 64 MiB, no GOGC: started %v, err %v; want it started", h != nil, err)
	}
	defer h.stop()
	if got := h.set.Load(); got <= 100 {
		t.Errorf("GOGC set to %d at start, want above 100 (this test's heap is far below 64 MiB)", got)
	}
}
