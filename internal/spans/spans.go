// Package spans names relay's OpenTelemetry spans and their attributes
// (docs/operations.md#tracing), shared by the producer and the engine.
package spans

import (
	"github.com/relaydev/relay/internal/version"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The spans relay makes (docs/operations.md#tracing). Each continues the
// trace of the event's traceparent header, or of the span it follows.
const (
	// Publish is a producer's publish of one event (Producer).
	Publish = "relay.publish"
	// Attempt is one delivery attempt, from the request to the
	// outcome carried out; its context is the request's traceparent.
	Attempt = "relay.attempt"
	// Park is an event parked in Redis after a failed attempt; the
	// parked copy carries its context, so the promotion continues it.
	Park = "relay.park"
	// DeadLetter is a dead letter written; the letter carries its
	// context, so a replay continues it.
	DeadLetter = "relay.dead_letter"
)

// TracerName is the instrumentation scope of relay's spans.
const TracerName = "github.com/relaydev/relay"

// Attributes of relay's spans.
const (
	AttrDest     = attribute.Key("relay.destination")
	AttrType     = attribute.Key("relay.event_type")
	AttrEventID  = attribute.Key("relay.event_id")
	AttrAttempt  = attribute.Key("relay.attempt")
	AttrOutcome  = attribute.Key("relay.outcome")
	AttrReason   = attribute.Key("relay.reason")
	AttrDuration = attribute.Key("relay.attempt.duration_ms")
	AttrRetryIn  = attribute.Key("relay.retry_in_ms")
	AttrSeq      = attribute.Key("relay.seq")
	AttrDup      = attribute.Key("relay.duplicate")
	AttrStatus   = attribute.Key("http.response.status_code")
	AttrHost     = attribute.Key("server.address")
	AttrPort     = attribute.Key("server.port")
	AttrSubject  = attribute.Key("messaging.destination.name")
)

// Tracer is tp's tracer for relay's spans, nil (no tracing) when tp is.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName, trace.WithInstrumentationVersion(version.Version))
}

// End ends span, failed with err if it is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
