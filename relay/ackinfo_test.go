package relay

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// metadataOf asks nats.go, the reference, for the metadata in an ack subject
// (the reply subject of a message a JetStream consumer delivered).
func metadataOf(reply string) (*nats.MsgMetadata, error) {
	return (&nats.Msg{Subject: "relay.ev.a.0", Reply: reply, Sub: &nats.Subscription{}}).Metadata()
}

func TestParseAckReplyAgreesWithNatsGo(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.RELAY_EVENTS.relay_a.1.42.40.1764500000123456789.7",
		"$JS.ACK.RELAY_EVENTS.relay_a.3.18446744073709551615.1.1764500000123456789.0",
		"$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_a.2.42.40.1764500000123456789.7",
		"$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_a.2.42.40.1764500000123456789.7.RANDOM",
		"$JS.ACK.hub.ACCHASH.RELAY_EVENTS.relay_a_P3.1.9.9.1764500000000000000.0.tok",
		"$JS.ACK.D.H.S.C.1.42.40.1764500000123456789.7.tok.extra", // 13 tokens: later ones ignored
	} {
		want, err := metadataOf(reply)
		require.NoError(t, err, reply)
		got, ok := parseAckReply(reply)
		require.True(t, ok, reply)
		require.Equal(t, want.Sequence.Stream, got.streamSeq, reply)
		require.Equal(t, want.NumDelivered, got.delivered, reply)
		require.True(t, want.Timestamp.Equal(got.stored), reply)
		require.Equal(t, want.NumPending, got.pending, reply)
		require.Equal(t, want.Sequence.Consumer, got.consSeq, reply)
	}
}

func TestParseAckReplyRefusesOtherSubjects(t *testing.T) {
	for _, reply := range []string{
		"",
		"_INBOX.abc",
		"$JS.ACK.RELAY_EVENTS.relay_a.1.42.40.1764500000123456789",       // 8 tokens
		"$JS.ACK.D.H.RELAY_EVENTS.relay_a.1.42.40.1764500000123456789",   // 10 tokens
		"$JS.ACK.RELAY_EVENTS.relay_a.x.42.40.1764500000123456789.7",     // delivered not a number
		"$JS.ACK.RELAY_EVENTS.relay_a.1.-42.40.1764500000123456789.7",    // negative sequence
		"$JS.ACK.RELAY_EVENTS.relay_a.1.42.40.17645000001234567890000.7", // timestamp overflows
		"$JS.ACK.RELAY_EVENTS.relay_a.1.42.40.1764500000123456789.x",     // pending not a number
	} {
		_, ok := parseAckReply(reply)
		require.False(t, ok, reply)
	}
}

func FuzzParseAckReply(f *testing.F) {
	f.Add("$JS.ACK.RELAY_EVENTS.relay_a.1.42.40.1764500000123456789.7")
	f.Add("$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_a.2.42.40.1764500000123456789.7.RANDOM")
	f.Fuzz(func(t *testing.T, reply string) {
		got, ok := parseAckReply(reply)
		if !ok {
			return
		}
		want, err := metadataOf(reply)
		if err != nil {
			t.Fatalf("parseAckReply accepted %q, nats.go refuses it: %v", reply, err)
		}
		if want.Sequence.Stream != got.streamSeq || want.NumDelivered != got.delivered || !want.Timestamp.Equal(got.stored) || want.NumPending != got.pending || want.Sequence.Consumer != got.consSeq {
			t.Fatalf("%q: got %+v, nats.go says %+v", reply, got, want)
		}
	})
}
