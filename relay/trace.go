package relay

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// The spans relay makes (docs/operations.md#tracing). Each continues the
// trace of the event's traceparent header, or of the span it follows.
const (
	// SpanPublish is a producer's publish of one event (Producer).
	SpanPublish = "relay.publish"
	// SpanAttempt is one delivery attempt, from the request to the
	// outcome carried out; its context is the request's traceparent.
	SpanAttempt = "relay.attempt"
	// SpanPark is an event parked in Redis after a failed attempt; the
	// parked copy carries its context, so the promotion continues it.
	SpanPark = "relay.park"
	// SpanDeadLetter is a dead letter written; the letter carries its
	// context, so a replay continues it.
	SpanDeadLetter = "relay.dead_letter"
)

// TracerName is the instrumentation scope of relay's spans.
const TracerName = "github.com/relaydev/relay"

// Attributes of relay's spans.
const (
	attrDest     = attribute.Key("relay.destination")
	attrType     = attribute.Key("relay.event_type")
	attrEventID  = attribute.Key("relay.event_id")
	attrAttempt  = attribute.Key("relay.attempt")
	attrOutcome  = attribute.Key("relay.outcome")
	attrReason   = attribute.Key("relay.reason")
	attrDuration = attribute.Key("relay.attempt.duration_ms")
	attrRetryIn  = attribute.Key("relay.retry_in_ms")
	attrSeq      = attribute.Key("relay.seq")
	attrDup      = attribute.Key("relay.duplicate")
	attrStatus   = attribute.Key("http.response.status_code")
	attrHost     = attribute.Key("server.address")
	attrPort     = attribute.Key("server.port")
	attrSubject  = attribute.Key("messaging.destination.name")
)

// tracerOf is tp's tracer for relay's spans, nil (no tracing) when tp is.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName, trace.WithInstrumentationVersion(Version))
}

// traceRoom is what a copy of an event may gain in size when relay traces:
// a traceparent it did not have.
const traceRoom = len(stream.HdrTraceParent) + 55 + 4

// startSpan starts span name for ev, a child of ctx's span, or where ctx
// has none, of the event's traceparent. Only when r traces.
func (r *Relay) startSpan(ctx context.Context, ev event, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = stream.ExtractTrace(ctx, ev.hdr)
	}
	attrs = append(attrs, attrDest.String(ev.dest), attrEventID.String(ev.id))
	return r.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// endAttempt ends an attempt's span with what came of it: the HTTP status,
// the URL's host, the attempt's duration and the outcome carried out.
func endAttempt(span trace.Span, d destination.Destination, out Outcome) {
	res := out.Result
	u := d.URL
	if pool := d.Pool(); res.Pooled && res.URL < len(pool) {
		u = pool[res.URL]
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	if p, err := url.Parse(u); err == nil {
		attrs = append(attrs, attrHost.String(p.Hostname()))
		if port, err := strconv.Atoi(p.Port()); err == nil {
			attrs = append(attrs, attrPort.Int(port))
		}
	}
	if res.Status != 0 {
		attrs = append(attrs, attrStatus.Int(res.Status))
	}
	outcome := out.Decision.Action.String()
	if out.Parked {
		outcome = "parked"
	}
	attrs = append(attrs, attrAttempt.Int(out.Attempt), attrDuration.Float64(float64(res.Duration)/float64(time.Millisecond)), attrOutcome.String(outcome))
	switch out.Decision.Action {
	case Retry, Park:
		attrs = append(attrs, attrRetryIn.Int64(out.Decision.Delay.Milliseconds()))
	case DeadLetter:
		attrs = append(attrs, attrReason.String(out.Decision.Reason))
	}
	span.SetAttributes(attrs...)
	switch {
	case res.Err != nil:
		span.SetStatus(codes.Error, res.Err.Error())
	case res.Status != 0 && (res.Status < 200 || res.Status > 299):
		span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(res.Status))
	}
	span.End()
}

// endSpan ends span, failed with err if it is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
