package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLateAnswersAreGroupedIntoSpells(t *testing.T) {
	ms := int64(time.Millisecond)
	t0 := int64(1_000_000) * ms
	var lat, pub []int64
	at := func(offsetMs, latMs int64) {
		pub = append(pub, t0+offsetMs*ms)
		lat = append(lat, latMs*ms)
	}
	at(0, 1)
	// A spell of three late events published within 50ms of each other.
	at(1000, 20)
	at(1040, 30)
	at(1080, 15)
	at(1100, 2) // on time: does not end the spell
	// 200ms later: a spell of its own.
	at(1280, 12)
	at(2000, 10) // exactly 10ms is not late

	ls := late(lat, pub)
	require.Equal(t, 4, ls.Events)
	require.Equal(t, 2, ls.Spells)
	require.Equal(t, 3, ls.WorstEvents)
	require.InDelta(t, 1.0, ls.WorstAtSecs, 1e-9)
	require.InDelta(t, 80.0, ls.WorstOverMs, 1e-9)
	require.InDelta(t, 30.0, ls.WorstMaxMs, 1e-9)

	require.Equal(t, lateSpells{}, late([]int64{ms}, []int64{t0}))
	require.Contains(t, lateSpells{}.String(), "no answer later than 10ms")
}
