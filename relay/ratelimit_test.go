package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/stretchr/testify/require"
)

func TestLimitGivesTurnsAtItsPace(t *testing.T) {
	t.Parallel()
	q := newLimit(4, 1) // a turn every 250ms
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

func TestTurnsOfATinyLimitWaitAtMostMaxRateWait(t *testing.T) {
	t.Parallel()
	q := newLimit(1e-12, 1)
	require.Equal(t, maxRateWait, q.every)
	now := time.Now()
	require.Equal(t, time.Second, q.turn(now, time.Second))
	require.Equal(t, maxRateWait, q.turn(now, time.Second))
}

// Events handed back by many workers at once leave the limiter as it was:
// a cancelled reservation gives its token back only if no reservation came
// after it, so reservation and cancel are one step.
func TestHandingBackLeavesTheLimiterAsItWas(t *testing.T) {
	t.Parallel()
	// One slot an hour: however slowly the machine runs the reservations
	// below, none of them may find a slot free.
	l := newLimit(1.0/3600, 1)
	_, wait, ok := l.reserve(0)
	require.True(t, ok)
	require.Zero(t, wait, "the first slot is free")
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 1000 {
				if _, _, ok := l.reserve(0); ok {
					t.Error("a slot within 0s after the first was taken")
					return
				}
			}
		})
	}
	wg.Wait()
	// The next slot is still one interval (an hour) after the first, not
	// pushed out by the cancelled reservations.
	_, wait, _ = l.reserve(2 * time.Hour)
	require.LessOrEqual(t, wait, time.Hour)
	require.Greater(t, wait, 59*time.Minute)
}

// The head of an ordered key handed back for the rate limit comes back when
// the limit next allows one, give or take a round of the workers, not
// behind the turns of the unordered events handed back before it.
func TestOrderedHeadIsNotQueuedBehindTheTurns(t *testing.T) {
	t.Parallel()
	r := &Relay{cfg: Config{Now: time.Now}}
	// One per 10s, 4 workers: a round of the workers is 40s.
	d := destination.Destination{Name: "d", RateLimit: 0.1, Concurrency: 4, Timeout: destination.Duration(2 * time.Second)}
	lim := newLimit(d.RateLimit, 1)
	require.Zero(t, r.waitRate(context.Background(), lim, d, false), "the first slot is free")
	var last time.Duration
	for range 10 {
		delay := r.waitRate(context.Background(), lim, d, false)
		require.Positive(t, delay, "handed back")
		require.Greater(t, delay, last, "each unordered event gets a later turn")
		last = delay
	}
	require.InDelta(t, (100 * time.Second).Seconds(), last.Seconds(), 1, "ten turns 10s apart")
	head := r.waitRate(context.Background(), lim, d, true)
	require.Positive(t, head)
	require.LessOrEqual(t, head, 10*time.Second+40*time.Second, "the next slot plus at most a round")
}
