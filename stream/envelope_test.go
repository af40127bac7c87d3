package stream

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// testSeal returns a seal with a fixed secret of n.
func testSeal(t testing.TB, n byte) *Seal {
	t.Helper()
	s, err := NewSeal(bytes.Repeat([]byte{n}, MinSealKey))
	require.NoError(t, err)
	return s
}

// fullEnvelope has every field set, and headers of its own beside contract
// headers that no publish may carry over.
func fullEnvelope() Envelope {
	return Envelope{
		ID:        "evt-1",
		Dest:      "orders",
		Key:       "customer 42",
		Attempt:   3,
		Origin:    10,
		Published: time.Date(2025, 3, 1, 12, 0, 0, 5, time.FixedZone("X", 3600)),
		Headers: nats.Header{
			"X-Trace":             {"a", "b"},
			"Content-Type":        {"application/json"},
			"Nats-Msg-Id":         {"old-dedup"},
			"Relay-Attempt":       {"9"},
			"relay-origin-seq":    {"4"},
			"Relay-Reason":        {"max_attempts"},
			"Relay-First-Attempt": {"2025-01-01T00:00:00Z"},
		},
		Body:   []byte(`{"n":1}`),
		Seq:    77,
		Copied: true,
	}
}

// TestEnvelopeHeaderTable pins the headers of every kind of publish: the
// event's own headers always, relay's as the Kind table says, and the dedup id.
func TestEnvelopeHeaderTable(t *testing.T) {
	t.Parallel()
	own := nats.Header{"X-Trace": {"a", "b"}, "Content-Type": {"application/json"}}
	with := func(kv ...string) nats.Header {
		h := nats.Header{}
		for k, vs := range own {
			h[k] = vs
		}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = []string{kv[i+1]}
		}
		return h
	}
	tests := []struct {
		kind  Kind
		msgID string
		want  nats.Header
	}{
		{Produced, "evt-1", with(HdrMsgID, "evt-1", HdrKey, "customer 42")},
		{Promoted, "park:evt-1:3@10", with(HdrMsgID, "park:evt-1:3@10", HdrKey, "customer 42", HdrEventID, "evt-1",
			HdrAttempt, "3", HdrOrigin, "10", HdrPublished, "2025-03-01T11:00:00.000000005Z")},
		{ReplayedDeadLetter, "replay:77", with(HdrMsgID, "replay:77", HdrKey, "customer 42", HdrEventID, "evt-1")},
		{ReplayedLog, "log:orders:77", with(HdrMsgID, "log:orders:77", HdrKey, "customer 42", HdrEventID, "evt-1")},
		{Routed, "route:77:orders", with(HdrMsgID, "route:77:orders", HdrKey, "customer 42", HdrEventID, "evt-1", HdrPublished, "2025-03-01T11:00:00.000000005Z")},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			e := fullEnvelope()
			require.Equal(t, tt.msgID, e.MsgID(tt.kind))
			require.Equal(t, tt.want, e.Header(tt.kind, nil))
			m := e.Msg(tt.kind, "relay.in.orders.k", nil)
			require.Equal(t, "relay.in.orders.k", m.Subject)
			require.Equal(t, tt.want, m.Header)
			require.Equal(t, []byte(`{"n":1}`), m.Data)
			require.Equal(t, fullEnvelope(), e, "encoding leaves the envelope as it was")
		})
	}
}

// TestEnvelopeHeaderLeavesUnsetFieldsOut: a key and publish time that are
// not set are not written; a promoted attempt is, even 0, and so is its
// origin, which also ends its dedup id.
func TestEnvelopeHeaderLeavesUnsetFieldsOut(t *testing.T) {
	t.Parallel()
	e := Envelope{ID: "evt-1", Seq: 5, Dest: "d", Origin: 3}
	require.Equal(t, nats.Header{HdrMsgID: {"evt-1"}}, e.Header(Produced, nil))
	scoped := e
	scoped.Dedup = "pub:0123"
	require.Equal(t, nats.Header{HdrMsgID: {"pub:0123"}, HdrEventID: {"evt-1"}}, scoped.Header(Produced, nil), "a scoped dedup id, the id beside it")
	require.Equal(t, nats.Header{HdrMsgID: {"park:evt-1:0@3"}, HdrEventID: {"evt-1"}, HdrAttempt: {"0"}, HdrOrigin: {"3"}}, e.Header(Promoted, nil))
	e.Attempt = 2
	require.Equal(t, "park:evt-1:2@3", e.MsgID(Promoted), "the origin ends the dedup id")
	require.Equal(t, nats.Header{HdrMsgID: {"replay:5"}, HdrEventID: {"evt-1"}}, e.Header(ReplayedDeadLetter, nil))
	require.Equal(t, nats.Header{HdrMsgID: {"log:d:5"}, HdrEventID: {"evt-1"}}, e.Header(ReplayedLog, nil))
}

// TestEnvelopeRoundTrip publishes an envelope as every kind and decodes the
// stored copy: a producer's publish and a promotion keep the event as it
// was; a replay keeps its id, key and own headers and starts its retry
// state again (no attempts, its own sequence as origin, published when
// stored).
func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	seal := testSeal(t, 1)
	stored := time.Date(2025, 3, 2, 8, 0, 0, 0, time.UTC)
	const newSeq = 500
	subject := KeyedSubject("orders", "customer 42")
	own := nats.Header{"X-Trace": {"a", "b"}, "Content-Type": {"application/json"}}
	for _, tt := range []struct {
		kind       Kind
		copied     bool
		attempt    int
		origin     uint64
		published  time.Time
		msgIDAfter string
	}{
		{Produced, false, 0, newSeq, stored, "evt-1"},
		{Promoted, true, 3, 10, fullEnvelope().Published, "park:evt-1:3@10"},
		{ReplayedDeadLetter, true, 0, newSeq, stored, "replay:77"},
		{ReplayedLog, true, 0, newSeq, stored, "log:orders:77"},
		// A typed event's copy is its destination's original.
		{Routed, false, 0, newSeq, fullEnvelope().Published, "route:77:orders"},
	} {
		t.Run(tt.kind.String(), func(t *testing.T) {
			in := fullEnvelope()
			if tt.kind == Produced {
				in.Attempt, in.Origin, in.Published = 0, 0, time.Time{}
			}
			m := in.Msg(tt.kind, "relay.in.orders."+KeyToken(in.Key), seal)
			require.Equal(t, tt.kind != Produced, m.Header.Get(HdrSeal) != "", "relay's publishes are sealed, a producer's not")
			out, err := Decode(subject, newSeq, stored, m.Header, m.Data, seal)
			require.NoError(t, err)
			require.Equal(t, "evt-1", out.ID)
			require.Equal(t, "orders", out.Dest)
			require.Equal(t, "customer 42", out.Key)
			require.Equal(t, tt.copied, out.Copied)
			require.Equal(t, tt.attempt, out.Attempt)
			require.Equal(t, tt.origin, out.Origin)
			require.True(t, tt.published.Equal(out.Published), "published %v, want %v", out.Published, tt.published)
			require.Equal(t, uint64(newSeq), out.Seq)
			require.Equal(t, stored, out.Stored)
			require.Equal(t, subject, out.Subject)
			require.Equal(t, own, OwnHeader(out.Headers))
			require.Nil(t, out.Unsealed)
			require.Equal(t, []byte(`{"n":1}`), out.Body)
			require.Equal(t, tt.msgIDAfter, out.Headers.Get(HdrMsgID))
			if tt.kind == Promoted {
				// A copy promoted again keeps its retry state and dedup id.
				require.Equal(t, m.Header, out.Header(Promoted, seal))
			}
		})
	}
}

// TestDecodeTable: what Decode reads from a message of relay's own (sealed).
func TestDecodeTable(t *testing.T) {
	t.Parallel()
	seal := testSeal(t, 1)
	stored := time.UnixMilli(1_700_000_000_123).UTC()
	pub := "2025-03-01T11:00:00.000000005Z"
	pubT, _ := time.Parse(time.RFC3339Nano, pub)
	tests := []struct {
		name      string
		h         nats.Header
		id        string
		copied    bool
		attempt   int
		origin    uint64
		published time.Time
		key       string
	}{
		{"no headers", nil, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"producer's id", nats.Header{HdrMsgID: {"p-1"}}, "p-1", false, 0, 42, stored, ""},
		{"relay's id wins", nats.Header{HdrMsgID: {"park:e:1"}, HdrEventID: {"e"}}, "e", true, 0, 42, stored, ""},
		{"a scoped dedup id", nats.Header{HdrMsgID: {"pub:0123abcd"}, HdrEventID: {"p-1"}}, "p-1", false, 0, 42, stored, ""},
		{"a producer's own dedup id", nats.Header{HdrMsgID: {"order-1@crm"}, HdrEventID: {"order-1"}}, "order-1", false, 0, 42, stored, ""},
		{"a replay's", nats.Header{HdrMsgID: {"replay:7"}, HdrEventID: {"e"}}, "e", true, 0, 42, stored, ""},
		{"a log replay's", nats.Header{HdrMsgID: {"log:orders:7"}, HdrEventID: {"e"}}, "e", true, 0, 42, stored, ""},
		{"a lane's", nats.Header{HdrMsgID: {"lane:7"}, HdrEventID: {"e"}}, "e", true, 0, 42, stored, ""},
		{"empty ids fall back", nats.Header{HdrMsgID: {""}, HdrEventID: {""}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"key", nats.Header{HdrKey: {"k 1"}}, "evt_42_loyw3v5n", false, 0, 42, stored, "k 1"},
		{"retry state", nats.Header{HdrAttempt: {"7"}, HdrOrigin: {"9"}, HdrPublished: {pub}}, "evt_42_loyw3v5n", false, 7, 9, pubT, ""},
		{"largest attempt", nats.Header{HdrAttempt: {"999999"}}, "evt_42_loyw3v5n", false, 999999, 42, stored, ""},
		{"attempt too large", nats.Header{HdrAttempt: {"1000000"}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"negative attempt", nats.Header{HdrAttempt: {"-1"}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"attempt not a number", nats.Header{HdrAttempt: {"x"}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"origin 0", nats.Header{HdrOrigin: {"0"}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"origin not a number", nats.Header{HdrOrigin: {"-3"}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"published not a time", nats.Header{HdrPublished: {"yesterday"}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
		{"names are case-sensitive", nats.Header{"relay-attempt": {"3"}, "nats-msg-id": {"x"}}, "evt_42_loyw3v5n", false, 0, 42, stored, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := nats.Header{}
			for k, vs := range tt.h {
				h[k] = vs
			}
			seal.seal(h)
			e, err := Decode("relay.in.orders", 42, stored, h, []byte("b"), seal)
			require.NoError(t, err)
			require.Nil(t, e.Unsealed)
			require.Equal(t, tt.id, e.ID)
			require.Equal(t, tt.copied, e.Copied)
			require.Equal(t, tt.attempt, e.Attempt)
			require.Equal(t, tt.origin, e.Origin)
			require.True(t, tt.published.Equal(e.Published), "published %v, want %v", e.Published, tt.published)
			require.Equal(t, tt.key, e.Key)
			require.Equal(t, "orders", e.Dest)
			require.Equal(t, []byte("b"), e.Body)
			require.Equal(t, h, e.Headers, "the stored headers are kept as they are")
		})
	}
	_, err := Decode("relay.dlq.orders.x.y.z", 1, stored, nil, nil, seal)
	require.ErrorContains(t, err, "not a relay event subject")
}

// TestDecodeDropsRelaysHeadersWithoutItsSeal: a message without relay's
// valid seal is a producer's, whatever its headers say: of relay's headers
// it keeps Relay-Event-Id and Relay-Order-Key, and the others (the
// attempts made, the origin, the publish time, the wait, the type, a
// fan-out's destinations, a seal that does not hold) are dropped, from
// Headers too, and named in Unsealed. Nothing it says makes it a copy.
func TestDecodeDropsRelaysHeadersWithoutItsSeal(t *testing.T) {
	t.Parallel()
	seal := testSeal(t, 1)
	stored := time.UnixMilli(1_700_000_000_123).UTC()
	forged := func() nats.Header {
		return nats.Header{
			HdrMsgID: {"park:evt-1:3@10"}, HdrEventID: {"evt-1"}, HdrKey: {"k"}, "X-Own": {"x"},
			HdrAttempt: {"999999"}, HdrOrigin: {"5"}, HdrPublished: {"2020-01-01T00:00:00Z"},
			HdrNotBefore: {"2999-01-01T00:00:00Z"}, HdrType: {"order.paid"}, HdrFanDests: {"a,b"},
			"relay-attempt": {"7"}, "Relay-Reason": {"x"},
		}
	}
	relays := []string{HdrAttempt, HdrOrigin, HdrPublished, HdrNotBefore, HdrType, HdrFanDests, "relay-attempt", "Relay-Reason"}
	sealedThen := func(edit func(nats.Header)) nats.Header {
		h := forged()
		seal.seal(h)
		edit(h)
		return h
	}
	for _, tt := range []struct {
		name  string
		h     nats.Header
		seal  *Seal
		extra []string // dropped besides relays
	}{
		{"no seal", forged(), seal, nil},
		{"no seal to check with", sealedThen(func(nats.Header) {}), nil, []string{HdrSeal}},
		{"another secret's seal", func() nats.Header { h := forged(); testSeal(t, 2).seal(h); return h }(), seal, []string{HdrSeal}},
		{"a value changed after sealing", sealedThen(func(h nats.Header) { h.Set(HdrAttempt, "999998") }), seal, []string{HdrSeal}},
		{"the dedup id changed after sealing", sealedThen(func(h nats.Header) { h.Set(HdrMsgID, "park:evt-1:4@10") }), seal, []string{HdrSeal}},
		{"the event id changed after sealing", sealedThen(func(h nats.Header) { h.Set(HdrEventID, "evt-2") }), seal, []string{HdrSeal}},
		{"a seal too short", sealedThen(func(h nats.Header) { h.Set(HdrSeal, h.Get(HdrSeal)[1:]) }), seal, []string{HdrSeal}},
		{"a seal not base64", sealedThen(func(h nats.Header) { h.Set(HdrSeal, "!"+h.Get(HdrSeal)[1:]) }), seal, []string{HdrSeal}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			given := nats.Header{}
			for k, vs := range tt.h {
				given[k] = vs
			}
			e, err := Decode("relay.in.orders", 42, stored, tt.h, []byte("b"), tt.seal)
			require.NoError(t, err)
			require.Equal(t, given.Get(HdrEventID), e.ID, "Relay-Event-Id is a producer's to set")
			require.Equal(t, "k", e.Key)
			require.False(t, e.Copied, "a dedup id of relay's does not make a copy")
			require.Zero(t, e.Attempt)
			require.Equal(t, uint64(42), e.Origin)
			require.Equal(t, stored, e.Published)
			require.Zero(t, e.NotBefore)
			require.Empty(t, e.Type)
			require.Nil(t, e.Dests)
			require.ElementsMatch(t, append(relays, tt.extra...), e.Unsealed)
			require.Equal(t, nats.Header{HdrMsgID: given[HdrMsgID], HdrEventID: given[HdrEventID], HdrKey: {"k"}, "X-Own": {"x"}}, e.Headers)
			require.Equal(t, given, tt.h, "the message's own headers are left as they were")
		})
	}

	// A producer's message without relay's headers is read as it is, its
	// headers not copied.
	h := nats.Header{HdrMsgID: {"pub:01"}, HdrEventID: {"evt-1"}, HdrKey: {"k"}, "X-Own": {"x"}, "Nats-Expected-Stream": {"RELAY_EVENTS"}}
	e, err := Decode("relay.in.orders", 42, stored, h, nil, seal)
	require.NoError(t, err)
	require.Nil(t, e.Unsealed)
	h["X-Later"] = []string{"y"}
	require.Equal(t, "y", e.Headers.Get("X-Later"), "the same map")
}

// Every publish of relay's is sealed, and its seal holds for its headers
// only; a producer's publish is not sealed.
func TestSealSealsRelaysPublishesOnly(t *testing.T) {
	t.Parallel()
	seal := testSeal(t, 1)
	e := fullEnvelope()
	e.Type, e.NotBefore, e.Dests = "order.paid", time.Now(), []string{"a", "b"}
	for _, k := range []Kind{Produced, Promoted, ReplayedDeadLetter, ReplayedLog, Routed, Laned, Fanned, Split} {
		h := e.Header(k, seal)
		require.Equal(t, k != Produced, seal.Valid(h), k.String())
		require.False(t, testSeal(t, 2).Valid(h), "another secret's seal: %s", k)
		require.False(t, (*Seal)(nil).Valid(h), k.String())
		require.Empty(t, e.Header(k, nil).Get(HdrSeal), "no seal without one: %s", k)
	}
	_, err := NewSeal(make([]byte, MinSealKey-1))
	require.ErrorContains(t, err, "too short")
}

func TestEnvelopeHTTPHeader(t *testing.T) {
	t.Parallel()
	require.Nil(t, Envelope{}.HTTPHeader())
	require.Nil(t, Envelope{Headers: nats.Header{HdrMsgID: {"x"}, "relay-reason": {"y"}}}.HTTPHeader())
	h := Envelope{Headers: nats.Header{
		"x-trace": {"a"}, "X-Trace": {"b"}, "Content-Type": {"application/json"},
		HdrMsgID: {"x"}, HdrKey: {"k"}, "NATS-Expected-Stream": {"s"},
	}}.HTTPHeader()
	require.ElementsMatch(t, []string{"a", "b"}, h["X-Trace"])
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Len(t, h, 2)
}

func TestOwnHeader(t *testing.T) {
	t.Parallel()
	require.Equal(t, nats.Header{}, OwnHeader(nil))
	require.Equal(t, nats.Header{"X-A": {"1"}}, OwnHeader(nats.Header{"X-A": {"1"}, HdrEventID: {"e"}, "relay-key": {"k"}, "Nats-Msg-Id": {"m"}}))
}

// An event's type travels with it: every kind of publish carries it, and
// Decode reads it; DecodeTyped reads a typed event from its subject.
func TestEnvelopeCarriesTheType(t *testing.T) {
	t.Parallel()
	e := fullEnvelope()
	e.Type = "order.created"
	stored := time.Date(2025, 3, 2, 8, 0, 0, 0, time.UTC)
	seal := testSeal(t, 1)
	for _, k := range []Kind{Produced, Promoted, ReplayedDeadLetter, ReplayedLog, Routed} {
		h := e.Header(k, seal)
		require.Equal(t, "order.created", h.Get(HdrType), k.String())
		out, err := Decode("relay.in.orders", 9, stored, h, nil, seal)
		require.NoError(t, err)
		if k == Produced {
			// Only relay types an event for a destination.
			require.Empty(t, out.Type, k.String())
			continue
		}
		require.Equal(t, "order.created", out.Type, k.String())
	}

	h := nats.Header{HdrMsgID: {"evt-9"}, HdrKey: {"customer 42"}, "X-Trace": {"t"}}
	typed, err := DecodeTyped(TypeSubject("order.created"), 12, stored, h, []byte("{}"))
	require.NoError(t, err)
	require.Equal(t, Envelope{ID: "evt-9", Type: "order.created", Key: "customer 42", Subject: "relay.type.order.created", Seq: 12,
		Stored: stored, Origin: 12, Published: stored, Headers: h, Body: []byte("{}")}, typed)
	typed.Dest = "billing"
	require.Equal(t, "route:12:billing", typed.MsgID(Routed))
	c := typed.Header(Routed, nil)
	require.Equal(t, nats.Header{HdrMsgID: {"route:12:billing"}, HdrEventID: {"evt-9"}, HdrKey: {"customer 42"}, HdrType: {"order.created"},
		HdrPublished: {stored.Format(time.RFC3339Nano)}, "X-Trace": {"t"}}, c)

	// A typed event published with a scoped dedup id: its id is
	// Relay-Event-Id, and its copies carry that id.
	h = nats.Header{HdrMsgID: {"pub:0123"}, HdrEventID: {"evt-9"}}
	typed, err = DecodeTyped(TypeSubject("order.created"), 13, stored, h, []byte("{}"))
	require.NoError(t, err)
	require.Equal(t, "evt-9", typed.ID)
	typed.Dest = "billing"
	require.Equal(t, "evt-9", typed.Header(Routed, nil).Get(HdrEventID))

	noID, err := DecodeTyped(TypeSubject("a"), 3, stored, nil, nil)
	require.NoError(t, err)
	require.NotEmpty(t, noID.ID, "an id made from the sequence")
	_, err = DecodeTyped("relay.in.orders", 3, stored, nil, nil)
	require.Error(t, err)
}

// TestFromHeaderReadsWhatDecodeReads: FromHeader reads what Decode reads
// of every kind of publish, with no defaults where a header is absent, and
// without checking the seal; MsgID(Produced) is the dedup id the headers
// carry.
func TestFromHeaderReadsWhatDecodeReads(t *testing.T) {
	t.Parallel()
	seal := testSeal(t, 1)
	stored := time.Date(2025, 3, 2, 8, 0, 0, 0, time.UTC)
	in := fullEnvelope()
	in.Type, in.Dedup, in.Dests = "order.paid", "pub:0123", []string{"a", "b"}
	in.NotBefore = time.Date(2025, 3, 2, 9, 0, 0, 7, time.UTC)
	for _, k := range []Kind{Produced, Promoted, ReplayedDeadLetter, ReplayedLog, Routed, Laned, Fanned, Split} {
		h := in.Header(k, seal)
		subject := "relay.in.orders"
		if k == Fanned {
			subject = FanSubject
		}
		d, err := Decode(subject, 900, stored, h, nil, seal)
		require.NoError(t, err, k.String())
		f := FromHeader(h)
		require.Equal(t, d.ID, f.ID, k.String())
		require.Equal(t, h.Get(HdrMsgID), f.MsgID(Produced), k.String())
		require.Equal(t, d.Key, f.Key, k.String())
		if k == Produced {
			// Unsealed: Decode drops the type, FromHeader trusts it.
			require.Empty(t, d.Type)
			require.Equal(t, "order.paid", f.Type)
		} else {
			require.Equal(t, d.Type, f.Type, k.String())
		}
		require.Equal(t, d.Attempt, f.Attempt, k.String())
		require.Equal(t, d.NotBefore, f.NotBefore, k.String())
		require.Equal(t, d.Dests, f.Dests, k.String())
		if h.Get(HdrOrigin) != "" {
			require.Equal(t, d.Origin, f.Origin, k.String())
		} else {
			require.Zero(t, f.Origin, k.String())
		}
		if h.Get(HdrPublished) != "" {
			require.Equal(t, d.Published, f.Published, k.String())
		} else {
			require.True(t, f.Published.IsZero(), k.String())
		}
	}
	// A producer's publish read back writes the same headers again.
	p := Envelope{ID: "evt-1", Dedup: "pub:0123", Key: "k", Headers: nats.Header{"X-Trace": {"a"}}}
	require.Equal(t, p.Header(Produced, nil), FromHeader(p.Header(Produced, nil)).Header(Produced, nil))
	require.Equal(t, Envelope{}, FromHeader(nil))
}

// TestNotBefore: the wait a Split copy carries is read only under relay's
// seal.
func TestNotBefore(t *testing.T) {
	t.Parallel()
	seal := testSeal(t, 1)
	at := time.Date(2025, 3, 2, 9, 0, 0, 7, time.UTC)
	e := fullEnvelope()
	e.NotBefore = at
	h := e.Header(Split, seal)
	require.Equal(t, at, NotBefore(h, seal))
	require.True(t, NotBefore(h, testSeal(t, 2)).IsZero(), "another seal")
	require.True(t, NotBefore(h, nil).IsZero(), "no seal")
	require.True(t, NotBefore(nats.Header{HdrNotBefore: {at.Format(time.RFC3339Nano)}}, seal).IsZero(), "a producer's")
	e.NotBefore = time.Time{}
	require.True(t, NotBefore(e.Header(Split, seal), seal).IsZero(), "none")
	bad := nats.Header{HdrMsgID: {"route:1:orders"}, HdrNotBefore: {"soon"}}
	seal.seal(bad)
	require.True(t, NotBefore(bad, seal).IsZero(), "not a time")
}

// TestTraceHeaderBytes: continuing a trace adds TraceHeaderBytes to an
// event's headers that had no trace context.
func TestTraceHeaderBytes(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	h := nats.Header{"X-Trace": {"a"}}
	require.Equal(t, headerBytes(h)+TraceHeaderBytes, headerBytes(WithTrace(ctx, h)))
}

// TestRoutedOverhead: a typed event's Routed copy, for the longest
// destination name and key token, grows by at most RoutedOverhead.
func TestRoutedOverhead(t *testing.T) {
	t.Parallel()
	seal := testSeal(t, 1)
	dest, key := strings.Repeat("d", 64), strings.Repeat("k", 64)
	e := Envelope{ID: "evt-1", Dedup: "pub:0123456789abcdef0123456789abcdef", Key: key, Type: "order.paid", Headers: nats.Header{"X-Trace": {"a"}}}
	produced := e.Msg(Produced, TypeSubject(e.Type), nil)
	e.Dest, e.Seq, e.Published = dest, math.MaxUint64, time.Date(2025, 3, 2, 9, 0, 0, 123456789, time.UTC)
	routed := e.Msg(Routed, InSubject(dest, key), seal)
	grew := headerBytes(routed.Header) + len(routed.Subject) - headerBytes(produced.Header) - len(produced.Subject)
	require.Positive(t, grew)
	require.LessOrEqual(t, grew, RoutedOverhead(e.ID, e.Type))
}

// headerBytes is h's size on the wire, its header lines.
func headerBytes(h nats.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// Every replica (and CLI run) loads the same seal from the relay_state
// bucket: what one seals, another opens. Without the bucket, LoadSeal says
// which bucket it could not open.
func TestLoadSealIsSharedThroughTheStateBucket(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	_, err := LoadSeal(ctx, js)
	require.ErrorContains(t, err, "open bucket "+StateBucket)

	require.NoError(t, Ensure(ctx, js, Config{}))
	a, err := LoadSeal(ctx, js)
	require.NoError(t, err)
	b, err := LoadSeal(ctx, js)
	require.NoError(t, err)
	h := Envelope{ID: "evt-1", Attempt: 3, Origin: 7}.Header(Promoted, a)
	require.True(t, b.Valid(h), "sealed by one, valid for the other")

	kv, err := js.KeyValue(ctx, StateBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, SealSecretKey)
	require.NoError(t, err)
	require.Len(t, e.Value(), 32)
	other, err := LoadSecret(ctx, js, "another-secret", "another secret")
	require.NoError(t, err)
	require.NotEqual(t, e.Value(), other, "each key its own secret")
}

// ProducerHeader: of relay's headers a producer sets the event id and the
// order key only, in any case.
func TestProducerHeader(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"X-Trace", "Content-Type", HdrMsgID, "Nats-Expected-Stream", HdrEventID, "relay-event-id", HdrKey, "RELAY-ORDER-KEY", "Relay", "Relay_Attempt"} {
		require.True(t, ProducerHeader(h), h)
	}
	for _, h := range []string{HdrAttempt, "relay-attempt", HdrOrigin, HdrPublished, HdrNotBefore, HdrType, HdrFanDests, HdrSeal, HdrReason, "Relay-Anything"} {
		require.False(t, ProducerHeader(h), h)
	}
}

// BenchmarkSealValid is the check of a retry's copy, made per delivery of
// each of relay's copies.
func BenchmarkSealValid(b *testing.B) {
	s, err := NewSeal(make([]byte, MinSealKey))
	require.NoError(b, err)
	h := Envelope{ID: "evt_06h2rcpt1p0j6zbfdgx7z5g334", Attempt: 3, Origin: 7, Published: time.Now(), Headers: nats.Header{"Content-Type": {"application/json"}}}.Header(Promoted, s)
	b.ReportAllocs()
	for b.Loop() {
		if !s.Valid(h) {
			b.Fatal("not valid")
		}
	}
}
