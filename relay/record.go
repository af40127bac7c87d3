package relay

import (
	"strings"
	"unicode/utf8"

	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/stream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// recordOutcome adds out, the outcome of ev's delivery, to the delivery
// log (when relay keeps one): an attempt whatever came of it, or an event
// settled without one.
func (r *Relay) recordOutcome(ev *event, d destination.Destination, out *Outcome, sent bool) {
	if r.logw == nil {
		return
	}
	switch out.Decision.Action {
	case Ack, Retry, Park, DeadLetter, AckFiltered:
	case Leave, HandBack:
		// An attempt outlived AckWait (left to the replica that has the
		// event now) or was cut short by a stop (handed back): the
		// destination may have had it, so it is recorded; it does not
		// decide the event's state (stateOf).
		if !sent {
			return
		}
	default:
		return
	}
	if out.Err != nil && out.Decision.Action != DeadLetter && !sent {
		// Not carried out: the event comes back and the log records what
		// happens then. (A dead letter that failed for good is recorded,
		// and so is an attempt made: the destination had it.)
		return
	}
	res := out.Result
	rec := deliverylog.AttemptRecord{
		EventID:  ev.id,
		Type:     ev.typ,
		Key:      ev.key,
		Dest:     ev.dest,
		Outcome:  out.Decision.Action.String(),
		At:       r.cfg.Now().UTC(),
		Class:    stream.LogClass(sent, res.Status),
		Status:   res.Status,
		EventSeq: ev.origin,
	}
	if sent {
		rec.Attempt = out.Attempt
		rec.At = rec.At.Add(-res.Duration)
		rec.DurationMS = float64(res.Duration.Microseconds()) / 1000
		rec.URL = d.URL
		if res.Pooled {
			if pool := d.Pool(); res.URL < len(pool) {
				rec.URL = pool[res.URL]
			}
		}
	}
	switch {
	case res.Err != nil:
		rec.Error = res.Err.Error()
	case res.Snippet != "" && len(res.Body) == 0:
		rec.Error = res.Snippet
	}
	if len(res.Headers) > 0 {
		rec.ResponseHeaders = make(map[string]string, len(res.Headers)/2)
		for i := 0; i+1 < len(res.Headers); i += 2 {
			rec.ResponseHeaders[res.Headers[i]] = res.Headers[i+1]
		}
	}
	if len(res.Body) > 0 {
		rec.ResponseBody = strings.ToValidUTF8(string(res.Body), string(utf8.RuneError))
	}
	switch out.Decision.Action {
	case Retry, Park:
		rec.RetryInMS, rec.Parked = out.Decision.Delay.Milliseconds(), out.Parked
	case DeadLetter:
		rec.Reason = out.Decision.Reason
		if out.Err != nil && out.Decision.Reason != ReasonDeadLetterFailed {
			// The dead letter was not written this time: the event comes
			// back (deadLetter's nak) and is dead-lettered then.
			rec.Outcome, rec.Reason, rec.RetryInMS = Retry.String(), "", deadLetterRetry.Milliseconds()
		}
	}
	r.logw.Add(rec)
}

// recordRouting adds a typed event's routing, confirmed, to the delivery
// log.
func (r *Relay) recordRouting(p routing.Routed) {
	if r.logw == nil || p.Envelope.ID == "" {
		return // off, or not a typed event
	}
	ev, dests := p.Envelope, p.Dests
	rec := deliverylog.AttemptRecord{EventID: ev.ID, Type: ev.Type, Key: ev.Key, Outcome: deliverylog.OutcomeRouted, At: ev.Stored.UTC(), Class: stream.ClassNone, EventSeq: ev.Seq}
	if len(dests) > deliverylog.MaxRoutedDests {
		rec.DestsMore = len(dests) - deliverylog.MaxRoutedDests
		dests = dests[:deliverylog.MaxRoutedDests]
	}
	rec.Dests = dests
	r.logw.Add(rec)
}

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
