package relay

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/internal/quiet"
	"github.com/relaydev/relay/stream"
)

// A producer's event carrying relay's headers is read without them (no
// attempts made, its own sequence as origin, its stored time, untyped),
// and said so in one warning per destination a minute; relay's own copy,
// sealed, is read with them and without a warning.
func TestEventOfDropsAProducersRelayHeaders(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	seal, err := stream.NewSeal(bytes.Repeat([]byte{7}, stream.MinSealKey))
	require.NoError(t, err)
	r := &Relay{seal: seal, log: slog.New(slog.NewTextHandler(&logs, nil)), cfg: Config{Now: func() time.Time { return now }},
		unsealedWarn: quiet.Limiter{Interval: time.Minute}}
	reply := "$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_orders.1.123456.120000.1764500000123456789.42.tok"
	forged := benchMsg{subject: "relay.in.orders", reply: reply, hdr: nats.Header{
		stream.HdrMsgID: {"evt-1"}, stream.HdrAttempt: {"999999"}, stream.HdrOrigin: {"3"},
		stream.HdrPublished: {"2000-01-01T00:00:00Z"}, stream.HdrType: {"order.paid"}, "X-Own": {"x"},
	}}
	warnings := func() int {
		return strings.Count(logs.String(), "relay's headers on an event relay did not publish were dropped")
	}

	ev, err := r.eventOf(forged)
	require.NoError(t, err)
	require.Zero(t, ev.prior)
	require.Equal(t, ev.seq, ev.origin)
	require.Equal(t, ev.stored, ev.published)
	require.Empty(t, ev.hdr.Get(stream.HdrType))
	require.Equal(t, nats.Header{stream.HdrMsgID: {"evt-1"}, "X-Own": {"x"}}, ev.hdr)
	require.Equal(t, 1, warnings())
	require.Contains(t, logs.String(), "dest=orders event_id=evt-1 seq=123456")

	_, err = r.eventOf(forged)
	require.NoError(t, err)
	require.Equal(t, 1, warnings(), "one warning a minute per destination")
	now = now.Add(time.Minute)
	_, err = r.eventOf(forged)
	require.NoError(t, err)
	require.Equal(t, 2, warnings())
	require.Contains(t, logs.String(), "held_back=1")

	copied := stream.Envelope{ID: "evt-1", Type: "order.paid", Attempt: 4, Origin: 3, Published: time.Unix(1_600_000_000, 0), Headers: nats.Header{"X-Own": {"x"}}}
	sealed := benchMsg{subject: "relay.in.orders", reply: reply, hdr: copied.Header(stream.Promoted, seal)}
	ev, err = r.eventOf(sealed)
	require.NoError(t, err)
	require.Equal(t, 4, ev.prior)
	require.Equal(t, uint64(3), ev.origin)
	require.True(t, copied.Published.Equal(ev.published))
	require.Equal(t, "order.paid", ev.hdr.Get(stream.HdrType))
	require.Equal(t, 2, warnings(), "relay's own copy is no producer's")
}
