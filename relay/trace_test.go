package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// traceFixture is a relay that traces into a span recorder, with Redis
// and its promoter, delivering to a sink that answers each request as
// answer says and keeps the traceparent of each.
type traceFixture struct {
	t    *testing.T
	srv  streamtest.Server
	rec  *tracetest.SpanRecorder
	tp   *sdktrace.TracerProvider
	prod *publish.Producer
	st   *destination.Store
	sink *httptest.Server

	mu      sync.Mutex
	answer  func(n int) int
	parents []string // the traceparent of each request, in order
}

func startTraceFixture(t *testing.T, answer func(n int) int) *traceFixture {
	t.Helper()
	f := &traceFixture{t: t, srv: streamtest.Start(t), rec: tracetest.NewSpanRecorder(), answer: answer}
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.rec))
	f.sink = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.parents = append(f.parents, r.Header.Get("Traceparent"))
		status := f.answer(len(f.parents))
		f.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(f.sink.Close)
	ctx := context.Background()
	rs := redistest.Start(t, redistest.Options{})
	sched := schedule.NewStore(rs.Client())
	var err error
	f.st, err = destination.NewStore(ctx, f.srv.JS)
	require.NoError(t, err)
	f.prod, err = publish.NewProducer(ctx, f.srv.JS)
	require.NoError(t, err)
	f.prod.TraceWith(f.tp)
	runRelay(t, Config{
		JS: f.srv.JS, Schedule: sched, ParkThreshold: 150 * time.Millisecond, TracerProvider: f.tp, NoAttemptLog: true,
		HTTPClient: egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}),
	})
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = schedule.Promoter{Store: sched, JS: f.srv.JS, Interval: 20 * time.Millisecond, TracerProvider: f.tp}.Run(pctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// addDest adds a destination of the sink whose waits, without jitter,
// are 100ms after a first failed attempt and 200ms after a second: under
// the park threshold, then over it.
func (f *traceFixture) addDest(name string) {
	f.t.Helper()
	_, err := f.st.Add(context.Background(), destination.Destination{Name: name, URL: f.sink.URL + "/" + name,
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(time.Second), NoJitter: true, MaxAttempts: 5}})
	require.NoError(f.t, err)
}

// spans waits until the recorder has ended n spans named name, and
// returns them in the order they ended.
func (f *traceFixture) spans(name string, n int) []sdktrace.ReadOnlySpan {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out []sdktrace.ReadOnlySpan
		for _, s := range f.rec.Ended() {
			if s.Name() == name {
				out = append(out, s)
			}
		}
		if len(out) >= n {
			require.Len(f.t, out, n, "no more %s spans than expected", name)
			return out
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d %s spans ended, want %d", len(out), name, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// childOf requires that child's parent is parent's span.
func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	require.Equal(t, parent.SpanContext().TraceID(), child.SpanContext().TraceID(), "%s in the trace of %s", child.Name(), parent.Name())
	require.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "%s a child of %s", child.Name(), parent.Name())
}

// sentContext is the span context a request's traceparent names.
func sentContext(t *testing.T, traceparent string) trace.SpanContext {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	sc := trace.SpanContextFromContext(ctx)
	require.True(t, sc.IsValid(), "a valid traceparent: %q", traceparent)
	return sc
}

// TestTraceFollowsAnEventAcrossARetryAndAPark: one event's spans form one
// trace, from its publish to the 2xx, through a retry in JetStream and a
// park in Redis; each request carries the traceparent of its attempt's
// span, not the one the event was published with, and the trace is the
// one the event came with.
func TestTraceFollowsAnEventAcrossARetryAndAPark(t *testing.T) {
	t.Parallel()
	f := startTraceFixture(t, func(n int) int {
		if n < 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	f.addDest("hooks")
	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	_, err := f.prod.Publish(context.Background(), publish.Event{Dest: "hooks", ID: "evt_traced", Data: []byte(`{}`), Headers: map[string]string{"Traceparent": incoming}})
	require.NoError(t, err)

	pub := f.spans(spans.Publish, 1)[0]
	attempts := f.spans(spans.Attempt, 3)
	park := f.spans(spans.Park, 1)[0]
	promote := f.spans(schedule.SpanPromote, 1)[0]

	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", pub.SpanContext().TraceID().String(), "the publish continues the event's traceparent")
	require.Equal(t, "00f067aa0ba902b7", pub.Parent().SpanID().String())
	require.Equal(t, trace.SpanKindProducer, pub.SpanKind())

	// Attempt 1 failed and waited in JetStream; attempt 2 failed and was
	// parked; the promoter's copy made attempt 3, which delivered.
	for i, want := range []struct {
		outcome string
		status  int64
	}{{"retry", 503}, {"parked", 503}, {"delivered", 204}} {
		a := attempts[i]
		require.Equal(t, int64(i+1), attr(a, "relay.attempt").AsInt64())
		require.Equal(t, want.outcome, attr(a, "relay.outcome").AsString(), "attempt %d", i+1)
		require.Equal(t, want.status, attr(a, "http.response.status_code").AsInt64())
		require.Equal(t, "hooks", attr(a, "relay.destination").AsString())
		require.Equal(t, "127.0.0.1", attr(a, "server.address").AsString())
		require.Positive(t, attr(a, "relay.attempt.duration_ms").AsFloat64())
		require.Equal(t, trace.SpanKindClient, a.SpanKind())
	}
	childOf(t, attempts[0], pub)
	childOf(t, attempts[1], pub) // a redelivery of the same message
	childOf(t, park, attempts[1])
	childOf(t, promote, park)
	childOf(t, attempts[2], promote)

	f.mu.Lock()
	parents := append([]string(nil), f.parents...)
	f.mu.Unlock()
	require.Len(t, parents, 3)
	for i, tp := range parents {
		require.NotEqual(t, incoming, tp, "the event's own traceparent is not passed on")
		sc := sentContext(t, tp)
		require.Equal(t, pub.SpanContext().TraceID(), sc.TraceID(), "request %d joins the event's trace", i+1)
		require.Equal(t, attempts[i].SpanContext().SpanID(), sc.SpanID(), "request %d's parent is its attempt's span", i+1)
	}
}

// TestTraceFollowsADeadLetterAndItsReplay: a dead letter's write is a span
// of the failed attempt's, and a replay of it continues the trace: the
// replayed event's attempt is a child of the replay's span.
func TestTraceFollowsADeadLetterAndItsReplay(t *testing.T) {
	t.Parallel()
	f := startTraceFixture(t, func(n int) int {
		if n == 1 {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	f.addDest("strict")
	_, err := f.prod.Publish(context.Background(), publish.Event{Dest: "strict", ID: "evt_dead", Data: []byte(`{}`)})
	require.NoError(t, err)
	pub := f.spans(spans.Publish, 1)[0]
	first := f.spans(spans.Attempt, 1)[0]
	dead := f.spans(spans.DeadLetter, 1)[0]
	require.Equal(t, "dead_letter", attr(first, "relay.outcome").AsString())
	require.Equal(t, ReasonPermanentStatus, attr(dead, "relay.reason").AsString())
	childOf(t, first, pub)
	childOf(t, dead, first)

	ctx := context.Background()
	letters, err := dlq.Open(ctx, f.srv.JS)
	require.NoError(t, err)
	letters = letters.WithTracerProvider(f.tp)
	replayed := 0
	require.NoError(t, letters.ReplayEach(ctx, dlq.Filter{Dest: "strict"}, dlq.ReplayOptions{}, func(_, _ int, st dlq.ReplayStep) error {
		require.NoError(t, st.Err)
		replayed++
		return nil
	}))
	require.Equal(t, 1, replayed)
	replay := f.spans(dlq.SpanReplay, 1)[0]
	second := f.spans(spans.Attempt, 2)[1]
	require.Equal(t, "delivered", attr(second, "relay.outcome").AsString())
	childOf(t, replay, dead)
	childOf(t, second, replay)
}

// TestTraceHeadersKeptOnRepublish: every publish of an event keeps its
// traceparent and tracestate, in any spelling, and WithTrace replaces
// them with the context of ctx's span.
func TestTraceHeadersKeptOnRepublish(t *testing.T) {
	t.Parallel()
	h := nats.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "tracestate": {"k=v"}, "X-Own": {"1"}}
	env := stream.Envelope{ID: "evt_1", Dest: "d", Attempt: 2, Origin: 7, Headers: h}
	for _, k := range []stream.Kind{stream.Promoted, stream.ReplayedDeadLetter, stream.ReplayedLog, stream.Routed, stream.Laned, stream.Fanned, stream.Split} {
		out := env.Header(k, nil)
		require.Equal(t, h["Traceparent"], out["Traceparent"], k.String())
		require.Equal(t, h["tracestate"], out["tracestate"], k.String())
	}
	ctx := stream.ExtractTrace(context.Background(), h)
	sc := trace.SpanContextFromContext(ctx)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String(), "read in any case")
	require.Equal(t, "k=v", sc.TraceState().String())

	rec := tracetest.NewSpanRecorder()
	sctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t").Start(ctx, "s")
	span.End()
	got := stream.WithTrace(sctx, h)
	require.NotContains(t, got, "Traceparent", "the old spelling replaced")
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-"+span.SpanContext().SpanID().String()+"-01", got.Get("traceparent"))
	require.Equal(t, "k=v", got.Get("tracestate"))
	require.Equal(t, "1", got.Get("X-Own"))
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", h.Get("Traceparent"), "h itself unchanged")
	require.Equal(t, h, stream.WithTrace(context.Background(), h), "no span: h as it is")
}
