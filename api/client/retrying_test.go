package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestKeyNamesTheClientsKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	k, err := e.read.Key(context.Background())
	require.NoError(t, err)
	require.Equal(t, "key-read", k.Name)
	require.Equal(t, "read", k.Scope)
	require.False(t, k.Created.IsZero())
}

// An event in retry is listed, and skipped: it is dead-lettered at its
// next delivery, reason skipped, without another attempt.
func TestRetryingAndSkip(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	// The path ends in /down: the sink answers 503. The retry comes after
	// 2s: time to list and skip it.
	e.addDest("down", func(nd *NewDestination) {
		nd.BackoffBase, nd.BackoffMax, nd.Jitter = new(Duration(2*time.Second)), new(Duration(2*time.Second)), new(0.0)
	})
	_, err := e.publish.Publish(ctx, NewEvent{Dest: "down", Data: []byte(`{}`)}, IdempotencyKey("evt-stuck"))
	require.NoError(t, err)
	var evs []Retrying
	deadline := time.Now().Add(30 * time.Second)
	for len(evs) == 0 {
		require.False(t, time.Now().After(deadline), "never in retry")
		evs, err = e.read.Retrying(ctx, "down", 10)
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, "evt-stuck", evs[0].EventID)

	_, err = e.read.SkipRetrying(ctx, "down", "evt-stuck", "")
	require.Error(t, err)
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 403, pe.Status)
	sk, err := e.admin.SkipRetrying(ctx, "down", "evt-stuck", "customer gone")
	require.NoError(t, err)
	require.Equal(t, "customer gone", sk.Skip)
	letters := e.waitDeadLetters(DeadLetterQuery{Dest: "down"}, 1)
	require.Equal(t, "skipped", letters[0].Reason)

	_, err = e.admin.SkipRetrying(ctx, "down", "evt-none", "")
	require.True(t, IsNotFound(err), "%v", err)
	_, err = e.read.Retrying(ctx, "nobody", 0)
	require.True(t, IsNotFound(err), "%v", err)
}
