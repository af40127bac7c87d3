package routing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkCheckRouted is the unknown-destination check's work for one
// event of a known destination: the destination from the subject, and
// whether it routes the event.
func BenchmarkCheckRouted(b *testing.B) {
	m := &jetstream.RawStreamMsg{
		Subject:  "relay.ev.orders.17",
		Sequence: 123456,
		Header:   nats.Header{"Nats-Msg-Id": {"evt_06h2rcpt1p0j6zbfdgx7z5g334"}, "Nats-Msg-Size": {"1024"}},
	}
	c := &unroutedCheck{dests: knownOrders{}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.check(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

// knownOrders knows one destination, orders, since sequence 1.
type knownOrders struct{}

func (knownOrders) Routes(dest string, seq uint64) bool { return dest == "orders" && seq >= 1 }

func (knownOrders) Exists(_ context.Context, dest string, seq uint64) (bool, error) {
	return dest == "orders" && seq >= 1, nil
}
