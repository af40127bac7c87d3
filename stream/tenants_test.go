package stream

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestDestRef(t *testing.T) {
	t.Parallel()
	require.Equal(t, "orders", DestRef("", "orders"))
	require.Equal(t, "Acme-1=orders", DestRef("Acme-1", "orders"))
	tn, n := SplitDestRef("Acme-1=orders")
	require.Equal(t, []string{"Acme-1", "orders"}, []string{tn, n})
	tn, n = SplitDestRef("orders")
	require.Equal(t, []string{"", "orders"}, []string{tn, n})
	for _, ok := range []string{"orders", "Acme-1=orders", "a=b"} {
		require.NoError(t, ValidateDestRef(ok), ok)
	}
	for _, bad := range []string{"", "=orders", "acme=", "acme=Orders", "ac.me=orders", "a=b=c", "Orders", "-a=b"} {
		require.Error(t, ValidateDestRef(bad), bad)
	}
}

func TestParseTenantSubjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		subj string
		want Parsed
	}{
		{"relay.t.Acme.in.orders", Parsed{Dest: "Acme=orders", Bucket: -1}},
		{"relay.t.Acme.in.orders.k1", Parsed{Dest: "Acme=orders", KeyToken: "k1", Bucket: -1}},
		{"relay.tev.Acme.orders.17", Parsed{Dest: "Acme=orders", Bucket: 17}},
		{"relay.ev.Acme=orders.17", Parsed{Dest: "Acme=orders", Bucket: 17}},
		{"relay.in.Acme=orders", Parsed{Dest: "Acme=orders", Bucket: -1}},
	} {
		p, err := ParseSubject(tc.subj)
		require.NoError(t, err, tc.subj)
		require.Equal(t, tc.want, p, tc.subj)
	}
	for _, bad := range []string{"relay.tev.Acme.orders.64", "relay.tev.Acme.orders", "relay.t.Acme.out.orders", "relay.t.Acme.in", "relay.t.Acme.in.orders.k.x", "relay.t.a=b.in.c", "relay.t.a.in.b=c", "relay.tev.a.b=c.1"} {
		_, err := ParseSubject(bad)
		require.Error(t, err, bad)
	}
	require.True(t, IsInputSubject("relay.t.Acme.in.orders.k", "Acme=orders"))
	require.True(t, IsInputSubject("relay.in.Acme=orders.k", "Acme=orders"))
	require.False(t, IsInputSubject("relay.tev.Acme.orders.3", "Acme=orders"))
	require.False(t, IsInputSubject("relay.t.Other.in.orders", "Acme=orders"))

	tn, typ, ok := TypedTarget("relay.t.Acme.type.order.created")
	require.True(t, ok)
	require.Equal(t, []string{"Acme", "order.created"}, []string{tn, typ})
	tn, typ, ok = TypedTarget("relay.type.order.created")
	require.True(t, ok)
	require.Equal(t, []string{"", "order.created"}, []string{tn, typ})
	for _, bad := range []string{"relay.t.Acme.type.", "relay.t.Acme.in.orders", "relay.t.-x.type.a", "relay.tev.a.b.1"} {
		_, _, ok := TypedTarget(bad)
		require.False(t, ok, bad)
	}
}

// A tenant's producer publishes with the tenant in the subject; the
// server's mapping stores a keyed event in the bucket relay's own publish
// of the same key uses, so both land in the same partition of the
// destination, and the destination's filters select both.
func TestTenantSubjectsAsTheServerStoresThem(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	pub := func(subj string) string {
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: []byte("{}")})
		require.NoError(t, err, subj)
		m, err := js.Stream(ctx, EventsStream)
		require.NoError(t, err)
		got, err := m.GetMsg(ctx, ack.Sequence)
		require.NoError(t, err)
		return got.Subject
	}
	for _, key := range []string{"cust-1", "cust-2", "x"} {
		stored := pub(TenantInSubject("Acme", "orders", key))
		require.Equal(t, KeyedSubjects("Acme=orders", key)[1], stored)
		ours := pub(InSubject("Acme=orders", key))
		require.Equal(t, KeyedSubject("Acme=orders", key), ours)
		p1, err := ParseSubject(stored)
		require.NoError(t, err)
		p2, err := ParseSubject(ours)
		require.NoError(t, err)
		require.Equal(t, p1, p2, "same destination, same bucket")
	}
	require.Equal(t, "relay.t.Acme.in.orders", pub(TenantInSubject("Acme", "orders", "")))
	require.Equal(t, "relay.t.Acme.type.order.created", pub(TenantTypeSubject("Acme", "order.created")))

	// The destination's filters select its events of both forms, and not
	// another tenant's destination of the same name.
	pub(TenantInSubject("Other", "orders", "cust-1"))
	c, err := js.CreateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{FilterSubjects: DestFilters("Acme=orders"), AckPolicy: jetstream.AckNonePolicy})
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(7), info.NumPending)
}
