package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/routing"
)

// publishType publishes an event of type typ with key and body.
func (e *env) publishType(typ, key, body string) publish.Published {
	e.t.Helper()
	res, err := e.prod.Publish(context.Background(), publish.Event{Type: typ, Key: key, Data: []byte(body)})
	require.NoError(e.t, err)
	return res
}

// routerState reads the router's state, waiting for it to exist.
func (e *env) routerState() routing.State {
	e.t.Helper()
	st, _, err := routing.ReadState(context.Background(), e.js)
	require.NoError(e.t, err)
	return st
}

// One typed event reaches every destination subscribed to its type, and
// each behaves as if the event had been published for it: the healthy one
// delivers at once, the failing one retries and dead-letters on its own,
// and one subscribed to another type gets nothing. The event id
// (webhook-id) and type are the same everywhere.
func TestTypedEventFansOutToItsSubscribersOnly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ok := newSink(t, nil)
	failing := newSink(t, func(_ hit, w http.ResponseWriter) int { w.WriteHeader(500); return 500 })
	other := newSink(t, nil)
	fast := destination.RetryPolicy{MaxAttempts: 2, Base: destination.Duration(50 * time.Millisecond), Max: destination.Duration(100 * time.Millisecond)}
	e.addDest(destination.Destination{Name: "crm", URL: ok.URL, Types: []string{"order.*"}})
	e.addDest(destination.Destination{Name: "ads", URL: failing.URL, Types: []string{"order.created"}, Retry: fast, BreakerThreshold: -1})
	e.addDest(destination.Destination{Name: "billing", URL: other.URL, Types: []string{"invoice.>"}})
	e.startRelay()

	var ids []string
	for i := range 20 {
		ids = append(ids, e.publishType("order.created", "", fmt.Sprintf(`{"n":%d}`, i)).ID)
	}
	eventually(t, time.Minute, func() bool { return len(ok.delivered()) == 20 }, "crm has every event")
	eventually(t, time.Minute, func() bool { return len(e.deadLetters("ads")) == 20 }, "ads dead-lettered every event")

	require.ElementsMatch(t, ids, keys(ok.delivered()), "crm received the events' own ids")
	for _, h := range ok.all() {
		require.Equal(t, "order.created", h.Header.Get("Relay-Event-Type"))
	}
	var dead []string
	for _, l := range e.deadLetters("ads") {
		require.Equal(t, relay.ReasonMaxAttempts, l.Reason)
		require.Equal(t, 2, l.Attempts)
		dead = append(dead, l.EventID)
	}
	require.ElementsMatch(t, ids, dead, "the failing subscriber's dead letters carry the same ids")
	require.Zero(t, other.received(), "a destination subscribed to another type gets nothing")
	require.Empty(t, e.deadLetters("billing"))

	e.waitRouted(func(st routing.State) bool { return st.Events == 20 }, "the router recorded its work")
	st := e.routerState()
	require.EqualValues(t, 40, st.Copies)
	require.Zero(t, st.Unsubscribed)
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Wildcards route as NATS subjects do: '*' is one token, '>' one or more.
func TestTypePatternsRouteAsNATSWildcards(t *testing.T) {
	t.Parallel()
	e := setup(t)
	patterns := map[string][]string{
		"exact": {"order.created"},
		"star":  {"order.*"},
		"tail":  {"order.>"},
		"first": {"*.created"},
		"all":   {">"},
		"two":   {"invoice.paid", "order.created.eu"},
	}
	sinks := map[string]*sink{}
	for name, ps := range patterns {
		sinks[name] = newSink(t, nil)
		e.addDest(destination.Destination{Name: name, URL: sinks[name].URL, Types: ps})
	}
	e.startRelay()
	want := map[string][]string{}
	for _, typ := range []string{"order.created", "order.created.eu", "order", "invoice.created", "invoice.paid"} {
		id := e.publishType(typ, "", "{}").ID
		for name, ps := range patterns {
			if slices.ContainsFunc(ps, func(p string) bool { return matches(p, typ) }) {
				want[name] = append(want[name], typ+"="+id)
			}
		}
	}
	total := 0
	for _, w := range want {
		total += len(w)
	}
	eventually(t, time.Minute, func() bool {
		n := 0
		for _, s := range sinks {
			n += len(s.delivered())
		}
		return n >= total
	}, "every copy delivered")
	e.waitRouted(func(st routing.State) bool { return st.Events == 5 }, "every event routed")
	for name, s := range sinks {
		var got []string
		for _, h := range s.all() {
			got = append(got, h.Header.Get("Relay-Event-Type")+"="+h.ID)
		}
		require.ElementsMatch(t, want[name], got, "destination %s (%v)", name, patterns[name])
	}
	// order (no subscriber with a one-token pattern but ">"): all has it;
	// nothing went unsubscribed.
	require.Zero(t, e.routerState().Unsubscribed)
}

// matches is the expected rule, written out for the table.
func matches(p, typ string) bool {
	switch p {
	case ">":
		return true
	case "order.*":
		return typ == "order.created"
	case "order.>":
		return typ == "order.created" || typ == "order.created.eu"
	case "*.created":
		return typ == "order.created" || typ == "invoice.created"
	}
	return p == typ
}

// A typed event no destination subscribes to is counted, not
// dead-lettered; a destination that subscribes later gets the events
// published after it subscribed, and 'relay replay --type' backfills it.
func TestUnsubscribedTypedEventsAreCountedAndBackfilledByReplay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "late", URL: s.URL})
	e.startRelay()
	var early []string
	for range 3 {
		early = append(early, e.publishType("user.signed_up", "", "{}").ID)
	}
	e.waitRouted(func(st routing.State) bool { return st.Unsubscribed == 3 }, "counted without a subscriber")
	require.Empty(t, e.deadLetters("late"))
	require.Empty(t, e.deadLetters(""))

	_, err := e.store.Update(context.Background(), "late", func(d *destination.Destination) error {
		d.Types = []string{"user.*"}
		return nil
	})
	require.NoError(t, err)
	later := e.publishType("user.signed_up", "", "{}").ID
	eventually(t, time.Minute, func() bool { return s.delivered()[later] == 1 }, "the event after the subscription delivered")
	require.Len(t, s.delivered(), 1, "not those published before it subscribed")

	code, out := e.relayCLI("replay", "--dest", "late", "--type", "user.*", "--since", "1h")
	require.Equal(t, 0, code, out)
	eventually(t, time.Minute, func() bool { return len(s.delivered()) == 4 }, "the backfill delivered")
	for _, id := range append(early, later) {
		require.Positive(t, s.delivered()[id], "event %s", id)
	}
}

// A subscription changed while typed events flow: each event goes to a
// destination if and only if the destination was subscribed to its type
// when the event was stored (the store records the sequence each change
// applies from), none is lost and none is delivered to a destination that
// was not subscribed.
func TestSubscriptionChangesWhileEventsFlow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "flip", URL: s.URL, Types: []string{"a.x"}})
	e.startRelay()

	type pub struct {
		id  string
		seq uint64
	}
	var (
		mu   sync.Mutex
		pubs []pub
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			res, err := e.prod.Publish(context.Background(), publish.Event{Type: "a.x", Data: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			pubs = append(pubs, pub{res.ID, res.Seq})
			mu.Unlock()
		}
	}()
	published := func() int { mu.Lock(); defer mu.Unlock(); return len(pubs) }
	// Off, on, off, on, with events flowing through each change.
	for i, types := range [][]string{{"b.*"}, {"a.*"}, nil, {"a.x", "c"}} {
		before := published()
		eventually(t, time.Minute, func() bool { return published() >= before+30 }, "events flowing before change %d", i)
		_, err := e.store.Update(context.Background(), "flip", func(d *destination.Destination) error {
			d.Types = types
			return nil
		})
		require.NoError(t, err)
	}
	before := published()
	eventually(t, time.Minute, func() bool { return published() >= before+30 }, "events after the last change")
	close(stop)
	<-done

	d, err := e.store.Get(context.Background(), "flip")
	require.NoError(t, err)
	var want []string
	mu.Lock()
	for _, p := range pubs {
		if d.Subscribed("a.x", p.seq) {
			want = append(want, p.id)
		}
	}
	total := len(pubs)
	mu.Unlock()
	require.Greater(t, len(want), 60, "events in both subscribed spells")
	require.Less(t, len(want), total, "and some in the unsubscribed ones")
	e.waitRouted(func(st routing.State) bool { return st.Events == uint64(total) }, "every event routed")
	eventually(t, time.Minute, func() bool { return len(s.delivered()) >= len(want) }, "every subscribed event delivered")
	require.ElementsMatch(t, want, keys(s.delivered()), "exactly the events published while subscribed")
}

// Each subscriber that orders by key gets the events of a key in the order
// they were published, though one of them fails now and then.
func TestTypedEventsKeepKeyOrderForEachSubscriber(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var calls sync.Map
	flaky := newSink(t, func(h hit, w http.ResponseWriter) int {
		n, _ := calls.LoadOrStore(h.ID, new(int))
		*n.(*int)++
		if *n.(*int) == 1 && h.ID[len(h.ID)-1]%3 == 0 { // some events fail once
			w.WriteHeader(503)
			return 503
		}
		w.WriteHeader(200)
		return 200
	})
	steady := newSink(t, nil)
	retry := destination.RetryPolicy{Base: destination.Duration(20 * time.Millisecond), Max: destination.Duration(50 * time.Millisecond)}
	e.addDest(destination.Destination{Name: "flaky", URL: flaky.URL, Types: []string{"acct.>"}, Ordered: true, Partitions: 4, Retry: retry})
	e.addDest(destination.Destination{Name: "steady", URL: steady.URL, Types: []string{"acct.*"}, Ordered: true, Partitions: 2})
	e.startRelay()

	const keysN, perKey = 5, 20
	for i := range perKey {
		for k := range keysN {
			e.publishType("acct.updated", "customer-"+strconv.Itoa(k), fmt.Sprintf(`{"k":%d,"i":%d}`, k, i))
		}
	}
	for name, s := range map[string]*sink{"flaky": flaky, "steady": steady} {
		eventually(t, 2*time.Minute, func() bool { return len(s.delivered()) == keysN*perKey }, "%s has every event", name)
		last := map[string]int{}
		for _, h := range s.all() {
			if h.Status != 200 {
				continue
			}
			var k, i int
			_, err := fmt.Sscanf(h.Body, `{"k":%d,"i":%d}`, &k, &i)
			require.NoError(t, err)
			key := strconv.Itoa(k)
			if prev, ok := last[key]; ok {
				require.Equal(t, prev+1, i, "%s: key %d in order", name, k)
			} else {
				require.Zero(t, i, "%s: key %d starts at its first event", name, k)
			}
			last[key] = i
		}
	}
}

// The replica routing typed events is SIGKILLed while it fans them out to
// two subscribers. The other replica takes the router over from the
// sequence the killed one recorded: every event reaches both subscribers
// (copies published again are dropped by their dedup id), none is lost.
func TestFaultKilledRouterLosesNoEvent(t *testing.T) {
	t.Parallel()
	faultKilledRouter(t, false)
}

// The same with shared subscribers, reached by fan-out messages: a relay
// killed while it holds fan-out messages with shares in flight loses none
// (another delivers the message again, every share split off).
func TestFaultKilledRelayMidFanOutLosesNoEvent(t *testing.T) {
	t.Parallel()
	faultKilledRouter(t, true)
}

func faultKilledRouter(t *testing.T, shared bool) {
	e := setup(t)
	ctx := context.Background()
	a, b := newSink(t, nil), newSink(t, nil)
	e.addDest(destination.Destination{Name: "suba", URL: a.URL, Types: []string{"order.*"}, Shared: shared})
	e.addDest(destination.Destination{Name: "subb", URL: b.URL, Types: []string{"order.>"}, Shared: shared})
	p1 := faultRun(t, e.url)
	var first routing.State
	eventually(t, 20*time.Second, func() bool {
		st, ok, err := routing.ReadState(ctx, e.js)
		first = st
		return err == nil && ok && st.Holder != ""
	}, "the first relay holds the router")
	faultRun(t, e.url)

	published := map[string]string{}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			body := fmt.Sprintf(`{"n":%d}`, i)
			res := e.publishType("order.created", "", body)
			published[res.ID] = body
		}
	}
	publish(0, 1000)
	eventually(t, 30*time.Second, func() bool { return e.routerState().Events >= 200 }, "the first relay routes some")
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	<-p1.exited
	publish(1000, 2000)

	eventually(t, 60*time.Second, func() bool {
		st := e.routerState()
		// With copies, every stored message is a typed event or a copy,
		// and each copy a request: the router has caught up.
		return st.Holder != "" && st.Holder != first.Holder && (shared || st.Routed >= e.eventsStored()-uint64(a.len()+b.len()))
	}, "the second relay took the router over")
	eventually(t, 2*time.Minute, func() bool { return len(a.delivered()) == 2000 && len(b.delivered()) == 2000 }, "both subscribers have every event")
	faultLedger(t, e, a, "suba", published, 2)
	faultLedger(t, e, b, "subb", published, 2)
}

// TestReplayedTypedDeadLetterKeepsItsType: a typed event dead-lettered by
// one subscriber and replayed from the dead letters is delivered with its
// type (Relay-Event-Type), and a filter on the type still takes it.
func TestReplayedTypedDeadLetterKeepsItsType(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var accept atomic.Bool
	s := newSink(t, func(_ hit, w http.ResponseWriter) int {
		if accept.Load() {
			w.WriteHeader(http.StatusNoContent)
			return http.StatusNoContent
		}
		w.WriteHeader(http.StatusBadRequest)
		return http.StatusBadRequest
	})
	e.addDest(destination.Destination{Name: "ads", URL: s.URL, Types: []string{"order.*"}, Filter: `type == "order.created"`})
	e.startRelay()
	id := e.publishType("order.created", "", `{"n":1}`).ID
	eventually(t, 30*time.Second, func() bool { return len(e.deadLetters("ads")) == 1 }, "dead-lettered")
	l := e.deadLetters("ads")[0]
	require.Equal(t, "order.created", l.Type)

	accept.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	letters, err := dlq.Open(ctx, e.js)
	require.NoError(t, err)
	_, err = letters.Replay(ctx, l, "")
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool { return s.delivered()[id] == 1 }, "the replay delivered, not filtered out")
	var last hit
	for _, h := range s.all() {
		last = h
	}
	require.Equal(t, "order.created", last.Header.Get("Relay-Event-Type"))
}

// A NATS producer that publishes a type like relay's own in another case
// (relay.type.Relay.destination.disabled) gets it routed to no one: relay's
// own types are lower case, and a receiver comparing types
// case-insensitively would take the spoof for one of them.
func TestSpoofedOperatorTypeIsNotRouted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	all := newSink(t, nil)
	e.addDest(destination.Destination{Name: "all", URL: all.URL, Types: []string{">"}})
	e.startRelay()
	for _, typ := range []string{"Relay.destination.disabled", "RELAY.dead_letters"} {
		_, err := e.js.PublishMsg(context.Background(), &nats.Msg{Subject: "relay.type." + typ, Data: []byte(`{}`), Header: nats.Header{"Nats-Msg-Id": []string{typ}}})
		require.NoError(t, err)
	}
	id := e.publishType("order.created", "", "{}").ID
	e.waitRouted(func(st routing.State) bool { return st.Events == 3 }, "every typed event routed")
	require.EqualValues(t, 1, e.routerState().Copies, "one copy: the genuine event's")
	eventually(t, time.Minute, func() bool { return all.delivered()[id] > 0 }, "the genuine event delivered")
	require.Equal(t, []string{id}, keys(all.delivered()), "only the genuine event reached the subscriber")
}

// A typed event published over NATS that does not satisfy its type's
// schema is not copied: each subscriber has a dead letter, reason
// schema_mismatch, naming the value at fault; one that satisfies it is
// delivered; a type without a schema is not checked.
func TestTypedEventAgainstItsSchemaOverNATS(t *testing.T) {
	t.Parallel()
	e := setup(t)
	crm, audit := newSink(t, nil), newSink(t, nil)
	e.addDest(destination.Destination{Name: "crm", URL: crm.URL, Types: []string{"order.*"}})
	e.addDest(destination.Destination{Name: "audit", URL: audit.URL, Types: []string{">"}})
	types, err := eventtype.Open(context.Background(), e.js, nil)
	require.NoError(t, err)
	_, _, err = types.Put(context.Background(), eventtype.EventType{Type: "order.created",
		Schema: json.RawMessage(`{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`)})
	require.NoError(t, err)
	rec, _ := e.startRelay() // loads the catalog as it starts

	good := e.publishType("order.created", "", `{"id":"o-1"}`).ID
	bad := e.publishType("order.created", "", `{"id":7}`).ID
	unchecked := e.publishType("order.paid", "", `{"id":7}`).ID
	rec.wait(t, 2, func(o relay.Outcome) bool { return o.EventID == bad && o.Decision.Reason == relay.ReasonSchemaMismatch },
		"the mismatched event dead-lettered for both subscribers")
	eventually(t, time.Minute, func() bool {
		return crm.delivered()[good] == 1 && audit.delivered()[good] == 1 && crm.delivered()[unchecked] == 1
	}, "the others delivered")
	require.Zero(t, crm.delivered()[bad])
	require.Zero(t, audit.delivered()[bad])
	for _, dest := range []string{"crm", "audit"} {
		ls := e.deadLetters(dest)
		require.Len(t, ls, 1, dest)
		require.Equal(t, relay.ReasonSchemaMismatch, ls[0].Reason)
		require.Equal(t, bad, ls[0].EventID)
		require.Contains(t, ls[0].Note, "/id", "the note names the value at fault")
		require.Zero(t, ls[0].Attempts)
	}
}
