package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRateQueueGivesTurnsAtTheLimitsPace(t *testing.T) {
	t.Parallel()
	q := newRateQueue(4) // a turn every 250ms
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// At least when the limit next allows one, then one per interval.
	require.Equal(t, 2*time.Second, q.turn(now, 2*time.Second))
	require.Equal(t, 2250*time.Millisecond, q.turn(now, time.Second))
	require.Equal(t, 2500*time.Millisecond, q.turn(now, time.Second))
	// A later earliest moves the queue on.
	require.Equal(t, 3*time.Second, q.turn(now, 3*time.Second))
	require.Equal(t, 3250*time.Millisecond, q.turn(now, 0))
	// Once the turns given have passed, the next is at earliest again.
	later := now.Add(time.Minute)
	require.Equal(t, time.Second, q.turn(later, time.Second))
	// Never more than maxRateWait ahead.
	for range 2000 {
		require.LessOrEqual(t, q.turn(later, time.Second), maxRateWait)
	}
	require.Equal(t, maxRateWait, q.turn(later, time.Second))
}

func TestRateQueueOfATinyLimitWaitsAtMostMaxRateWait(t *testing.T) {
	t.Parallel()
	q := newRateQueue(1e-12)
	require.Equal(t, maxRateWait, q.every)
	now := time.Now()
	require.Equal(t, time.Second, q.turn(now, time.Second))
	require.Equal(t, maxRateWait, q.turn(now, time.Second))
}
