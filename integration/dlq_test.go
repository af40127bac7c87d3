package integration

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// deadLetterMany dead-letters n events of dest by sending them to a
// destination that answers 404, and returns their ids.
func deadLetterMany(t *testing.T, e *env, dest string, n int, gone *atomic.Bool) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for range n {
		ids[e.publish(dest, "", `{"replay":true}`).ID] = true
	}
	eventually(t, 60*time.Second, func() bool { return len(e.deadLetters(dest)) == n }, "%d dead letters", n)
	gone.Store(false) // the destination is fixed
	return ids
}

// fixable is a sink that answers 404 until fixed.
func fixable(t *testing.T) (*sink, *atomic.Bool) {
	var gone atomic.Bool
	gone.Store(true)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if gone.Load() {
			w.WriteHeader(http.StatusNotFound)
			return http.StatusNotFound
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	return s, &gone
}

func TestReplayOfAThousandDeadLettersDeliversEachOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, gone := fixable(t)
	e.addDest(destination.Destination{Name: "bulk", URL: s.URL, Concurrency: 32})
	e.startRelay()
	const n = 1000
	ids := deadLetterMany(t, e, "bulk", n, gone)

	code, out := e.relayCLI("dlq", "replay", "--dest", "bulk")
	require.Equal(t, 0, code, out)
	// The replay reads the letters in pull requests that end at their
	// max_bytes; it once stopped at the first such end with the rest
	// already delivered to it, and replayed 812 of the 1,000.
	require.Contains(t, out, fmt.Sprintf("replayed %d dead letters", n))
	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) == n && e.settled("bulk") }, "all replayed events delivered")
	for id, c := range s.delivered() {
		require.True(t, ids[id], "replayed events keep their ids: %s", id)
		require.Equal(t, 1, c)
	}
	require.Empty(t, e.deadLetters("bulk"), "the dead-letter stream is empty after the replay")
}

// A replay killed with SIGKILL between a republish and the removal of its
// dead letter, then run again: every event delivered once, none left behind.
func TestReplayKilledHalfwayAndRerun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, gone := fixable(t)
	e.addDest(destination.Destination{Name: "half", URL: s.URL})
	e.startRelay()
	const n = 40
	deadLetterMany(t, e, "half", n, gone)

	// The failpoint kills the replay right after its first republish, before
	// the dead letter is removed.
	p := startProcEnv(t, []string{"RELAY_FAILPOINT=replay-after-publish"}, "--nats-url", e.url, "dlq", "replay", "--all")
	<-p.exited
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed mid-replay: %v", p.cmd.ProcessState)
	require.Len(t, e.deadLetters("half"), n, "the letter whose republish was not confirmed as done is still there")

	p = startProc(t, "--nats-url", e.url, "dlq", "replay", "--all")
	<-p.exited
	require.NoError(t, p.err, p.output())
	eventually(t, 30*time.Second, func() bool { return len(s.delivered()) == n && e.settled("half") }, "all delivered")
	for id, c := range s.delivered() {
		require.Equal(t, 1, c, "event %s delivered %d times", id, c)
	}
	require.Empty(t, e.deadLetters("half"))

	// The same replay again finds nothing and delivers nothing.
	p = startProc(t, "--nats-url", e.url, "dlq", "replay", "--all")
	<-p.exited
	require.NoError(t, p.err)
	require.Equal(t, n, len(s.delivered()))
}

// Log replay re-delivers the events of a time range, delivered or not.
func TestLogReplayRedeliversTheRange(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "log", URL: s.URL})
	e.startRelay()

	early := e.publish("log", "a", `{"n":0}`)
	eventually(t, 10*time.Second, func() bool { return s.delivered()[early.ID] == 1 }, "early delivered")
	var inRange []string
	var first publish.Published
	for i, k := range []string{"a", "b", "a"} {
		p := e.publish("log", k, `{"n":1}`)
		if i == 0 {
			first = p
		}
		inRange = append(inRange, p.ID)
	}
	eventually(t, 10*time.Second, func() bool { return len(s.delivered()) == 4 && e.settled("log") }, "all delivered once")
	late := e.publish("log", "a", `{"n":2}`)
	eventually(t, 10*time.Second, func() bool { return s.delivered()[late.ID] == 1 }, "late delivered")
	// The range is [stored time of the first in range, stored time of the
	// late one): exact, whatever the clock resolution.
	from, to := e.storedAt(first.Seq), e.storedAt(late.Seq)
	require.True(t, e.storedAt(early.Seq).Before(from), "the early event must be older than the range (same timestamp otherwise)")

	var replayed []string
	n, err := deliverylog.ReplayLog(context.Background(), e.js, deliverylog.LogReplay{Dest: "log", Since: from, Until: to}, false, func(ev deliverylog.ReplayedEvent) error {
		replayed = append(replayed, ev.ID)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, inRange, replayed, "exactly the range, in order")
	eventually(t, 10*time.Second, func() bool {
		d := s.delivered()
		return d[inRange[0]] == 2 && d[inRange[1]] == 2 && d[inRange[2]] == 2
	}, "the range delivered again, with the same ids")
	require.Equal(t, 1, s.delivered()[early.ID])
	require.Equal(t, 1, s.delivered()[late.ID])

	// One key only.
	var keyed []string
	_, err = deliverylog.ReplayLog(context.Background(), e.js, deliverylog.LogReplay{Dest: "log", Key: "b", Since: from, Until: to}, true, func(ev deliverylog.ReplayedEvent) error {
		keyed = append(keyed, ev.ID)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{inRange[1]}, keyed)
}

// The dead-letter stream refuses writes (full, discard new): an event that
// has to be dead-lettered stays in the event stream and comes back, and is
// dead-lettered, with its body, once the dead-letter stream takes writes
// again. Nothing is dropped in between.
func TestFailedDeadLetterWriteKeepsTheEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	dlqs, err := e.js.Stream(ctx, stream.DLQStream)
	require.NoError(t, err)
	cfg := dlqs.CachedInfo().Config
	full := cfg
	full.MaxMsgs, full.Discard = 1, jetstream.DiscardNew
	_, err = e.js.UpdateStream(ctx, full)
	require.NoError(t, err)
	_, err = e.js.Publish(ctx, "relay.dlq.filler", []byte(`{}`))
	require.NoError(t, err)
	_, err = e.js.Publish(ctx, "relay.dlq.filler", []byte(`{}`))
	require.Error(t, err, "the dead-letter stream is full")

	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusBadRequest)
		return http.StatusBadRequest
	})
	e.addDest(destination.Destination{Name: "perm", URL: s.URL, Retry: fast(5)})
	rec, _ := e.startRelay()
	id := e.publish("perm", "", `{"keep":"me"}`).ID
	failedWrites := func() int {
		return rec.count(func(o relay.Outcome) bool { return o.Decision.Action == relay.DeadLetter && o.Err != nil })
	}
	// The write fails, the event is handed back (5s), comes back, fails again.
	eventually(t, 30*time.Second, func() bool { return failedWrites() >= 2 }, "two failed dead-letter writes")
	require.Empty(t, e.deadLetters("perm"))
	c, err := e.js.Consumer(ctx, stream.EventsStream, destination.ConsumerName("perm"))
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), uint64(info.NumAckPending)+info.NumPending, "the event is still in the stream, not acked")

	_, err = e.js.UpdateStream(ctx, cfg) // room again
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool { return len(e.deadLetters("perm")) == 1 && e.settled("perm") },
		"dead-lettered once the stream takes writes")
	l := e.deadLetters("perm")[0]
	require.Equal(t, id, l.EventID)
	require.Equal(t, relay.ReasonPermanentStatus, l.Reason)
	require.Equal(t, `{"keep":"me"}`, string(l.Body))
	require.GreaterOrEqual(t, s.len(), 3, "each time the event came back it was attempted again")
}

// TestEventWithAStatusHeaderAndNoBodyIsListedAndReplayed: an event with an
// empty body and a header named Status, dead-lettered, is listed and
// replayed from the dead letters, and from the log. Reading the dead
// letters (and the log) through nats.go's ordered consumer never got past
// it: the listing hung.
func TestEventWithAStatusHeaderAndNoBodyIsListedAndReplayed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var accept atomic.Bool
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if accept.Load() {
			w.WriteHeader(http.StatusNoContent)
			return http.StatusNoContent
		}
		w.WriteHeader(http.StatusBadRequest)
		return http.StatusBadRequest
	})
	e.addDest(destination.Destination{Name: "odd", URL: s.URL})
	e.startRelay()
	from := time.Now().Add(-time.Second)
	m := nats.NewMsg(stream.DestFilters("odd")[0])
	m.Header.Set("Status", "404")
	m.Header.Set("Description", "No Messages")
	m.Header.Set(stream.HdrMsgID, "evt_odd")
	_, err := e.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	letters, err := dlq.Open(ctx, e.js)
	require.NoError(t, err)
	var ls []dlq.Letter
	eventually(t, 15*time.Second, func() bool {
		ls, err = letters.List(ctx, dlq.Filter{Dest: "odd"}, 0)
		require.NoError(t, err)
		return len(ls) == 1
	}, "the event dead-lettered and listed")
	require.Equal(t, "evt_odd", ls[0].EventID)

	accept.Store(true)
	_, err = letters.Replay(ctx, ls[0], "")
	require.NoError(t, err)
	eventually(t, 15*time.Second, func() bool { return s.delivered()["evt_odd"] == 1 }, "replayed from the dead letters and delivered")

	n, err := deliverylog.ReplayLog(ctx, e.js, deliverylog.LogReplay{Dest: "odd", Since: from, Until: time.Now().Add(time.Second)}, false, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the log has it once (the dead letter's replay is a copy relay made)")
	eventually(t, 15*time.Second, func() bool { return s.delivered()["evt_odd"] == 2 }, "replayed from the log and delivered")
}
