package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/history"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/schedule/redistest"
)

// An ordered key blocked by a head that keeps failing (on-failure block)
// goes on once an operator skips the head: 'relay dest skip-head'
// dead-letters it at once (not after its backoff), without another
// attempt, with the operator's reason and its history; the next event of
// the key is delivered.
func TestSkipHeadDeadLettersTheBlockedHeadNow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		var ev orderEvent
		_ = json.Unmarshal([]byte(h.Body), &ev)
		if ev.N == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	// The head's next attempt would be a minute away.
	e.addDest(destination.Destination{Name: "stuck", URL: s.URL, Ordered: true, Partitions: 2,
		Retry: destination.RetryPolicy{Base: destination.Duration(time.Minute), Max: destination.Duration(time.Hour), NoJitter: true, MaxAttempts: 3}})
	e.addDest(destination.Destination{Name: "plain", URL: s.URL})
	e.startRelay()
	head := e.publish("stuck", "k", `{"k":"k","n":0}`)
	next := e.publish("stuck", "k", `{"k":"k","n":1}`)

	var heads []history.Head
	eventually(t, 10*time.Second, func() bool {
		var err error
		heads, err = history.Heads(context.Background(), e.store, "stuck")
		return err == nil && len(heads) == 1 && heads[0].Attempts == 1
	}, "the head failed once and blocks its key")
	h := heads[0]
	require.Equal(t, head.Seq, h.Seq)
	require.Equal(t, head.ID, h.EventID)
	require.Equal(t, "k", h.Key)
	require.Equal(t, "status 503", h.LastError)

	code, out := e.relayCLI("dest", "heads", "stuck")
	require.Equal(t, 0, code, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Equal(t, []string{fmt.Sprint(h.Partition), fmt.Sprint(head.Seq), head.ID, "k", "1"}, strings.Fields(lines[1])[:5], out)
	code, out = e.relayCLI("dest", "heads", "stuck", "--json")
	require.Equal(t, 0, code, out)
	var fromJSON history.Head
	require.NoError(t, json.Unmarshal([]byte(out), &fromJSON), out)
	require.Equal(t, h, fromJSON, "--json gives the same head")
	code, out = e.relayCLI("dest", "skip-head", "stuck", "--seq", fmt.Sprint(next.Seq))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "not the head of a partition waiting for a retry")
	code, out = e.relayCLI("dest", "heads", "plain")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "not ordered")

	start := time.Now()
	code, out = e.relayCLI("dest", "skip-head", "stuck", "--seq", fmt.Sprint(head.Seq), "--reason", "bad payload, ticket 42")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("skipping event %d (%s) at the head of partition %d of stuck after 1 failed attempt", head.Seq, head.ID, h.Partition))
	require.Contains(t, out, "dead-lettered as dead letter", "well before the head's next attempt was due:\n%s", out)
	require.Less(t, time.Since(start), 30*time.Second)

	eventually(t, 10*time.Second, func() bool { return s.delivered()[next.ID] == 1 }, "the key goes on")
	require.Zero(t, s.delivered()[head.ID], "the head was never delivered")
	attempts := 0
	for _, x := range s.all() {
		if x.ID == head.ID {
			attempts++
		}
	}
	require.Equal(t, 1, attempts, "skipping made no further attempt")
	ls := e.deadLetters("stuck")
	require.Len(t, ls, 1)
	require.Equal(t, head.ID, ls[0].EventID)
	require.Equal(t, relay.ReasonSkipped, ls[0].Reason)
	require.Equal(t, "bad payload, ticket 42", ls[0].Note)
	require.Equal(t, 1, ls[0].Attempts)
	require.Len(t, ls[0].History, 1)
	require.Equal(t, 503, ls[0].LastStatus)

	code, out = e.relayCLI("dlq", "show", fmt.Sprint(ls[0].Seq))
	require.Equal(t, 0, code, out)
	require.True(t, strings.Contains(out, "reason:        skipped") && strings.Contains(out, "note:          bad payload, ticket 42"), out)
	heads, err := history.Heads(context.Background(), e.store, "stuck")
	require.NoError(t, err)
	require.Empty(t, heads)
}

// A skip while an attempt of the head is in flight (on one of two
// replicas) does not hand the head out a second time: that attempt
// decides. Delivered, nothing is dead-lettered; failed, the head is
// dead-lettered at once with its history, each attempt once.
func TestSkipHeadWhileAnAttemptIsInFlight(t *testing.T) {
	t.Parallel()
	for _, answer := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(answer), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			inFlight, release := make(chan struct{}), make(chan int)
			var done chan struct{}
			s := newSink(t, func(h hit, w http.ResponseWriter) int {
				var ev orderEvent
				_ = json.Unmarshal([]byte(h.Body), &ev)
				status := http.StatusOK
				switch {
				case ev.N == 0 && h.N == 1:
					status = http.StatusServiceUnavailable
				case ev.N == 0 && h.N == 2:
					close(inFlight)
					select {
					case status = <-release:
					case <-done: // the test failed before it released it
						status = http.StatusServiceUnavailable
					}
				case ev.N == 0:
					status = http.StatusServiceUnavailable
				}
				w.WriteHeader(status)
				return status
			})
			done = make(chan struct{})
			t.Cleanup(func() { close(done) }) // before the sink stops
			e.addDest(destination.Destination{Name: "race", URL: s.URL, Ordered: true, Partitions: 1, BreakerThreshold: -1,
				Retry: destination.RetryPolicy{Base: destination.Duration(300 * time.Millisecond), Max: destination.Duration(time.Minute), NoJitter: true, MaxAttempts: 3}})
			e.startRelay()
			e.startRelay()
			head := e.publish("race", "k", `{"k":"k","n":0}`)
			next := e.publish("race", "k", `{"k":"k","n":1}`)
			select {
			case <-inFlight:
			case <-time.After(15 * time.Second):
				t.Fatal("the head's second attempt never came")
			}
			_, err := history.SkipHead(context.Background(), e.store, "race", head.Seq, "ops")
			require.NoError(t, err)
			// Nothing may move while the attempt is in flight: a second
			// delivery of the head would be dead-lettered here at once
			// (it took about 50 ms when SkipHead naked regardless).
			require.Never(t, func() bool {
				return len(e.deadLetters("race")) > 0 || s.delivered()[next.ID] > 0
			}, 2*time.Second, 50*time.Millisecond, "the head was handed out again during its attempt")
			release <- answer

			eventually(t, 10*time.Second, func() bool { return s.delivered()[next.ID] == 1 }, "the key goes on")
			ls := e.deadLetters("race")
			if answer == http.StatusOK {
				require.Equal(t, 1, s.delivered()[head.ID])
				require.Empty(t, ls, "delivered, so not dead-lettered too")
				return
			}
			require.Zero(t, s.delivered()[head.ID])
			require.Len(t, ls, 1)
			require.Equal(t, relay.ReasonSkipped, ls[0].Reason)
			require.Equal(t, "ops", ls[0].Note)
			require.Equal(t, 2, ls[0].Attempts)
			require.Len(t, ls[0].History, 2, "each attempt once in the history")
			require.Equal(t, []int{1, 2}, []int{ls[0].History[0].N, ls[0].History[1].N})
		})
	}
}

// An unordered event that keeps failing is given up on by an operator:
// 'relay dest skip' dead-letters it at its next delivery, without another
// attempt, with the operator's reason and its history, whether it waits in
// JetStream (a delayed nak) or parked in Redis.
func TestSkipEventDeadLettersItAtItsNextDelivery(t *testing.T) {
	t.Parallel()
	// "redis-now": the wait is an hour, and skip, given the Redis, brings
	// the parked event forward.
	for _, where := range []string{"jetstream", "redis", "redis-now"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			s := newSink(t, func(h hit, w http.ResponseWriter) int {
				if strings.Contains(h.Body, `"bad":true`) {
					w.WriteHeader(http.StatusServiceUnavailable)
					return http.StatusServiceUnavailable
				}
				w.WriteHeader(http.StatusOK)
				return http.StatusOK
			})
			name := "skip" + strings.ReplaceAll(where, "-", "")
			wait := 3 * time.Second
			if where == "redis-now" {
				wait = time.Hour
			}
			e.addDest(destination.Destination{Name: name, URL: s.URL,
				Retry: destination.RetryPolicy{Base: destination.Duration(wait), Max: destination.Duration(wait), NoJitter: true, MaxAttempts: 20}})
			e.addDest(destination.Destination{Name: name + "ord", URL: s.URL, Ordered: true, Partitions: 1})
			var opts []func(*relay.Config)
			var parked func() int64
			var skipFlags []string
			if where != "jetstream" {
				r := redistest.Start(t, redistest.Options{})
				st, withRedis := e.withSchedule(r)
				if where == "redis-now" {
					skipFlags = []string{"--redis-url", r.URL()}
				}
				opts = append(opts, withRedis)
				parked = func() int64 {
					ps, err := st.Stats(context.Background(), name)
					if err != nil {
						return -1
					}
					return ps.Parked
				}
			}
			e.startRelay(opts...)
			bad := e.publish(name, "", `{"bad":true}`)
			good := e.publish(name, "", `{"bad":false}`)

			code, out := e.relayCLI("dest", "skip", name, "--event", " ")
			require.Equal(t, 2, code, out)
			require.Contains(t, out, "--event: give the event's id")
			code, out = e.relayCLI("dest", "skip", name, "--event", "no-such-event")
			require.Equal(t, 1, code, out)
			require.Contains(t, out, "no failed attempt of it is on record")
			code, out = e.relayCLI("dest", "skip", name+"ord", "--event", bad.ID)
			require.Equal(t, 1, code, out)
			require.Contains(t, out, "is ordered")

			eventually(t, 10*time.Second, func() bool {
				return s.delivered()[good.ID] == 1 && len(s.all()) >= 2 && (parked == nil || parked() == 1)
			}, "the bad event failed once and waits (parked: %v)", parked != nil)
			code, out = e.relayCLI("dest", "retrying", name)
			require.Equal(t, 0, code, out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 2, "a header and the bad event:\n%s", out)
			require.Equal(t, bad.ID, strings.Fields(lines[1])[0], out)
			require.Contains(t, lines[1], "status 503")
			code, out = e.relayCLI("dest", "retrying", name, "--json")
			require.Equal(t, 0, code, out)
			var listed history.Retrying
			require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
			require.Equal(t, bad.ID, listed.EventID)
			require.Positive(t, listed.Attempts)
			require.Empty(t, listed.Skip)

			if skipFlags != nil {
				// A bad Redis setting is refused before anything is marked.
				code, out = e.relayCLI(append([]string{"dest", "skip", name, "--event", listed.EventID, "--redis-mode", "primary"}, skipFlags...)...)
				require.Equal(t, 2, code, out)
				require.Contains(t, out, `--redis-mode "primary": give single, cluster or sentinel`)
				rs, err := history.ListRetrying(context.Background(), e.store, name, 0)
				require.NoError(t, err)
				require.Len(t, rs, 1)
				require.Empty(t, rs[0].Skip, "not marked")
			}
			code, out = e.relayCLI(append([]string{"dest", "skip", name, "--event", listed.EventID, "--reason", "never valid, ticket 7"}, skipFlags...)...)
			require.Equal(t, 0, code, out)
			m := regexp.MustCompile(`skipping event \S+ of \S+ after (\d+) failed attempts?`).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			require.Contains(t, out, "status 503")
			made, _ := strconv.Atoi(m[1])
			if where == "redis-now" {
				require.Contains(t, out, "it was parked in Redis, and is due now")
			}

			var ls []dlq.Letter
			eventually(t, 15*time.Second, func() bool { ls = e.deadLetters(name); return len(ls) == 1 }, "dead-lettered at its next delivery")
			require.Equal(t, bad.ID, ls[0].EventID)
			require.Equal(t, relay.ReasonSkipped, ls[0].Reason)
			require.Equal(t, "never valid, ticket 7", ls[0].Note)
			// An attempt in flight when the mark was set (the backoff is
			// 3s) fails and is the last: at most one more than the CLI saw.
			require.GreaterOrEqual(t, ls[0].Attempts, made)
			require.LessOrEqual(t, ls[0].Attempts, made+1)
			require.Len(t, ls[0].History, ls[0].Attempts)
			requests := 0
			for _, h := range s.all() {
				if h.ID == bad.ID {
					requests++
				}
			}
			require.Equal(t, ls[0].Attempts, requests, "no attempt after the mark")
			require.Zero(t, s.delivered()[bad.ID])
			eventually(t, 10*time.Second, func() bool { return e.settled(name) }, "nothing left in retry")
			code, out = e.relayCLI("dest", "retrying", name)
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "no event of "+name+" has a failed attempt on record")
			if parked != nil {
				require.Zero(t, parked())
			}

			// A replay of the skipped event is an event of its own: it is
			// attempted, and, back from Redis, attempted again.
			code, out = e.relayCLI("dlq", "replay", "--dest", name)
			require.Equal(t, 0, code, out)
			want := ls[0].Attempts + 1
			if where == "redis" {
				want++ // its first attempt fails, it is parked for 3s, and comes back
			}
			eventually(t, 20*time.Second, func() bool {
				n := 0
				for _, h := range s.all() {
					if h.ID == bad.ID {
						n++
					}
				}
				return n >= want
			}, "the replay is attempted (%d requests), not skipped", want)
			for _, l := range e.deadLetters(name) {
				require.NotEqual(t, relay.ReasonSkipped, l.Reason, "the replay was skipped")
			}
		})
	}
}
