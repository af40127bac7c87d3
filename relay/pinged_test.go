package relay

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream/streamtest"
)

// saidMsg records what relay tells JetStream of an event.
type saidMsg struct {
	jetstream.Msg
	said []string
}

func (m *saidMsg) InProgress() error                { m.said = append(m.said, "+WPI"); return nil }
func (m *saidMsg) Ack() error                       { m.said = append(m.said, "+ACK"); return nil }
func (m *saidMsg) NakWithDelay(time.Duration) error { m.said = append(m.said, "-NAK"); return nil }
func (m *saidMsg) HandBack(bool) error              { m.said = append(m.said, "-NAK"); return nil }

// TestPingedStopsAtItsSettlement: a held event is pinged until a worker
// acts on it, never after (an in-progress ack after a nak would turn the
// nak's delay into AckWait), and it knows the longest the server went
// without hearing of it.
func TestPingedStopsAtItsSettlement(t *testing.T) {
	t.Parallel()
	m := &saidMsg{}
	t0 := time.Unix(1000, 0)
	p := &pinged{delivered: settles(m), last: t0}
	p.ping(t0.Add(10*time.Second), true)
	p.ping(t0.Add(14*time.Second), true)
	require.Equal(t, 10*time.Second, p.unheard(t0.Add(15*time.Second)), "the longest gap: arrival to the first ping")
	require.Equal(t, 20*time.Second, p.unheard(t0.Add(34*time.Second)), "the gap since the last ping, once longer")
	// Cut off from the server: nothing sent, and the silence goes on.
	p.ping(t0.Add(24*time.Second), false)
	require.Equal(t, 20*time.Second, p.unheard(t0.Add(34*time.Second)), "a ping while disconnected is not heard")
	require.NoError(t, p.Redeliver(time.Second))
	p.ping(t0.Add(40*time.Second), true)
	require.Equal(t, []string{"+WPI", "+WPI", "-NAK"}, m.said)
}

// TestLateIsAboutSilenceNotDuration: an attempt longer than AckWait is late
// only if the server heard nothing of the event for AckWait meanwhile.
func TestLateIsAboutSilenceNotDuration(t *testing.T) {
	t.Parallel()
	const ackWait = 30 * time.Second
	long := Result{Duration: time.Minute}
	pingedNow := &pinged{delivered: settles(&saidMsg{}), last: time.Now()}
	require.False(t, late(pingedNow, long, ackWait), "pinged all along")
	silent := &pinged{delivered: settles(&saidMsg{}), last: time.Now().Add(-ackWait)}
	require.True(t, late(silent, Result{Duration: time.Second}, ackWait), "nothing heard for AckWait")
	stopped := &pinged{delivered: settles(&saidMsg{}), last: time.Now().Add(-time.Minute)}
	stopped.ping(time.Now(), true) // pinged again once resumed: the gap stays
	require.True(t, late(stopped, long, ackWait))
	// A message relay does not ping: the attempt's duration stands in.
	require.True(t, late(settles(&saidMsg{}), long, ackWait))
	require.False(t, late(settles(&saidMsg{}), Result{Duration: time.Second}, ackWait))
}

func TestConfigAckWait(t *testing.T) {
	t.Parallel()
	cfg := Config{JS: streamtest.Start(t).JS}.WithDefaults()
	require.Equal(t, destination.DefaultAckWait, cfg.AckWait)
	for _, bad := range []time.Duration{time.Second, 11 * time.Minute} {
		c := cfg
		c.AckWait = bad
		err := c.Validate()
		require.Error(t, err, "%s", bad)
		require.Contains(t, err.Error(), "AckWait")
	}
	require.NoError(t, cfg.Validate())
}
