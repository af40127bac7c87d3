package client

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/api"
)

// Events published through the client, one with an Idempotency-Key and a
// batch, are delivered; the delivery log finds them by each filter and
// page by page, and the event by its id.
func TestPublishAndFollowTheDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.addDest("orders")
	e.addDest("audit", func(d *NewDestination) { d.Types = []string{"order.*"} })
	since := time.Now()

	res, err := e.publish.Publish(ctx, NewEvent{Dest: "orders", Key: "c1", Data: map[string]any{"n": 1},
		Headers: map[string]string{"X-Tenant": "t1"}}, IdempotencyKey("evt-1"))
	require.NoError(t, err)
	require.Equal(t, "evt-1", res.ID)
	require.False(t, res.Duplicate)
	require.Positive(t, res.Seq)
	// Idempotency is the API key's, per destination: the same event with
	// the same key again stores nothing.
	again, err := e.publish.Publish(ctx, NewEvent{Dest: "orders", Key: "c1", Data: map[string]any{"n": 1},
		Headers: map[string]string{"X-Tenant": "t1"}}, IdempotencyKey("evt-1"))
	require.NoError(t, err)
	require.Equal(t, Published{ID: "evt-1", Seq: res.Seq, Duplicate: true}, again, "the same key again stores nothing")

	batch, err := e.publish.PublishBatch(ctx, []NewEvent{
		{Dest: "orders", ID: "evt-2", Data: "text is JSON too"},
		{Type: "order.created", ID: "evt-3", Key: "c1", Data: json.RawMessage(`{"n":3}`)},
		{Dest: "orders", ID: "evt-1", Key: "c1", Data: map[string]any{"n": 1}, Headers: map[string]string{"X-Tenant": "t1"}},
	})
	require.NoError(t, err)
	require.Equal(t, 3, batch.Stored)
	require.Zero(t, batch.Failed)
	require.Len(t, batch.Results, 3)
	for i, id := range []string{"evt-2", "evt-3", "evt-1"} {
		require.Equal(t, id, batch.Results[i].ID)
		require.Nil(t, batch.Results[i].Error)
	}
	require.True(t, batch.Results[2].Duplicate, "evt-1 was published before")
	require.Equal(t, res.Seq, batch.Results[2].Seq)

	e.waitAttempts(AttemptQuery{Dest: "orders", Status: "2xx"}, 2)
	audit := e.waitAttempts(AttemptQuery{Dest: "audit"}, 1)
	require.Equal(t, "evt-3", audit[0].EventID)
	require.Equal(t, OutcomeDelivered, audit[0].Outcome)
	require.Equal(t, 200, audit[0].Status)
	require.Equal(t, `{"ok":true}`, audit[0].ResponseBody)
	require.Equal(t, "order.created", audit[0].Type)
	e.waitAttempts(AttemptQuery{EventID: "evt-1"}, 1)
	e.waitAttempts(AttemptQuery{Status: "200", Since: since}, 3)
	e.waitAttempts(AttemptQuery{Until: since}, 0)

	// Page by page, newest first, each record once.
	first, err := e.read.Attempts(ctx, AttemptQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, first.Attempts, 1)
	require.NotEmpty(t, first.Next)
	var seqs []uint64
	for a, err := range e.read.AllAttempts(ctx, AttemptQuery{Limit: 2}) {
		require.NoError(t, err)
		seqs = append(seqs, a.Seq)
	}
	require.Len(t, seqs, 3)
	require.Equal(t, first.Attempts[0].Seq, seqs[0])
	require.Greater(t, seqs[0], seqs[1])
	require.Greater(t, seqs[1], seqs[2])
	n := 0
	for range e.read.AllAttempts(ctx, AttemptQuery{Limit: 1}) {
		n++
		break
	}
	require.Equal(t, 1, n, "the iterator stops when the loop does")

	e.waitIndexed("evt-1", "evt-2", "evt-3")
	v, err := e.read.Event(ctx, "evt-1")
	require.NoError(t, err)
	require.Equal(t, "evt-1", v.ID)
	require.Equal(t, "c1", v.Key)
	require.True(t, v.Stored)
	require.Equal(t, res.Seq, v.Seq)
	require.JSONEq(t, `{"n":1}`, string(v.Body()))
	require.Equal(t, []string{"t1"}, v.Headers["X-Tenant"])
	require.Len(t, v.Destinations, 1)
	require.Equal(t, "orders", v.Destinations[0].Dest)
	require.Equal(t, StateDelivered, v.Destinations[0].State)
	require.Len(t, v.Destinations[0].Attempts, 1)

	typed, err := e.read.Event(ctx, "evt-3")
	require.NoError(t, err)
	require.Equal(t, []string{"audit"}, typed.RoutedTo)
	require.Equal(t, "order.created", typed.Type)
	text, err := e.read.Event(ctx, "evt-2")
	require.NoError(t, err)
	require.Equal(t, `"text is JSON too"`, string(text.Body()))

	stats, err := e.read.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	for _, s := range stats {
		require.Equal(t, "active", s.State, s.Dest)
		require.Zero(t, s.DeadLetters, s.Dest)
	}
}

// A batch with one event refused is refused whole: the problem's field
// says which.
func TestPublishBatchRefusedWhole(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.addDest("orders")
	_, err := e.publish.PublishBatch(ctx, []NewEvent{{Dest: "orders", Data: 1}, {Dest: "nobody", Data: 2}})
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 404, pe.Status)
	require.Equal(t, "events[1].dest", pe.Field)
	require.True(t, IsNotFound(err))
	page, err := e.read.Attempts(ctx, AttemptQuery{})
	require.NoError(t, err)
	require.Empty(t, page.Attempts)
	stats, err := e.read.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, stats[0].Backlog+uint64(stats[0].InFlight), "nothing was published")
}

func TestOpenAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	doc, err := e.client("").OpenAPI(context.Background())
	require.NoError(t, err, "no key needed")
	require.Equal(t, api.OpenAPI, doc)
}
