package stream

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C Trace Context headers of an event. They are the event's own
// headers, not contract headers: every republish of the event (a park and
// its promotion, a lane, a fan-out, a replay) keeps them, and relay, when it
// traces, replaces them with the context of its own span where it continues
// the trace (see WithTrace). Any case is read; relay writes them in lower
// case.
const (
	HdrTraceParent = "traceparent"
	HdrTraceState  = "tracestate"
)

// TraceHeaderBytes is how many bytes a traceparent adds to a message that
// had none ("traceparent: 00-<trace id>-<span id>-<flags>\r\n"): what a
// copy of an event may gain when relay traces.
const TraceHeaderBytes = len(HdrTraceParent) + 55 + 4

// IsTraceHeader reports whether name is traceparent or tracestate, in any
// case.
func IsTraceHeader(name string) bool {
	return strings.EqualFold(name, HdrTraceParent) || strings.EqualFold(name, HdrTraceState)
}

// traceContext is the one propagator relay uses: W3C Trace Context.
var traceContext = propagation.TraceContext{}

// traceCarrier lets the propagator read and write an event's headers. NATS
// headers are case-sensitive: Get reads a name in any case, Set replaces
// every spelling of it with the lower-case name.
type traceCarrier nats.Header

func (c traceCarrier) Get(key string) string {
	if v := nats.Header(c).Get(key); v != "" {
		return v
	}
	for k, vs := range c {
		if len(vs) > 0 && strings.EqualFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

func (c traceCarrier) Set(key, value string) {
	for k := range c {
		if strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
	c[strings.ToLower(key)] = []string{value}
}

func (c traceCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// ExtractTrace returns ctx with the remote span context h's traceparent
// and tracestate carry, or ctx as it is when h has none that is valid.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, traceCarrier(h))
}

// WithTrace returns a copy of h whose traceparent and tracestate are the
// context of ctx's span (any spelling of them in h replaced), so that the
// message it heads continues the trace from that span. Without a valid span
// context in ctx it returns h itself.
func WithTrace(ctx context.Context, h nats.Header) nats.Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return h
	}
	out := make(nats.Header, len(h)+2)
	for k, vs := range h {
		if !IsTraceHeader(k) {
			out[k] = vs
		}
	}
	traceContext.Inject(ctx, traceCarrier(out))
	return out
}

// InjectTrace sets the traceparent and tracestate of the span context in
// ctx on carrier (an HTTP request's headers, say), if it is valid.
func InjectTrace(ctx context.Context, carrier propagation.TextMapCarrier) {
	traceContext.Inject(ctx, carrier)
}
