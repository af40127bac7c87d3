package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/eventbridge/eventbridgetest"
	"github.com/relaydev/relay/kind/kafka/kafkatest"
	"github.com/relaydev/relay/kind/natskind/natstest"
	"github.com/relaydev/relay/kind/pubsub/pubsubtest"
	"github.com/relaydev/relay/kind/rabbitmq/rabbittest"
	"github.com/relaydev/relay/kind/sqs/sqstest"
)

// kindTarget is a running target of a destination kind, for the tests
// that deliver to it through the relay binary: a configuration reaching
// it, a way to make it go away and come back, and what it received.
type kindTarget struct {
	kind    string
	config  kind.Config
	stop    func()
	restart func()
	// received are the messages the target has, as webhook-id and body.
	received func(t *testing.T) []kindReceived
}

type kindReceived struct {
	ID, Body string
	// Attrs are the message's metadata attributes (webhook-id...).
	Attrs map[string]string
}

// kindTargets start each kind's target: a real server or the project's own
// fake, on loopback.
var kindTargets = map[string]func(t *testing.T) kindTarget{
	"nats": func(t *testing.T) kindTarget {
		s := natstest.Start(t)
		return kindTarget{kind: "nats", config: s.Config(), stop: s.Stop, restart: s.Restart, received: func(t *testing.T) []kindReceived {
			var out []kindReceived
			for _, m := range s.Messages(t) {
				attrs := map[string]string{}
				for k := range m.Header {
					attrs[k] = m.Header.Get(k)
				}
				out = append(out, kindReceived{ID: m.Header.Get("webhook-id"), Body: string(m.Body), Attrs: attrs})
			}
			return out
		}}
	},
	"kafka": func(t *testing.T) kindTarget {
		s := kafkatest.Start(t)
		return kindTarget{kind: "kafka", config: s.Config(), stop: s.Stop, restart: s.Restart, received: func(t *testing.T) []kindReceived {
			var out []kindReceived
			for _, m := range s.Messages(t) {
				out = append(out, kindReceived{ID: m.Headers["webhook-id"], Body: string(m.Body), Attrs: m.Headers})
			}
			return out
		}}
	},
	"pubsub": func(t *testing.T) kindTarget {
		s := pubsubtest.Start(t)
		return kindTarget{kind: "pubsub", config: s.Config(), stop: s.Stop, restart: s.Restart, received: func(t *testing.T) []kindReceived {
			var out []kindReceived
			for _, m := range s.Messages(t) {
				out = append(out, kindReceived{ID: m.Attributes["webhook-id"], Body: string(m.Body), Attrs: m.Attributes})
			}
			return out
		}}
	},
	"rabbitmq": func(t *testing.T) kindTarget {
		// A real rabbitmq-server process: Stop is a kill -9.
		s := rabbittest.Start(t)
		return kindTarget{kind: "rabbitmq", config: s.Config(), stop: s.Stop, restart: s.Restart, received: func(t *testing.T) []kindReceived {
			var out []kindReceived
			for _, m := range s.Messages(t) {
				attrs := map[string]string{}
				for k, v := range m.Headers {
					attrs[k] = fmt.Sprint(v)
				}
				out = append(out, kindReceived{ID: m.MessageID, Body: string(m.Body), Attrs: attrs})
			}
			return out
		}}
	},
	"sqs": func(t *testing.T) kindTarget {
		s := sqstest.Start(t)
		return kindTarget{kind: "sqs", config: s.Config(), stop: s.Stop, restart: s.Restart, received: func(t *testing.T) []kindReceived {
			var out []kindReceived
			for _, m := range s.Messages(t) {
				out = append(out, kindReceived{ID: m.Attributes["webhook-id"], Body: m.Body, Attrs: m.Attributes})
			}
			return out
		}}
	},
	"eventbridge": func(t *testing.T) kindTarget {
		s := eventbridgetest.Start(t)
		return kindTarget{kind: "eventbridge", config: s.Config(), stop: s.Stop, restart: s.Restart, received: func(t *testing.T) []kindReceived {
			var out []kindReceived
			for _, ev := range s.Events(t) {
				var d struct {
					ID          string          `json:"id"`
					Type        string          `json:"type"`
					Destination string          `json:"destination"`
					Timestamp   json.Number     `json:"timestamp"`
					Signature   string          `json:"signature"`
					ContentType string          `json:"content_type"`
					Data        json.RawMessage `json:"data"`
				}
				require.NoError(t, json.Unmarshal([]byte(ev.Detail), &d), ev.Detail)
				out = append(out, kindReceived{ID: d.ID, Body: string(d.Data), Attrs: map[string]string{
					"webhook-id": d.ID, "webhook-timestamp": d.Timestamp.String(), "webhook-signature": d.Signature,
					"relay-destination": d.Destination, "content-type": d.ContentType}})
			}
			return out
		}}
	},
}

// kindConfigArgs are cfg as 'relay dest add' flags.
func kindConfigArgs(cfg kind.Config) []string {
	var args []string
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		args = append(args, "--config", k+"="+cfg[k])
	}
	return args
}

// Every kind, end to end through the relay binary: 'relay dest add --kind
// K' (a refused config first, exit 2 naming the field), 'relay run', an
// event published, and the target has it, once, with its attributes.
func TestKindsDeliverEndToEnd(t *testing.T) {
	t.Parallel()
	for _, name := range slices.Sorted(maps.Keys(kindTargets)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			tg := kindTargets[name](t)
			code, out := e.relayCLI(append([]string{"dest", "add", "k", "--kind", name, "--config", "nope=1"}, kindConfigArgs(tg.config)...)...)
			require.Equal(t, 2, code, out)
			require.Contains(t, out, "--config nope: "+name+" has no such field")
			code, out = e.relayCLI(append([]string{"dest", "add", "k", "--kind", name}, kindConfigArgs(tg.config)...)...)
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "added destination k -> "+name)
			require.Contains(t, out, "signing secret")
			code, out = e.relayCLI("dest", "show", "k")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "kind:")
			for k, v := range tg.config {
				if kindFieldSensitive(name, k) {
					require.NotContains(t, out, v, "a credential is never shown")
				}
			}
			p := faultRun(t, e.url)
			ev := e.publish("k", "", `{"hello":"`+name+`"}`)
			var got []kindReceived
			eventually(t, 60*time.Second, func() bool { got = tg.received(t); return len(got) >= 1 }, "the %s target got the event:\n%s", name, p.output())
			require.Len(t, got, 1)
			require.Equal(t, ev.ID, got[0].ID)
			require.JSONEq(t, `{"hello":"`+name+`"}`, got[0].Body)
			require.Equal(t, "k", got[0].Attrs["relay-destination"])
			require.NotEmpty(t, got[0].Attrs["webhook-timestamp"])
			require.True(t, strings.HasPrefix(got[0].Attrs["webhook-signature"], "v1,"), "signed: %v", got[0].Attrs)
			eventually(t, 30*time.Second, func() bool { return e.settled("k") }, "the event is acknowledged")
		})
	}
}

// kindFieldSensitive reports whether field of kind name is a credential.
func kindFieldSensitive(name, field string) bool {
	k, ok := kind.Lookup(name)
	return ok && kind.Sensitive(k, field)
}

// Every kind: its target goes away in the middle of a run (stopped, with
// events in flight and more published meanwhile), and comes back. Every
// event is delivered; none is lost or dead-lettered (the policy allows
// the attempts the outage takes).
func TestFaultKindTargetGoneMidRun(t *testing.T) {
	t.Parallel()
	for _, name := range slices.Sorted(maps.Keys(kindTargets)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			tg := kindTargets[name](t)
			code, out := e.relayCLI(append([]string{"dest", "add", "k", "--kind", name, "--concurrency", "4", "--timeout", "2s",
				"--max-attempts", "1000", "--backoff-base", "100ms", "--backoff-max", "1s", "--breaker-threshold", "-1"}, kindConfigArgs(tg.config)...)...)
			require.Equal(t, 0, code, out)
			p := faultRun(t, e.url)
			const first, second = 200, 100
			published := map[string]string{}
			var mu sync.Mutex
			pub := func(i int) {
				b := fmt.Sprintf(`{"n":%d}`, i)
				id := e.publish("k", "", b).ID
				mu.Lock()
				published[id] = b
				mu.Unlock()
			}
			for i := range first {
				pub(i)
			}
			eventually(t, 60*time.Second, func() bool { return len(tg.received(t)) >= first/4 }, "deliveries to %s got going:\n%s", name, p.output())
			before := len(tg.received(t))
			tg.stop()
			for i := range second {
				pub(first + i)
			}
			eventually(t, 60*time.Second, func() bool { return p.logged("outcome=retry") },
				"attempts fail while the %s target is away:\n%s", name, p.output())
			tg.restart()
			eventually(t, 120*time.Second, func() bool {
				ids := map[string]bool{}
				for _, m := range tg.received(t) {
					ids[m.ID] = true
				}
				return len(ids) == first+second && e.settled("k")
			}, "all %d delivered once %s is back:\n%s", first+second, name, p.output())
			require.True(t, faultRunning(p), "the relay survived:\n%s", p.output())
			require.Empty(t, e.deadLetters("k"), "nothing dead-lettered")
			seen := map[string]int{}
			for _, m := range tg.received(t) {
				body, ok := published[m.ID]
				require.True(t, ok, "a message with unknown webhook-id %q", m.ID)
				require.JSONEq(t, body, m.Body, "message %s carries its own body", m.ID)
				seen[m.ID]++
			}
			dups := 0
			for _, n := range seen {
				dups += n - 1
			}
			// Duplicates are allowed (at least once); for rabbitmq they
			// include the test's own reads whose acks the kill -9 lost,
			// which the broker hands out again.
			t.Logf("%s: %d delivered before the target went away, %d duplicates", name, before, dups)
		})
	}
}
