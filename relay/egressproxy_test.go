package relay

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/opevent"
)

// The egress proxy's failures are logged once a minute, and told in
// relay.egress.proxy_failing once they have lasted a minute, then every
// 10 minutes while they last; a tunnel granted between two failures
// starts a new run.
func TestProxyFailuresAreToldOnceTheyLast(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	now := t0
	var logs bytes.Buffer
	r := &Relay{cfg: Config{Now: func() time.Time { return now }}, log: slog.New(slog.NewTextHandler(&logs, nil)), ops: make(chan opevent.Event, 10)}
	fail := func(at time.Duration, lastTunnel time.Time) (logged bool, told *opevent.ProxyFailingBody, id string) {
		now = t0.Add(at)
		before := logs.Len()
		r.proxyFailed(fmt.Errorf("Post %q: %w", "https://hooks.example.com", &egress.ProxyError{Proxy: "10.0.0.9:3128", Err: errors.New("connection refused"), LastTunnel: lastTunnel}))
		select {
		case ev := <-r.ops:
			require.Equal(t, opevent.ProxyFailing, ev.Type)
			b := ev.Data.(opevent.ProxyFailingBody)
			told, id = &b, ev.ID
		default:
		}
		return logs.Len() > before, told, id
	}
	logged, told, _ := fail(0, time.Time{})
	require.True(t, logged)
	require.Nil(t, told, "not told before it lasts a minute")
	logged, told, _ = fail(30*time.Second, time.Time{})
	require.False(t, logged, "a line a minute")
	require.Nil(t, told)
	logged, told, first := fail(61*time.Second, time.Time{})
	require.True(t, logged)
	require.Contains(t, logs.String(), "not_logged=1")
	require.Equal(t, &opevent.ProxyFailingBody{At: t0.Add(61 * time.Second), Proxy: "10.0.0.9:3128", Since: t0, Failures: 3,
		LastError: "egress proxy 10.0.0.9:3128: connection refused"}, told)
	_, told, _ = fail(5*time.Minute, time.Time{})
	require.Nil(t, told, "told again only after 10 minutes")
	_, told, second := fail(11*time.Minute+2*time.Second, time.Time{})
	require.NotNil(t, told)
	require.Equal(t, 5, told.Failures)
	require.NotEqual(t, first, second)

	// The proxy granted a tunnel since: a new run, not told at once.
	_, told, _ = fail(12*time.Minute, t0.Add(11*time.Minute+30*time.Second))
	require.Nil(t, told)
	_, told, _ = fail(13*time.Minute+time.Second, t0.Add(11*time.Minute+30*time.Second))
	require.NotNil(t, told)
	require.Equal(t, t0.Add(12*time.Minute), told.Since)
	require.Equal(t, 2, told.Failures)
}
