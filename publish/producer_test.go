package publish

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// producerFixture is a producer on an embedded server with destinations
// orders and billing.
type producerFixture struct {
	prod  *Producer
	store *destination.Store
}

func setupProducer(t *testing.T) producerFixture {
	t.Helper()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	for _, name := range []string{"orders", "billing"} {
		_, err = st.Add(ctx, destination.Destination{Name: name, URL: "https://example.test/" + name})
		require.NoError(t, err)
	}
	p, err := NewProducer(ctx, js)
	require.NoError(t, err)
	return producerFixture{prod: p, store: st}
}

// An order key with a control character, or longer than MaxKeyLen, and
// the ids "." and "..", are refused with what was wrong, and nothing is
// stored; a key of MaxKeyLen bytes and ids with '/' are taken.
func TestProducerRefusesKeysAndIDsItCannotKeep(t *testing.T) {
	t.Parallel()
	f := setupProducer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		ev   Event
		want string
	}{
		{Event{Dest: "orders", Key: "customer\r\n42"}, "the order key has a control character (0x0d) at byte 8"},
		{Event{Dest: "orders", Key: "a\x00"}, "control character (0x00)"},
		{Event{Dest: "orders", Key: "a\u0085b"}, "control character (0x85)"},
		{Event{Type: "order.created", Key: strings.Repeat("k", MaxKeyLen+1)}, "the order key is 257 bytes; at most 256"},
		{Event{Dest: "orders", ID: "."}, `event ids "." and ".." cannot be`},
		{Event{Dest: "orders", ID: ".."}, `event ids "." and ".." cannot be`},
	} {
		tc.ev.Data = []byte(`{}`)
		_, err := f.prod.Publish(ctx, tc.ev)
		require.ErrorContains(t, err, tc.want, "%+v", tc.ev)
		_, err = f.prod.PublishBatch(ctx, []Event{{Dest: "orders", Data: []byte(`{}`)}, tc.ev})
		var be *BatchError
		require.ErrorAs(t, err, &be)
		require.Equal(t, 1, be.Index)
	}
	for _, ev := range []Event{
		{Dest: "orders", Key: strings.Repeat("k", MaxKeyLen), ID: "orders/42"},
		{Dest: "orders", Key: "ключ 42", ID: "..."},
	} {
		ev.Data = []byte(`{}`)
		_, err := f.prod.Publish(ctx, ev)
		require.NoError(t, err, "%+v", ev)
	}
}

// Idempotency is scoped to who publishes (Event.Scope) and to the target:
// an id is a duplicate only of an event published with the same scope to
// the same destination or type. A duplicate with another body, key or
// headers is refused (ErrIDConflict), never stored, and says nothing of
// any other scope's event. The stored event keeps the producer's id.
func TestProducerScopesIdempotency(t *testing.T) {
	t.Parallel()
	f := setupProducer(t)
	ctx := context.Background()
	pub := func(ev Event) (Published, error) {
		if ev.Data == nil {
			ev.Data = []byte(`{"n":1}`)
		}
		ev.ID = "order-1"
		return f.prod.Publish(ctx, ev)
	}
	first, err := pub(Event{Scope: "key:a", Dest: "orders"})
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	seen := map[uint64]bool{first.Seq: true}
	for _, ev := range []Event{
		{Scope: "key:b", Dest: "orders"},         // another producer
		{Scope: "key:a", Dest: "billing"},        // another destination
		{Scope: "key:a", Type: "order.created"},  // a type
		{Scope: "key:a", Type: "order.refunded"}, // another type
		{Dest: "orders"},                         // the Go package's own scope
	} {
		res, err := pub(ev)
		require.NoError(t, err, "%+v", ev)
		require.False(t, res.Duplicate, "%+v is an event of its own", ev)
		require.Equal(t, "order-1", res.ID)
		require.False(t, seen[res.Seq], "%+v stored at a sequence of its own", ev)
		seen[res.Seq] = true
	}
	again, err := pub(Event{Scope: "key:a", Dest: "orders"})
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Seq, again.Seq, "the duplicate answers the first event's sequence")

	for _, ev := range []Event{
		{Scope: "key:a", Dest: "orders", Data: []byte(`{"n":2}`)},
		{Scope: "key:a", Dest: "orders", Key: "customer-1"},
		{Scope: "key:a", Dest: "orders", Headers: map[string]string{"X-Tenant": "t2"}},
	} {
		_, err := pub(ev)
		require.ErrorIs(t, err, ErrIDConflict, "%+v", ev)
		require.ErrorContains(t, err, `id "order-1" was published within the duplicate window with another body, key or headers`)
		res, err := f.prod.PublishBatch(ctx, []Event{{Scope: "key:a", Dest: "orders", ID: "other", Data: []byte(`{}`)},
			{Scope: ev.Scope, Dest: ev.Dest, ID: "order-1", Key: ev.Key, Headers: ev.Headers, Data: cmpOr(ev.Data, []byte(`{"n":1}`))}})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.ErrorIs(t, res[1].Err, ErrIDConflict, "in a batch: %+v", ev)
		require.Zero(t, res[1].Seq, "a conflict answers no sequence")
	}

	// The stored event is the producer's id, whatever its dedup id.
	s, err := f.prod.js.Stream(ctx, "RELAY_EVENTS")
	require.NoError(t, err)
	raw, err := s.GetMsg(ctx, first.Seq)
	require.NoError(t, err)
	ev, err := stream.Decode(raw.Subject, raw.Sequence, raw.Time, raw.Header, raw.Data, nil)
	require.NoError(t, err)
	require.Equal(t, "order-1", ev.ID)
	require.Equal(t, DedupID("key:a", "orders", "", "order-1"), raw.Header.Get("Nats-Msg-Id"))
}

func cmpOr(b, or []byte) []byte {
	if b == nil {
		return or
	}
	return b
}
