package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/opevent"
)

// A dead letter replayed with the CLI is told to an operations destination
// (relay.replay.finished), with what the replay did; the operations
// destination gets the replay's event like any typed event.
func TestReplayFinishedIsAnOperatorEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var reject atomic.Bool
	reject.Store(true)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if reject.Load() && strings.Contains(h.Body, "refuse") {
			w.WriteHeader(400)
			return 400
		}
		w.WriteHeader(200)
		return 200
	})
	e.addDest(destination.Destination{Name: "ops", URL: s.URL + "/ops", Types: []string{"relay.replay.*"}})
	e.addDest(destination.Destination{Name: "shop", URL: s.URL + "/shop", Retry: fast(2)})
	e.startRelay()
	e.publish("shop", "", `{"refuse":true}`)
	eventually(t, 30*time.Second, func() bool { return len(e.deadLetters("shop")) == 1 }, "dead-lettered")
	reject.Store(false)
	code, out := e.relayCLI("dlq", "replay", "--dest", "shop")
	require.Equal(t, 0, code, out)

	var body map[string]any
	eventually(t, 30*time.Second, func() bool {
		for _, h := range s.all() {
			if h.Header.Get("Relay-Event-Type") == opevent.ReplayFinished {
				require.NoError(t, json.Unmarshal([]byte(h.Body), &body))
				require.True(t, strings.HasPrefix(h.ID, opevent.ReplayFinished+":"), h.ID)
				return true
			}
		}
		return false
	}, "relay.replay.finished delivered to ops")
	require.Equal(t, "relay dlq replay", body["by"])
	require.Equal(t, "shop", body["dest"])
	require.Equal(t, float64(1), body["replayed"])
	require.Equal(t, float64(1), body["matched"])
}
