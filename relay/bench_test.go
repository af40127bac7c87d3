package relay

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchMsg is just enough of a jetstream.Msg for eventOf.
type benchMsg struct {
	jetstream.Msg
	subject string
	hdr     nats.Header
	reply   string
	data    []byte
}

func (m benchMsg) Subject() string      { return m.subject }
func (m benchMsg) Headers() nats.Header { return m.hdr }
func (m benchMsg) Reply() string        { return m.reply }
func (m benchMsg) Data() []byte         { return m.data }

func BenchmarkSign(b *testing.B) {
	secret := GenerateSecret()
	body := make([]byte, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Sign(secret, "evt_06h2rcpt1p0j6zbfdgx7z5g334", 1764500000, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEventOf(b *testing.B) {
	m := benchMsg{
		subject: "relay.ev.orders.17",
		hdr:     nats.Header{"Nats-Msg-Id": {"evt_06h2rcpt1p0j6zbfdgx7z5g334"}, "Content-Type": {"application/json"}, "X-Trace": {"abc"}},
		reply:   "$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_orders.1.123456.120000.1764500000123456789.42.tok",
	}
	b.ReportAllocs()
	for b.Loop() {
		ev, err := eventOf(m)
		if err != nil || ev.id == "" {
			b.Fatal(err)
		}
		_ = eventHeaders(m.hdr)
	}
}

func BenchmarkDecide(b *testing.B) {
	p := RetryPolicy{}.WithDefaults()
	results := []Result{{Status: 204}, {Status: 503}, {Status: 429, HasRetryAfter: true, RetryAfter: 5 * time.Second}, {Status: 404}, {Err: http.ErrHandlerTimeout}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = classify(results[i%len(results)], 1+i%20, p, nil)
		i++
	}
}

// BenchmarkCheckRouted is the unknown-destination check's work for one
// event of a known destination: the destination from the subject, and
// whether it routes the event.
func BenchmarkCheckRouted(b *testing.B) {
	m := &jetstream.RawStreamMsg{
		Subject:  "relay.ev.orders.17",
		Sequence: 123456,
		Header:   nats.Header{"Nats-Msg-Id": {"evt_06h2rcpt1p0j6zbfdgx7z5g334"}, "Nats-Msg-Size": {"1024"}},
	}
	r := &Relay{dests: watch{dests: map[string]Destination{"orders": {Name: "orders", StartSeq: 1}}}}
	c := &unroutedCheck{dests: r, letters: r}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.check(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}
