package stream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestAckMetadataReadsBothLayouts(t *testing.T) {
	ts := time.Date(2026, 12, 1, 5, 0, 0, 123, time.UTC)
	ns := "1796101200000000123"
	require.Equal(t, ts.UnixNano(), int64(1796101200000000123))
	want := &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Stream: 42, Consumer: 17},
		NumDelivered: 3, NumPending: 5, Timestamp: time.Unix(0, ts.UnixNano()),
		Stream: "RELAY_EVENTS", Consumer: "relay_x",
	}
	got, err := AckMetadata("$JS.ACK.RELAY_EVENTS.relay_x.3.42.17." + ns + ".5")
	require.NoError(t, err)
	require.Equal(t, want, got)

	got, err = AckMetadata("$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_x.3.42.17." + ns + ".5.tok")
	require.NoError(t, err)
	require.Equal(t, want, got, "v2 without a domain")

	withDomain := *want
	withDomain.Domain = "hub"
	got, err = AckMetadata("$JS.ACK.hub.ACCHASH.RELAY_EVENTS.relay_x.3.42.17." + ns + ".5")
	require.NoError(t, err)
	require.Equal(t, &withDomain, got, "v2 with a domain, without the random token")

	for _, bad := range []string{
		"", "_INBOX.x", "$JS.ACK.RELAY_EVENTS.relay_x.3.42.17." + ns,
		"$JS.ACK.RELAY_EVENTS.relay_x.3.-42.17." + ns + ".5",
		"$JS.ACK.RELAY_EVENTS.relay_x.3.42.17.99999999999999999999.5",
		"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l",
	} {
		_, err := AckMetadata(bad)
		require.ErrorIs(t, err, jetstream.ErrNotJSMessage, "%q", bad)
	}
}

func TestAckMetadataAgreesWithNatsGo(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.RELAY_EVENTS.relay_a.1.42.40.1764500000123456789.7",
		"$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_a.2.42.40.1764500000123456789.7",
		"$JS.ACK.hub.ACCHASH.RELAY_EVENTS.relay_a_P3.1.9.9.1764500000000000000.0.tok",
		"$JS.ACK.D.H.S.C.1.42.40.1764500000123456789.7.tok.extra",
	} {
		want, err := (&nats.Msg{Subject: "relay.in.a", Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		require.NoError(t, err, reply)
		got, err := AckMetadata(reply)
		require.NoError(t, err, reply)
		require.Equal(t, want.Sequence.Stream, got.Sequence.Stream, reply)
		require.Equal(t, want.Sequence.Consumer, got.Sequence.Consumer, reply)
		require.Equal(t, want.NumDelivered, got.NumDelivered, reply)
		require.Equal(t, want.NumPending, got.NumPending, reply)
		require.True(t, want.Timestamp.Equal(got.Timestamp), reply)
		require.Equal(t, want.Stream, got.Stream, reply)
		require.Equal(t, want.Consumer, got.Consumer, reply)
		require.Equal(t, want.Domain, got.Domain, reply)
	}
}
