package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream/streamtest"
)

// testClock is a clock a test sets.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// pausedGauge is the relay_destination_paused value c exports for dest.
func pausedGauge(t *testing.T, c *StateCollector, dest string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "relay_destination_paused" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "dest" && l.GetValue() == dest {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no relay_destination_paused for %s", dest)
	return 0
}

// The injected clock decides a destination's state in stats and in the
// paused gauge: paused until its pause ends, active after.
func TestStatsStateFollowsTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	until := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	_, err = st.Add(ctx, destination.Destination{Name: "orders", URL: "https://example.test/hook"})
	require.NoError(t, err)
	_, err = st.Update(ctx, "orders", func(d *destination.Destination) error {
		d.PausedUntil, d.PauseReason = until, destination.PauseOperator
		return nil
	})
	require.NoError(t, err)

	clock := &testClock{t: until.Add(-time.Second)}
	c := NewStateCollector(js, nil)
	c.now = clock.Now

	all, err := stats(ctx, js, nil, clock.Now)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, destination.PauseOperator, all[0].State, "before its pause ends")
	require.True(t, until.Equal(all[0].PausedUntil))
	require.Equal(t, 1.0, pausedGauge(t, c, "orders"))

	clock.Set(until)
	all, err = stats(ctx, js, nil, clock.Now)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, destination.StateActive, all[0].State, "once its pause ended")
	require.True(t, all[0].PausedUntil.IsZero(), "an active destination shows no pause")
	require.Equal(t, 0.0, pausedGauge(t, c, "orders"))
}

// A log replay without an end replays up to the clock's now: an event
// stored after it is left out.
func TestLogReplayEndsAtTheClocksNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "orders", URL: "https://example.test/hook"})
	require.NoError(t, err)
	p, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	pub, err := p.Publish(ctx, publish.Event{Dest: "orders", ID: "evt-1", Data: []byte(`{}`)})
	require.NoError(t, err)
	s, err := js.Stream(ctx, pub.Stream)
	require.NoError(t, err)
	raw, err := s.GetMsg(ctx, pub.Seq)
	require.NoError(t, err)
	stored := raw.Time

	r := deliverylog.LogReplay{Dest: "orders", Since: stored.Add(-time.Hour)}
	n, err := deliverylog.ReplayAt(ctx, js, r, true, nil, func() time.Time { return stored })
	require.NoError(t, err)
	require.Zero(t, n, "stored at the clock's now: after the end")

	var ids []string
	n, err = deliverylog.ReplayAt(ctx, js, r, true, func(ev deliverylog.ReplayedEvent) error { ids = append(ids, ev.ID); return nil },
		func() time.Time { return stored.Add(time.Millisecond) })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"evt-1"}, ids)
}
