package stream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// fullLetter has every field set, and event headers of its own beside
// contract headers that a letter must not carry over.
func fullLetter() LetterEnvelope {
	return LetterEnvelope{
		EventID:        "evt-1",
		Dest:           "orders",
		Reason:         "max_attempts",
		Attempts:       5,
		LastStatus:     503,
		LastError:      "HTTP 503",
		Note:           "why",
		First:          time.Date(2025, 3, 1, 12, 0, 0, 5, time.FixedZone("X", 3600)),
		Last:           time.Date(2025, 3, 1, 12, 5, 0, 0, time.UTC),
		Key:            "customer 42",
		Type:           "order.paid",
		Subject:        "relay.ev.orders.3",
		Seq:            77,
		DeadAt:         time.Date(2025, 3, 1, 12, 6, 0, 0, time.UTC),
		History:        `[{"n":1}]`,
		HistoryOmitted: 2,
		Headers: nats.Header{
			"X-Trace":       {"a", "b"},
			"Relay-Attempt": {"9"},
			"Nats-Msg-Id":   {"old"},
		},
		Body: []byte(`{"n":1}`),
	}
}

// TestLetterEnvelopeHeader pins a dead letter's message: relay's
// dead-letter headers, the event's own (not its contract headers) and
// body, or in their place Relay-Event-Omitted.
func TestLetterEnvelopeHeader(t *testing.T) {
	t.Parallel()
	l := fullLetter()
	m := l.Msg()
	require.Equal(t, "relay.dlq.orders", m.Subject)
	require.Equal(t, []byte(`{"n":1}`), m.Data)
	relays := nats.Header{
		"Nats-Msg-Id":           {"dlq:orders:77"},
		"Relay-Event-Id":        {"evt-1"},
		"Relay-Destination":     {"orders"},
		"Relay-Reason":          {"max_attempts"},
		"Relay-Attempts":        {"5"},
		"Relay-Last-Status":     {"503"},
		"Relay-Last-Error":      {"HTTP 503"},
		"Relay-Note":            {"why"},
		"Relay-First-Attempt":   {"2025-03-01T11:00:00.000000005Z"},
		"Relay-Last-Attempt":    {"2025-03-01T12:05:00Z"},
		"Relay-Order-Key":       {"customer 42"},
		"Relay-Event-Type":      {"order.paid"},
		"Relay-Subject":         {"relay.ev.orders.3"},
		"Relay-Seq":             {"77"},
		"Relay-Dead-At":         {"2025-03-01T12:06:00Z"},
		"Relay-History":         {`[{"n":1}]`},
		"Relay-History-Omitted": {"2"},
	}
	want := nats.Header{"X-Trace": {"a", "b"}}
	for k, vs := range relays {
		want[k] = vs
	}
	require.Equal(t, want, m.Header)
	size := len("NATS/1.0\r\n\r\n") + len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			size += len(k) + len(": \r\n") + len(v)
		}
	}
	require.Equal(t, size, l.Size())

	l.EventOmitted = true
	m = l.Msg()
	require.Nil(t, m.Data)
	relays["Relay-Event-Omitted"] = []string{"true"}
	require.Equal(t, relays, m.Header)
	require.Less(t, l.Size(), size)

	// What is not set is not written; Dedup replaces the dedup id.
	m = LetterEnvelope{Dest: "orders", Dedup: "parked:x"}.Msg()
	require.Equal(t, nats.Header{
		"Nats-Msg-Id": {"parked:x"}, "Relay-Event-Id": {""}, "Relay-Destination": {"orders"}, "Relay-Reason": {""},
		"Relay-Attempts": {"0"}, "Relay-Last-Status": {"0"}, "Relay-Subject": {""}, "Relay-Seq": {"0"},
		"Relay-Dead-At": {"0001-01-01T00:00:00Z"},
	}, m.Header)
}

// TestDecodeLetterRoundTrip: DecodeLetter reads back what Msg wrote, the
// event's own headers only, whether it carries the event or not.
func TestDecodeLetterRoundTrip(t *testing.T) {
	t.Parallel()
	for _, omitted := range []bool{false, true} {
		l := fullLetter()
		l.EventOmitted = omitted
		m := l.Msg()
		got, err := DecodeLetter(9, m.Subject, m.Header, m.Data)
		require.NoError(t, err)
		want := l
		want.First, want.Last = l.First.UTC(), l.Last.UTC()
		want.Headers = nats.Header{"X-Trace": {"a", "b"}}
		if omitted {
			want.Headers, want.Body = nats.Header{}, nil
		}
		require.Equal(t, want, got)
	}
	l := fullLetter()
	l.Dedup = "parked:x"
	m := l.Msg()
	got, err := DecodeLetter(9, m.Subject, m.Header, m.Data)
	require.NoError(t, err)
	require.Equal(t, "parked:x", got.Dedup)
	require.Equal(t, "parked:x", got.MsgID())

	var hist []map[string]int
	require.NoError(t, got.DecodeHistory(&hist))
	require.Equal(t, []map[string]int{{"n": 1}}, hist)
	got.History = `{"n":1}`
	require.ErrorContains(t, got.DecodeHistory(&hist), "bad Relay-History header")
}

// TestDecodeLetterWithoutDestination: a message without Relay-Destination
// is no letter of relay's; what it carries is read all the same.
func TestDecodeLetterWithoutDestination(t *testing.T) {
	t.Parallel()
	h := fullLetter().Header()
	h.Del(HdrDest)
	got, err := DecodeLetter(9, "relay.dlq.orders", h, nil)
	require.EqualError(t, err, "dead letter 9 (relay.dlq.orders) has no Relay-Destination header")
	require.Equal(t, "max_attempts", got.Reason)
	require.Equal(t, "evt-1", got.EventID)
	require.Equal(t, "order.paid", got.Type)

	got, err = DecodeLetter(9, "relay.dlq.orders", nil, nil)
	require.Error(t, err)
	require.Equal(t, 0, got.Attempts)
	require.True(t, got.DeadAt.IsZero())
}
