package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// The server's problems come back as *Error, with the status, the field
// at fault and what was wrong.
func TestProblems(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.addDest("orders")

	problem := func(err error) *Error {
		t.Helper()
		var pe *Error
		require.ErrorAs(t, err, &pe)
		require.NotEmpty(t, pe.Detail)
		require.Equal(t, "about:blank", pe.Type)
		require.Equal(t, http.StatusText(pe.Status), pe.Title)
		return pe
	}

	// 401: a wrong key.
	_, err := e.client(e.keys["admin"] + "x").Stats(ctx)
	pe := problem(err)
	require.Equal(t, 401, pe.Status)
	require.Equal(t, "invalid API key", pe.Detail)
	require.Equal(t, "GET", pe.Method)
	require.Equal(t, "/v1/stats", pe.Path)
	require.Equal(t, "relay API: GET /v1/stats: 401 Unauthorized: invalid API key", err.Error())
	_, err = e.client("").Destinations(ctx)
	require.Equal(t, 401, problem(err).Status, "no key")

	// 403: a key whose scope does not allow it.
	_, err = e.read.CreateDestination(ctx, NewDestination{Name: "audit", DestinationSettings: DestinationSettings{URL: new(e.sink.URL)}})
	pe = problem(err)
	require.Equal(t, 403, pe.Status)
	require.Contains(t, pe.Detail, `scope read; this needs admin`)
	_, err = e.publish.Stats(ctx)
	require.Equal(t, 403, problem(err).Status)
	_, err = e.read.Publish(ctx, NewEvent{Dest: "orders", Data: 1})
	require.Equal(t, 403, problem(err).Status)

	// 404: an unknown destination, dead letter, event.
	_, err = e.read.Destination(ctx, "nobody")
	require.True(t, IsNotFound(err), "%v", err)
	require.False(t, IsConflict(err))
	_, err = e.admin.PauseDestination(ctx, "nobody")
	require.True(t, IsNotFound(err), "%v", err)
	_, err = e.read.DeadLetter(ctx, 999)
	require.True(t, IsNotFound(err), "%v", err)
	_, err = e.read.Event(ctx, "evt-nobody")
	require.Equal(t, "id", problem(err).Field)
	require.True(t, IsNotFound(err))
	_, err = e.publish.Publish(ctx, NewEvent{Dest: "nobody", Data: 1})
	pe = problem(err)
	require.Equal(t, 404, pe.Status)
	require.Equal(t, "dest", pe.Field)

	// 409: a name taken.
	_, err = e.admin.CreateDestination(ctx, NewDestination{Name: "orders", DestinationSettings: DestinationSettings{URL: new(e.sink.URL)}})
	require.True(t, IsConflict(err), "%v", err)
	require.Equal(t, "name", problem(err).Field)

	// 422: well-formed, but wrong; the field says which.
	_, err = e.admin.CreateDestination(ctx, NewDestination{Name: "audit", DestinationSettings: DestinationSettings{URL: new("ftp://example.com/x")}})
	pe = problem(err)
	require.Equal(t, 422, pe.Status)
	require.Equal(t, "url", pe.Field)
	require.Contains(t, err.Error(), "422 Unprocessable Entity: url: ")
	_, err = e.admin.UpdateDestination(ctx, "orders", DestinationSettings{Timeout: new(Duration(-1))})
	pe = problem(err)
	require.Equal(t, 422, pe.Status)
	require.Equal(t, "timeout", pe.Field)
	_, err = e.admin.DeadLetters(ctx, DeadLetterQuery{Status: "600"})
	pe = problem(err)
	require.Equal(t, 422, pe.Status)
	require.Equal(t, "status", pe.Field)
	_, err = e.admin.ReplayDeadLetters(ctx, ReplaySelection{})
	require.Equal(t, "seqs", problem(err).Field, "say what to replay")
	_, err = e.publish.Publish(badRequest(ctx), NewEvent{Dest: "orders"})
	pe = problem(err)
	require.Equal(t, 422, pe.Status)
	require.Equal(t, "data", pe.Field)
	_, err = e.publish.Publish(ctx, NewEvent{Dest: "orders", ID: "a", Data: 1}, IdempotencyKey("b"))
	require.Equal(t, "id", problem(err).Field, "the id and the Idempotency-Key differ")
	_, err = e.publish.PublishBatch(ctx, []NewEvent{{Dest: "orders", Data: 1}, {Dest: "Orders!", Data: 2}})
	pe = problem(err)
	require.Equal(t, 422, pe.Status)
	require.Equal(t, "events[1].dest", pe.Field)

	// 400: a query the server cannot read.
	_, err = e.read.Attempts(ctx, AttemptQuery{Status: "6xx"})
	pe = problem(err)
	require.Equal(t, 400, pe.Status)
	require.Equal(t, "status", pe.Field)
}

// An answer that is no problem (a proxy's) is an *Error too, with what
// can be said of it.
func TestAnswersThatAreNoProblem(t *testing.T) {
	t.Parallel()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<h1>502 Bad Gateway</h1>\n"))
	}))
	t.Cleanup(proxy.Close)
	c, err := New(proxy.URL+"/v1", "k")
	require.NoError(t, err)
	_, err = c.Stats(context.Background())
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, &Error{Status: 502, Title: "Bad Gateway", Detail: "<h1>502 Bad Gateway</h1>", Method: "GET", Path: "/v1/stats"}, pe)

	_, err = c.Stats(canceled())
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.As(err, &pe), "no answer: not an *Error")
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
