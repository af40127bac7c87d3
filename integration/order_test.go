package integration

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/relay"
)

// orderSink fails a share of requests (503, or hanging past the client's
// timeout) and records, per order key, the event numbers it accepted in the
// order it accepted them.
type orderSink struct {
	*sink
	mu       sync.Mutex
	accepted map[string][]int
}

type orderEvent struct {
	K string `json:"k"`
	N int    `json:"n"`
}

func newOrderSink(t *testing.T, failShare float64) *orderSink {
	o := &orderSink{accepted: map[string][]int{}}
	o.sink = newSink(t, func(h hit, w http.ResponseWriter) int {
		var ev orderEvent
		if err := json.Unmarshal([]byte(h.Body), &ev); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return http.StatusBadRequest
		}
		switch r := rand.Float64(); {
		case r < failShare/2:
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		case r < failShare:
			<-h.Ctx.Done() // hang until relay's timeout gives up
			return 0
		}
		// Record before answering: an event is accepted once the 2xx leaves.
		o.mu.Lock()
		o.accepted[ev.K] = append(o.accepted[ev.K], ev.N)
		o.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	return o
}

func (o *orderSink) complete(keys, perKey int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.accepted) != keys {
		return false
	}
	for _, ns := range o.accepted {
		if len(ns) == 0 || ns[len(ns)-1] != perKey-1 {
			return false
		}
	}
	return true
}

func (o *orderSink) acceptedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, ns := range o.accepted {
		n += len(ns)
	}
	return n
}

// acceptedFrom counts the accepted events numbered n or higher, repeats
// included.
func (o *orderSink) acceptedFrom(n int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := 0
	for _, ns := range o.accepted {
		for _, x := range ns {
			if x >= n {
				c++
			}
		}
	}
	return c
}

// check asserts per-key order: each accepted event is the next one of its key,
// or a repeat of the last accepted (at-least-once), never an earlier one
// after a later one, and every event was accepted. It returns the number of
// repeats.
func (o *orderSink) check(t *testing.T, keys, perKey int) int {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	require.Len(t, o.accepted, keys)
	dups := 0
	for k, ns := range o.accepted {
		last := -1
		for i, n := range ns {
			switch n {
			case last + 1:
				last = n
			case last:
				dups++
			default:
				t.Fatalf("key %s: event %d accepted after event %d (position %d of %v)", k, n, last, i, ns)
			}
		}
		require.Equal(t, perKey-1, last, "key %s: every event accepted", k)
	}
	return dups
}

func runOrdering(t *testing.T, killOne bool) {
	e := setup(t)
	const keys, perKey = 100, 100
	o := newOrderSink(t, 0.2)
	e.addDest(destination.Destination{Name: "ord", URL: o.URL, Ordered: true, Partitions: 32, Timeout: destination.Duration(300 * time.Millisecond),
		Retry: destination.RetryPolicy{Base: destination.Duration(20 * time.Millisecond), Max: destination.Duration(200 * time.Millisecond), MaxAttempts: 10}})
	var replicas []*proc
	for range 3 {
		// AckWait 6s: the heads a killed replica held come back soon.
		p := startProc(t, "--nats-url", e.url, "run", "--ack-wait", "6s")
		replicas = append(replicas, p)
	}
	for _, p := range replicas {
		eventually(t, time.Minute, func() bool { return p.logged("relay running") }, "replica up")
	}
	// A publish that times out on a loaded machine is retried with the
	// same event id: if the first was stored, the retry is a duplicate.
	for n := range perKey {
		for k := range keys {
			publishThrough(t, e.prod, "ord", k, n, time.Minute)
		}
	}
	if killOne {
		eventually(t, 3*time.Minute, func() bool { return o.acceptedCount() >= keys*perKey/3 }, "a third delivered")
		require.NoError(t, replicas[0].cmd.Process.Signal(syscall.SIGKILL))
		<-replicas[0].exited
	}
	eventually(t, 4*time.Minute, func() bool { return o.complete(keys, perKey) }, "every key complete (accepted %d)", o.acceptedCount())
	dups := o.check(t, keys, perKey)
	t.Logf("%d events in order across %d keys, %d repeats (at-least-once), %d requests", keys*perKey, keys, dups, o.received())
	require.Empty(t, e.deadLetters("ord"), "block policy: nothing skipped")
}

// Three relay processes, 100 keys x 100 events, a destination failing 20% of
// requests: every key's events arrive in publish order, all of them.
func TestOrderingAcrossReplicasUnderFailures(t *testing.T) {
	t.Parallel()
	runOrdering(t, false)
}

// The same, with one replica killed with SIGKILL mid-run.
func TestOrderingSurvivesAKilledReplica(t *testing.T) {
	t.Parallel()
	runOrdering(t, true)
}

// The failure policies of an ordered key: block holds the key behind its
// failing head (and shows it in stats); skip dead-letters the head after its
// attempts and lets the key go on.
func TestOrderedFailurePolicies(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{destination.OnFailureBlock, destination.OnFailureSkip} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var broken atomic.Bool
			broken.Store(true)
			s := newSink(t, func(h hit, w http.ResponseWriter) int {
				var ev orderEvent
				_ = json.Unmarshal([]byte(h.Body), &ev)
				if ev.N == 0 && broken.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
					return http.StatusServiceUnavailable
				}
				w.WriteHeader(http.StatusOK)
				return http.StatusOK
			})
			e.addDest(destination.Destination{Name: "pol", URL: s.URL, Ordered: true, Partitions: 1, OnFailure: policy,
				Retry: destination.RetryPolicy{Base: destination.Duration(20 * time.Millisecond), Max: destination.Duration(50 * time.Millisecond), NoJitter: true, MaxAttempts: 3}})
			rec, _ := e.startRelay()
			head := e.publish("pol", "k", `{"k":"k","n":0}`)
			next := e.publish("pol", "k", `{"k":"k","n":1}`)

			if policy == destination.OnFailureSkip {
				eventually(t, 10*time.Second, func() bool { return s.delivered()[next.ID] == 1 }, "the key goes on")
				ls := e.deadLetters("pol")
				require.Len(t, ls, 1)
				require.Equal(t, head.ID, ls[0].EventID)
				require.Equal(t, 3, ls[0].Attempts)
				return
			}
			// block: well past max attempts, the head is still being retried
			// and the next event has not been sent.
			rec.wait(t, 1, func(o relay.Outcome) bool { return o.EventID == head.ID && o.Attempt > 6 }, "the head retried past its max attempts")
			require.Zero(t, s.delivered()[next.ID], "nothing overtakes the head")
			require.Empty(t, e.deadLetters("pol"))
			stats, err := relay.Stats(context.Background(), e.js, nil)
			require.NoError(t, err)
			require.Equal(t, 1, stats[0].BlockedPartitions)
			require.Equal(t, 1, stats[0].Partitions)

			broken.Store(false)
			eventually(t, 10*time.Second, func() bool { return s.delivered()[next.ID] == 1 }, "the key goes on once the head is delivered")
			hits := s.all()
			var order []string
			for _, h := range hits {
				if h.Status == http.StatusOK {
					order = append(order, h.ID)
				}
			}
			require.Equal(t, []string{head.ID, next.ID}, order)
		})
	}
}
