package routing

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// The router runs with only what it needs (no counters, no callbacks):
// a typed event is copied to the destination subscribed to its type, and
// its progress is written where relay status reads it.
func TestRouterCopiesATypedEventToItsSubscriber(t *testing.T) {
	srv := streamtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := destination.NewStore(ctx, srv.JS)
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "orders", URL: "https://example.test/hook", Types: []string{"order.*"}})
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "audit", URL: "https://example.test/audit", Types: []string{"invoice.*"}})
	require.NoError(t, err)

	// The engine's live copy, fed as relay feeds it.
	w := destination.NewWatch()
	kw, err := st.WatchAll(ctx)
	require.NoError(t, err)
	go func() {
		for e := range kw.Updates() {
			if e != nil {
				_, _ = w.Apply(st, e)
			}
		}
	}()

	p, err := publish.NewProducer(ctx, srv.JS)
	require.NoError(t, err)
	pub, err := p.Publish(ctx, publish.Event{Type: "order.created", ID: "evt-1", Data: []byte(`{"n":1}`)})
	require.NoError(t, err)

	done := make(chan struct{})
	states := make(chan State, 64)
	go func() {
		defer close(done)
		RunRouter(ctx, RouterConfig{JS: srv.JS, ID: "r-1", Store: st, Dests: w, Log: slog.New(slog.DiscardHandler), Now: time.Now,
			Takeover: time.Minute, Written: func(s State) {
				select {
				case states <- s:
				default:
				}
			}})
	}()
	deadline := time.After(time.Minute)
	for routed := false; !routed; {
		select {
		case s := <-states:
			routed = s.Routed >= pub.Seq && s.Events == 1 && s.Copies == 1
		case <-deadline:
			t.Fatal("the router did not record the event routed within a minute")
		}
	}

	// The copy is on orders' subject, and nothing on audit's.
	events, err := srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	m, err := events.GetLastMsgForSubject(ctx, stream.InSubject("orders", ""))
	require.NoError(t, err)
	ev, err := stream.Decode(m.Subject, m.Sequence, m.Time, m.Header, m.Data, nil)
	require.NoError(t, err)
	require.Equal(t, "evt-1", ev.ID)
	require.JSONEq(t, `{"n":1}`, string(ev.Body))
	_, err = events.GetLastMsgForSubject(ctx, stream.InSubject("audit", ""))
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)

	got, ok, err := ReadState(ctx, srv.JS)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(1), got.Events)
	cancel()
	<-done
}
