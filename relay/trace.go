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
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/stream"
)

// traceRoom is what a copy of an event may gain in size when relay traces:
// a traceparent it did not have.
const traceRoom = stream.TraceHeaderBytes

// startSpan starts span name for ev, a child of ctx's span, or where ctx
// has none, of the event's traceparent. Only when r traces.
func (r *Relay) startSpan(ctx context.Context, ev event, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = stream.ExtractTrace(ctx, ev.hdr)
	}
	attrs = append(attrs, spans.AttrDest.String(ev.dest), spans.AttrEventID.String(ev.id))
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
		attrs = append(attrs, spans.AttrHost.String(p.Hostname()))
		if port, err := strconv.Atoi(p.Port()); err == nil {
			attrs = append(attrs, spans.AttrPort.Int(port))
		}
	}
	if res.Status != 0 {
		attrs = append(attrs, spans.AttrStatus.Int(res.Status))
	}
	outcome := out.Decision.Action.String()
	if out.Parked {
		outcome = "parked"
	}
	attrs = append(attrs, spans.AttrAttempt.Int(out.Attempt), spans.AttrDuration.Float64(float64(res.Duration)/float64(time.Millisecond)), spans.AttrOutcome.String(outcome))
	switch out.Decision.Action {
	case Retry, Park:
		attrs = append(attrs, spans.AttrRetryIn.Int64(out.Decision.Delay.Milliseconds()))
	case DeadLetter:
		attrs = append(attrs, spans.AttrReason.String(out.Decision.Reason))
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
