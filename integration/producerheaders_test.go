package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// A producer with a plain NATS client, allowed relay.in.> only, publishes
// events carrying the headers relay's own republishes carry: an attempt
// count past any policy, an origin, a publish time, a wait of centuries
// and a type. relay reads them as a producer's and drops them: each event
// is delivered at its first attempt, now, untyped, to a destination with
// a consumer of its own and to a shared one.
func TestProducerCannotSetRelaysHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "own", URL: s.URL + "/own", BodyTemplate: `type={{.Type}} time={{.Time.Format "2006"}}`, BodyContentType: "text/plain"})
	e.addDest(destination.Destination{Name: "shared", URL: s.URL + "/shared", Shared: true})
	rec, _ := e.startRelay()

	for _, dest := range []string{"own", "shared"} {
		m := nats.NewMsg(stream.InSubject(dest, ""))
		m.Data = []byte(`{"n":1}`)
		m.Header.Set("Nats-Msg-Id", "forged-"+dest)
		m.Header.Set("Relay-Attempt", "999999")
		m.Header.Set("Relay-Origin-Seq", "1")
		m.Header.Set("Relay-Published", "2000-01-01T00:00:00Z")
		m.Header.Set("Relay-Not-Before", "2999-01-01T00:00:00Z")
		m.Header.Set("Relay-Event-Type", "order.paid")
		m.Header.Set("Relay-Seal", "not-a-seal")
		_, err := e.js.PublishMsg(context.Background(), m)
		require.NoError(t, err)
	}

	for _, dest := range []string{"own", "shared"} {
		rec.wait(t, 1, func(o relay.Outcome) bool { return o.Dest == dest }, "an outcome for %s", dest)
		rec.mu.Lock()
		all := append([]relay.Outcome(nil), rec.all...)
		rec.mu.Unlock()
		for _, o := range all {
			if o.Dest == dest {
				require.Equal(t, relay.Ack, o.Decision.Action, "%s: delivered, not %v (%s)", dest, o.Decision.Action, o.Decision.Reason)
				require.Equal(t, 1, o.Attempt, "%s: the first attempt", dest)
			}
		}
	}
	require.Equal(t, map[string]int{"forged-own": 1, "forged-shared": 1}, s.delivered())
	require.Empty(t, e.deadLetters("own"))
	require.Empty(t, e.deadLetters("shared"))
	year := time.Now().UTC().Format("2006")
	for _, h := range s.all() {
		require.Empty(t, h.Header.Get("Relay-Event-Type"), "not typed: %s", h.ID)
		if strings.HasSuffix(h.ID, "own") {
			require.Equal(t, "type= time="+year, h.Body, "the template sees no type and the time it was stored")
		}
		require.Equal(t, http.StatusOK, h.Status)
	}
}
