package integration

import (
	"context"
	"net/http"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/api/client"
)

// The HTTP API of a real 'relay run', driven with the Go client only: a
// destination created, events published one and in a batch and delivered,
// a pause that holds an event back until resumed, an event dead-lettered
// by a sink that refuses it, and replayed once the sink takes it.
func TestAPIClientDrivesRelay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var reject atomic.Bool
	s := newSink(t, func(_ hit, w http.ResponseWriter) int {
		if reject.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return http.StatusBadRequest
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	code, out := e.relayCLI("api-key", "create", "--name", "ops", "--scope", "admin")
	require.Equal(t, 0, code, out)
	key := regexp.MustCompile(`relay_[0-9a-f]{16}_\S+`).FindString(out)
	require.NotEmpty(t, key, out)

	p := startProc(t, "--nats-url", e.url, "run", "--api-addr", "127.0.0.1:0", "--allow-net", "127.0.0.0/8")
	var base string
	eventually(t, 20*time.Second, func() bool {
		if m := apiURLRE.FindStringSubmatch(p.output()); m != nil {
			base = m[1]
		}
		return base != "" && p.logged("relay running")
	}, "relay serves the API:\n%s", p.output())
	c, err := client.New(base, key)
	require.NoError(t, err)
	ctx := context.Background()

	d, err := c.CreateDestination(ctx, client.NewDestination{Name: "shop", DestinationSettings: client.DestinationSettings{
		URL: new(s.URL + "/hooks"), BackoffBase: new(client.Duration(50 * time.Millisecond)), BackoffMax: new(client.Duration(200 * time.Millisecond)),
	}})
	require.NoError(t, err)
	require.NotEmpty(t, d.Secret, "generated, shown once")

	// delivered polls the delivery log until event id was delivered.
	delivered := func(id string) {
		t.Helper()
		eventually(t, 30*time.Second, func() bool {
			page, err := c.Attempts(ctx, client.AttemptQuery{EventID: id, Status: "2xx"})
			require.NoError(t, err)
			return len(page.Attempts) == 1
		}, "event %s delivered, as the delivery log says", id)
	}
	// stateIs waits until the delivery log says event id is in state
	// (its records reach the log within a flush or two of the outcome).
	stateIs := func(id, state string) {
		t.Helper()
		var v client.EventView
		eventually(t, 30*time.Second, func() bool {
			var err error
			v, err = c.Event(ctx, id)
			if client.IsNotFound(err) {
				return false
			}
			require.NoError(t, err)
			require.Len(t, v.Destinations, 1, "%+v", v)
			require.Equal(t, "shop", v.Destinations[0].Dest)
			return v.Destinations[0].State == state
		}, "event %s %s, as the delivery log says (%+v)", id, state, v)
	}

	// One event, and a batch.
	one, err := c.Publish(ctx, client.NewEvent{Dest: "shop", Key: "c1", Data: map[string]any{"order": 1}}, client.IdempotencyKey("evt-one"))
	require.NoError(t, err)
	require.Equal(t, "evt-one", one.ID)
	batch, err := c.PublishBatch(ctx, []client.NewEvent{
		{Dest: "shop", ID: "evt-b1", Key: "c1", Data: map[string]any{"order": 2}},
		{Dest: "shop", ID: "evt-b2", Key: "c2", Data: map[string]any{"order": 3}},
	})
	require.NoError(t, err)
	require.Equal(t, 2, batch.Stored)
	for _, id := range []string{"evt-one", "evt-b1", "evt-b2"} {
		delivered(id)
		stateIs(id, client.StateDelivered)
	}
	require.Equal(t, map[string]int{"evt-one": 1, "evt-b1": 1, "evt-b2": 1}, s.delivered())
	v, err := c.Event(ctx, "evt-one")
	require.NoError(t, err)
	require.JSONEq(t, `{"order":1}`, string(v.Body()))

	// Paused, an event waits (the stats count it) and is not attempted;
	// resumed, it is delivered.
	paused, err := c.PauseDestination(ctx, "shop")
	require.NoError(t, err)
	require.Equal(t, "operator", paused.State)
	_, err = c.Publish(ctx, client.NewEvent{Dest: "shop", ID: "evt-paused", Data: map[string]any{"order": 4}})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool {
		stats, err := c.Stats(ctx)
		require.NoError(t, err)
		require.Len(t, stats, 1)
		return stats[0].State == "operator" && stats[0].Backlog == 1
	}, "the event waits while the destination is paused")
	page, err := c.Attempts(ctx, client.AttemptQuery{EventID: "evt-paused"})
	require.NoError(t, err)
	require.Empty(t, page.Attempts, "not attempted while paused")
	_, err = c.Event(ctx, "evt-paused")
	require.True(t, client.IsNotFound(err), "no record of it yet: %v", err)
	require.Equal(t, 3, s.len(), "the sink received nothing more")
	_, err = c.ResumeDestination(ctx, "shop")
	require.NoError(t, err)
	delivered("evt-paused")
	require.Equal(t, 1, s.delivered()["evt-paused"])

	// Refused for good (400), an event is dead-lettered at once.
	reject.Store(true)
	_, err = c.Publish(ctx, client.NewEvent{Dest: "shop", ID: "evt-bad", Data: map[string]any{"order": 5}})
	require.NoError(t, err)
	var letters []client.DeadLetter
	eventually(t, 30*time.Second, func() bool {
		page, err := c.DeadLetters(ctx, client.DeadLetterQuery{Dest: "shop"})
		require.NoError(t, err)
		letters = page.DeadLetters
		return len(letters) > 0
	}, "the refused event is dead-lettered")
	require.Len(t, letters, 1)
	require.Equal(t, "evt-bad", letters[0].EventID)
	require.Equal(t, "permanent_status", letters[0].Reason)
	require.Equal(t, 400, letters[0].LastStatus)
	stateIs("evt-bad", client.StateDead)
	letter, err := c.DeadLetter(ctx, letters[0].Seq)
	require.NoError(t, err)
	require.JSONEq(t, `{"order":5}`, string(letter.Body()))
	stats, err := c.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), stats[0].DeadLetters)

	// The sink fixed, the letter is replayed and delivered.
	reject.Store(false)
	res, err := c.ReplayDeadLetters(ctx, client.ReplaySelection{LetterSelection: client.LetterSelection{Seqs: []uint64{letters[0].Seq}}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed, "%+v", res)
	delivered("evt-bad")
	stateIs("evt-bad", client.StateDelivered)
	require.Equal(t, 1, s.delivered()["evt-bad"])
	left, err := c.DeadLetters(ctx, client.DeadLetterQuery{})
	require.NoError(t, err)
	require.Empty(t, left.DeadLetters, "a letter replayed is removed")
}
