package integration

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// setupDefaultServer is setup with a nats-server at its own defaults (a 1 MB
// max_payload), not relay's embedded one (4 MiB), and relay's default event
// size limit (1 MiB).
func setupDefaultServer(t *testing.T) *env {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "NATS server up")
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.Equal(t, int64(1<<20), nc.MaxPayload(), "nats-server's default max_payload")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, stream.Ensure(ctx, js, stream.Config{}))
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	p, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	return &env{t: t, srv: s, url: s.ClientURL(), nc: nc, js: js, store: st, prod: p}
}

// maxSizeBody is the body that makes an event with this id for dest exactly
// as large as the producer accepts (1 MiB, counted as it counts): with
// relay's producer (scoped), a dedup id of its own and the id in
// Relay-Event-Id; else the id as the dedup id.
func maxSizeBody(dest, id string, scoped bool) []byte {
	hdrs := len(stream.HdrMsgID) + len(id) + 4
	if scoped {
		hdrs = len(stream.HdrMsgID) + len(publish.DedupID("", dest, "", id)) + 4 + len(stream.HdrEventID) + len(id) + 4
	}
	size := 1<<20 - len(stream.InSubject(dest, "")) - hdrs
	return []byte(strings.Repeat("x", size))
}

// An event of exactly the largest size relay accepts, at the default limits,
// failing 50 times with the largest failure text a response can leave in the
// history, is dead-lettered once, after its 50 attempts (not attempted
// again and again because its dead letter did not fit). The letter holds
// the history and references the event, which is read back from the event
// log by its sequence. An unknown destination's event of that size is
// dead-lettered too, and the unknown-destination check goes on past it.
// In the fault suite: a hostile event, no process killed.
func TestFaultMaxSizeEventWithFiftyAttemptsIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := setupDefaultServer(t)
	ctx := context.Background()
	// A snippet of 256 bytes that JSON would escape if it could.
	answer := strings.Repeat("<&>", 84) + "\"\\<&"
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(answer))
		return http.StatusInternalServerError
	})
	e.addDest(destination.Destination{Name: "big", URL: s.URL, BreakerThreshold: -1, Retry: destination.RetryPolicy{
		Base: destination.Duration(10 * time.Millisecond), Max: destination.Duration(10 * time.Millisecond), NoJitter: true, MaxAttempts: 50}})
	body := maxSizeBody("big", "evt_big", true)
	res, err := e.prod.Publish(ctx, publish.Event{Dest: "big", ID: "evt_big", Data: body})
	require.NoError(t, err, "the producer accepts an event of exactly the limit")
	e.startRelay()

	eventually(t, 2*time.Minute, func() bool { return len(e.deadLetters("big")) == 1 && e.settled("big") },
		"the event dead-lettered after 50 attempts")
	require.Equal(t, 50, s.len(), "50 attempts, none repeated for want of a dead letter")
	l := e.deadLetters("big")[0]
	require.Equal(t, "evt_big", l.EventID)
	require.Equal(t, relay.ReasonMaxAttempts, l.Reason)
	require.Equal(t, 50, l.Attempts)
	require.Equal(t, 500, l.LastStatus)
	require.True(t, l.EventOmitted, "the event does not fit beside the history: referenced, not copied")
	require.Empty(t, l.Body)
	require.Equal(t, res.Seq, l.StreamSeq)
	require.Equal(t, 50, len(l.History)+l.HistoryOmitted, "the history, or a marker of what was left out")
	require.Equal(t, 1, l.History[0].N)
	require.Equal(t, 50, l.History[len(l.History)-1].N)
	require.Equal(t, answer, l.History[len(l.History)-1].Error)

	letters, err := dlq.Open(ctx, e.js)
	require.NoError(t, err)
	full, err := letters.Resolve(ctx, l)
	require.NoError(t, err)
	require.Equal(t, body, full.Body, "the event read back from the event log by its sequence")

	// An unknown destination's event of that size, then a small one: both
	// dead-lettered, in order.
	for _, id := range []string{"evt_ghost_big", "evt_ghost_small"} {
		m := nats.NewMsg(stream.InSubject("ghost", ""))
		m.Header.Set(stream.HdrMsgID, id)
		m.Data = []byte(`{}`)
		if id == "evt_ghost_big" {
			m.Data = maxSizeBody("ghost", id, false)
		}
		_, err := e.js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	eventually(t, time.Minute, func() bool { return len(e.deadLetters("ghost")) == 2 }, "both unknown-destination events dead-lettered")
	ghost := e.deadLetters("ghost")
	require.Equal(t, "evt_ghost_big", ghost[0].EventID)
	require.True(t, ghost[0].EventOmitted)
	require.Equal(t, "evt_ghost_small", ghost[1].EventID)
	require.Equal(t, `{}`, string(ghost[1].Body))
}

// A dead letter the dead-letter stream refuses for a reason retrying does
// not change (here its maximum message size, set below what any letter
// needs) does not make relay attempt the event again and again: the event
// is given up after its one attempt, and the failure is counted and shown
// by relay stats. (Integration test.)
func TestDeadLetterThatCannotBeStoredIsReportedNotRetried(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	dlqs, err := e.js.Stream(ctx, stream.DLQStream)
	require.NoError(t, err)
	cfg := dlqs.CachedInfo().Config
	cfg.MaxMsgSize = 200
	_, err = e.js.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusBadRequest)
		return http.StatusBadRequest
	})
	e.addDest(destination.Destination{Name: "nodlq", URL: s.URL})
	rec, _ := e.startRelay()
	res := e.publish("nodlq", "", `{"x":1}`)
	// The outcome is recorded after the ack that settles the consumer:
	// wait for both.
	givenUp := func() int {
		return rec.count(func(o relay.Outcome) bool {
			return o.Decision.Action == relay.DeadLetter && errors.Is(o.Err, dlq.ErrPermanent)
		})
	}
	eventually(t, 30*time.Second, func() bool { return e.settled("nodlq") && s.len() == 1 && givenUp() > 0 }, "the event given up after its attempt")
	require.Equal(t, 1, givenUp())
	stats, err := relay.Stats(ctx, e.js, nil)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	f := stats[0].DeadLetterFailures
	require.NotNil(t, f, "shown by relay stats")
	require.Equal(t, uint64(1), f.Count)
	require.Equal(t, res.ID, f.LastEventID)
	require.Equal(t, res.Seq, f.LastSeq)

	code, out := e.relayCLI("stats")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "nodlq: 1 events could not be dead-lettered")
	require.Equal(t, 1, s.len(), "attempted once, not again and again")
}
