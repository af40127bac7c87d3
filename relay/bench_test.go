package relay

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/webhook"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
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

func BenchmarkEventOf(b *testing.B) {
	m := benchMsg{
		subject: "relay.ev.orders.17",
		hdr:     nats.Header{"Nats-Msg-Id": {"evt_06h2rcpt1p0j6zbfdgx7z5g334"}, "Content-Type": {"application/json"}, "X-Trace": {"abc"}},
		reply:   "$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_orders.1.123456.120000.1764500000123456789.42.tok",
	}
	r := &Relay{seal: benchSeal(b)}
	b.ReportAllocs()
	for b.Loop() {
		ev, err := r.eventOf(m)
		if err != nil || ev.id == "" {
			b.Fatal(err)
		}
		_ = eventHeaders(m.hdr)
	}
}

// BenchmarkEventOfCopy is BenchmarkEventOf for a copy of relay's (a retry
// promoted from Redis), whose seal is checked.
func BenchmarkEventOfCopy(b *testing.B) {
	seal := benchSeal(b)
	env := stream.Envelope{ID: "evt_06h2rcpt1p0j6zbfdgx7z5g334", Attempt: 3, Origin: 17, Published: time.Now(),
		Headers: nats.Header{"Content-Type": {"application/json"}, "X-Trace": {"abc"}}}
	m := benchMsg{
		subject: "relay.ev.orders.17",
		hdr:     env.Header(stream.Promoted, seal),
		reply:   "$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_orders.1.123456.120000.1764500000123456789.42.tok",
	}
	r := &Relay{seal: seal}
	b.ReportAllocs()
	for b.Loop() {
		ev, err := r.eventOf(m)
		if err != nil || ev.prior != 3 {
			b.Fatal(err, ev.prior)
		}
		_ = eventHeaders(m.hdr)
	}
}

func benchSeal(b *testing.B) *stream.Seal {
	s, err := stream.NewSeal(make([]byte, stream.MinSealKey))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkDecide(b *testing.B) {
	p := destination.RetryPolicy{}.WithDefaults()
	results := []Result{{Status: 204}, {Status: 503}, {Status: 429, HasRetryAfter: true, RetryAfter: 5 * time.Second}, {Status: 404}, {Err: http.ErrHandlerTimeout}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = classify(results[i%len(results)], 1+i%20, p, nil)
		i++
	}
}

// ackedMsg is a benchMsg whose ack succeeds.
type ackedMsg struct{ benchMsg }

func (ackedMsg) Ack() error          { return nil }
func (ackedMsg) HandBack(bool) error { return nil }

// answer204 answers every request 204 without a network.
type answer204 struct{}

func (answer204) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody}, nil
}

// BenchmarkAttempt is one event's first attempt through handle, delivered
// (the hot path: decode, decide, sign, send, ack), without a network:
// with tracing off (Config.TracerProvider nil) and on (every span sampled,
// none exported). Off allocates nothing for tracing: its allocations are
// those of the request and the event.
func BenchmarkAttempt(b *testing.B) {
	m := ackedMsg{benchMsg{
		subject: "relay.in.orders",
		hdr:     nats.Header{"Nats-Msg-Id": {"evt_06h2rcpt1p0j6zbfdgx7z5g334"}, "Content-Type": {"application/json"}, "Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		reply:   "$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_orders.1.123456.120000.1764500000123456789.42.tok",
		data:    []byte(`{"id":1}`),
	}}
	d := destination.Destination{Name: "orders", URL: "https://hooks.example.com/in", Secret: webhook.GenerateSecret()}.WithDefaults()
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"tracing=off", nil}, {"tracing=on", sdktrace.NewTracerProvider()}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := Config{TracerProvider: tc.tp, Logger: slog.New(slog.DiscardHandler)}.WithDefaults()
			r := &Relay{
				cfg: cfg, log: cfg.Logger, tracer: spans.Tracer(cfg.TracerProvider),
				sender:   &Sender{Client: &http.Client{Transport: answer204{}}, Now: time.Now},
				dests:    destination.NewWatch(d),
				breakers: breakers{probing: map[string]bool{}, failures: map[string]int{}},
				pools:    newURLPools(cfg.URLCooldown),
				limits:   limits{byDest: map[string]*limit{}, replicas: 1},
			}
			var outcomes int
			r.cfg.OnDelivery = func(o Outcome) {
				if o.Decision.Action == Ack {
					outcomes++
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				r.handle(ctx, jsMsg[ackedMsg]{m}, nil)
			}
			if outcomes != b.N {
				b.Fatalf("%d of %d attempts delivered", outcomes, b.N)
			}
		})
	}
}

// BenchmarkTemplateRender renders the shipped Slack template over an
// operator event's body: the cost a templated destination adds to each
// attempt.
func BenchmarkTemplateRender(b *testing.B) {
	src, err := os.ReadFile("../docs/templates/slack.tmpl")
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := destination.CompileBodyTemplate(string(src))
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"dest":"orders","at":"2026-12-02T01:02:03Z","paused_until":"2026-12-02T02:02:03Z","trips":1,"threshold":5}`)
	ev := destination.NewTemplateEvent("relay.destination.breaker_opened:orders:1:1", opevent.BreakerOpened, "", "slack", time.Now(), body, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(context.Background(), ev); err != nil {
			b.Fatal(err)
		}
	}
}
