package routing

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The router's copy window lets an event through when there is room, or
// when nothing is outstanding however many copies it has, and wakes a
// waiter when copies are confirmed.
func TestCopyWindow(t *testing.T) {
	var w copyWindow
	ctx := context.Background()
	require.NoError(t, w.acquire(ctx, routerCopies+10), "alone, an event with more copies than the window goes")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.acquire(short, 1), context.DeadlineExceeded, "no room")

	got := make(chan error, 1)
	go func() { got <- w.acquire(ctx, 100) }()
	w.release(routerCopies + 10)
	require.NoError(t, <-got, "woken when copies are confirmed")
	require.NoError(t, w.acquire(ctx, routerCopies-100))
	w.release(routerCopies)
	require.Zero(t, w.n)
}
