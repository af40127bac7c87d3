package relay

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream/streamtest"
)

// lockedBuffer is a log destination the test reads while relay writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lineWith returns the first log line containing s, or "".
func (l *lockedBuffer) lineWith(s string) string {
	for line := range strings.Lines(l.String()) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// A running relay logs, at INFO, each destination added, changed (naming
// the settings that changed) and removed, never a secret or header value.
func TestDestinationChangesAreLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	// One before the start: loaded, not reported as added.
	_, err = st.Add(ctx, destination.Destination{Name: "early", URL: "https://example.test/early"})
	require.NoError(t, err)

	var logs lockedBuffer
	rctx, cancel := context.WithCancel(ctx)
	r, err := New(rctx, Config{JS: js, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	r.signals.Init(t)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	r.signals.Running.WaitOrTimeout()
	require.NotEmpty(t, logs.lineWith("relay running"))

	const secret = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"
	_, err = st.Add(ctx, destination.Destination{Name: "orders", URL: "https://example.test/hook?token=tok-123", Secret: secret,
		Headers: map[string]string{"Authorization": "Bearer hdr-value-1"}})
	require.NoError(t, err)
	require.Equal(t, "orders", r.signals.DestApplied.WaitOrTimeout())
	added := logs.lineWith("destination added")
	require.NotEmpty(t, added)
	require.Contains(t, added, "level=INFO")
	require.Contains(t, added, "dest=orders")
	require.Contains(t, added, "token=xxxxx", "the URL as printed everywhere: query values hidden")

	_, err = st.Update(ctx, "orders", func(d *destination.Destination) error {
		d.Timeout = destination.Duration(5 * time.Second)
		d.Headers = map[string]string{"Authorization": "Bearer hdr-value-2"}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "orders", r.signals.DestApplied.WaitOrTimeout())
	changed := logs.lineWith("destination changed")
	require.NotEmpty(t, changed)
	require.Contains(t, changed, "level=INFO")
	require.Contains(t, changed, "dest=orders")
	require.Contains(t, changed, "changed=headers,timeout")

	require.NoError(t, st.Remove(ctx, "orders"))
	require.Equal(t, "orders", r.signals.DestApplied.WaitOrTimeout())
	require.Contains(t, logs.lineWith("destination removed"), "dest=orders")

	all := logs.String()
	require.NotContains(t, logs.lineWith("destination added"), "early")
	for _, secretText := range []string{secret, "hdr-value", "tok-123"} {
		require.NotContains(t, all, secretText)
	}
}

// A dead letter is logged at WARN: it needs someone's attention, and so
// does a failure to act on any outcome. A delivery is not logged at INFO
// (the delivery log has every attempt): the minute's summary per
// destination counts it. Retries are logged at INFO once per destination
// every 10s, the next line saying how many were left out.
func TestDeadLettersAreLoggedAtWarn(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	r, err := New(context.Background(), Config{JS: streamtest.Start(t).JS, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	r.logOutcome(Outcome{Dest: "d", EventID: "dead", Attempt: 15, Result: Result{Status: 500}, Decision: Decision{Action: DeadLetter, Reason: "max_attempts"}})
	r.logOutcome(Outcome{Dest: "d", EventID: "fine", Attempt: 1, Result: Result{Status: 200}, Decision: Decision{Action: Ack}})
	r.logOutcome(Outcome{Dest: "d", EventID: "stuck", Attempt: 1, Result: Result{Status: 200}, Decision: Decision{Action: Ack}, Err: errors.New("ack failed")})
	require.Contains(t, logs.lineWith("event_id=dead"), "level=WARN")
	require.Contains(t, logs.lineWith("event_id=dead"), "reason=max_attempts")
	require.NotContains(t, logs.String(), "event_id=fine", "a delivery is no INFO line")
	require.Contains(t, logs.lineWith("event_id=stuck"), "level=WARN")
	require.Contains(t, logs.lineWith("event_id=stuck"), "act_error=")

	now := time.Now()
	r.cfg.Now = func() time.Time { return now }
	retry := func(dest, id string) {
		r.logOutcome(Outcome{Dest: dest, EventID: id, Attempt: 1, Result: Result{Status: 503}, Decision: Decision{Action: Retry, Delay: time.Second}})
	}
	retry("d", "r1")
	retry("d", "r2")
	retry("d", "r3")
	retry("other", "o1")
	require.Contains(t, logs.lineWith("event_id=r1"), "level=INFO")
	require.NotContains(t, logs.String(), "event_id=r2")
	require.Contains(t, logs.lineWith("event_id=o1"), "level=INFO", "destinations apart")
	now = now.Add(retryLogEvery)
	retry("d", "r4")
	require.Contains(t, logs.lineWith("event_id=r4"), "retries_not_logged=2")

	// The summary: one line per destination with outcomes, at stop (or
	// every minute), then counting again.
	r.summary.flush(r.log, now, true)
	require.Contains(t, logs.lineWith(`msg=deliveries dest=d `), "delivered=2 retried=4 dead_lettered=1 filtered=0")
	require.Contains(t, logs.lineWith(`msg=deliveries dest=other `), "delivered=0 retried=1")
	before := strings.Count(logs.String(), "msg=deliveries")
	r.summary.flush(r.log, now.Add(summaryEvery), false)
	require.Equal(t, before, strings.Count(logs.String(), "msg=deliveries"), "nothing since: no line")
}
