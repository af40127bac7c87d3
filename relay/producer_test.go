package relay

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

// producerFixture is a producer on an embedded server with destinations
// orders and billing.
type producerFixture struct {
	prod  *Producer
	store *Store
}

func setupProducer(t *testing.T) producerFixture {
	t.Helper()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	st, err := NewStore(ctx, js)
	require.NoError(t, err)
	for _, name := range []string{"orders", "billing"} {
		_, err = st.Add(ctx, Destination{Name: name, URL: "https://example.test/" + name})
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
