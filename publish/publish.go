// Package publish is relay's Go producer: it publishes events to a
// destination or by type, with the idempotency, size and key checks relay
// applies over HTTP, over a NATS connection (no relay process in between).
package publish

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/tenant"
)

// Event is what a producer publishes.
type Event struct {
	// Tenant is the id of the tenant the event is published for: Dest
	// names one of its destinations, or Type goes to its destinations
	// subscribed to it. Optional: "" publishes for the destinations of no
	// tenant.
	Tenant string
	// Dest names the destination. Either Dest or Type is required.
	Dest string
	// Type is the event's type (dot-separated tokens, such as
	// order.created): the event goes to every destination subscribed to
	// it, and to none if none is (counted, not an error).
	Type string
	// Key is the order key. Optional: events with the same key of an ordered
	// destination are delivered in publish order.
	Key string
	// ID is the event id, sent as webhook-id and used to drop re-publishes
	// within the duplicate window: of the same Scope to the same Dest or
	// Type (see DedupID). Optional: a unique one is generated.
	ID string
	// Scope is who publishes, for idempotency: an id is a duplicate only
	// of one published with the same scope. Optional: the HTTP API sets
	// the API key's id, so that no key can suppress, or learn of, another
	// key's events by claiming their ids.
	Scope string
	// Headers are passed on to the destination as HTTP headers. Optional.
	Headers map[string]string
	// Data is the body, POSTed as is. Required (may be empty JSON "{}").
	Data []byte
}

// Published is the outcome of a publish.
type Published struct {
	ID        string `json:"id"`
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"` // the id was published before (same scope and target, same event); nothing new was stored
}

// ErrUnknownDestination is returned when publishing for a destination that
// does not exist.
var ErrUnknownDestination = errors.New("unknown destination")

// ErrUnknownTenant is returned when publishing for a tenant that does not
// exist.
var ErrUnknownTenant = errors.New("unknown tenant")

// ErrIDConflict is returned for an id published within the duplicate
// window, with the same scope to the same target, as an event with
// another body, order key or headers: nothing was stored.
var ErrIDConflict = errors.New("event id conflict")

// ErrEventTooLarge is returned when an event with its headers is larger
// than the events stream or the NATS server accepts.
var ErrEventTooLarge = errors.New("event too large")

// Producer publishes events, checking first that their destination exists.
type Producer struct {
	js    jetstream.JetStream
	store *destination.Store
	// tenants is opened by the first publish for a tenant: a producer
	// that publishes for none needs no access to the tenants' bucket.
	tenantsMu sync.Mutex
	tenants   *tenant.Store
	maxSize   int64 // the events stream's largest message (0: unknown)
	// now is the clock that ages what known says. Default time.Now.
	now func() time.Time

	mu    sync.Mutex
	known map[string]time.Time // destination, or tenant+knownTenant -> when it was last seen to exist

	pubOnce sync.Once
	pub     jetstream.JetStream // publisher()
	pubErr  error

	// tracer makes the publish spans (nil: no tracing).
	tracer trace.Tracer
}

// TraceWith makes p trace its publishes with tp: a span (SpanPublish) per
// event, a child of ctx's span, or where ctx has none, of the event's own
// traceparent header; the event carries the span's context in its
// traceparent and tracestate headers, and relay's spans of its delivery
// continue it. Call it before p publishes; nil (the default) traces
// nothing.
func (p *Producer) TraceWith(tp trace.TracerProvider) {
	p.tracer = spans.Tracer(tp)
}

// NewProducer returns a producer publishing through js.
func NewProducer(ctx context.Context, js jetstream.JetStream) (*Producer, error) {
	st, err := destination.NewStore(ctx, js)
	if err != nil {
		return nil, err
	}
	p := &Producer{js: js, store: st, known: map[string]time.Time{}, now: time.Now}
	if s, err := js.Stream(ctx, stream.EventsStream); err == nil {
		p.maxSize = int64(s.CachedInfo().Config.MaxMsgSize)
	}
	return p, nil
}

// knownFor is how long a producer trusts that a destination exists.
const knownFor = 10 * time.Second

// MaxIDLen bounds event ids.
const MaxIDLen = 256

// ValidateEventID reports an id that cannot be an event's webhook-id: one
// longer than MaxIDLen or with control characters; or that cannot be
// looked up or skipped: "." and "..", which no URL path segment can carry
// (HTTP clients, browsers and servers take them for the path's own dot
// segments, escaped or not). Any other id can, percent-encoded
// (url.PathEscape: '/' as %2F).
func ValidateEventID(id string) error {
	if len(id) > MaxIDLen || strings.ContainsFunc(id, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("event id must be at most %d printable characters", MaxIDLen)
	}
	if id == "." || id == ".." {
		return fmt.Errorf(`event ids "." and ".." cannot be looked up or skipped (a URL path takes them for its own dot segments): choose another id`)
	}
	return nil
}

// MaxKeyLen bounds order keys, in bytes. A key travels in the
// Relay-Order-Key header of each of its events, copy and retry, and in
// their delivery log records and dead letters; it is compared whole (relay
// replay --key, relay dest heads). 256 bytes, as MaxIDLen for ids, holds
// any natural key (a tenant and an entity id, a URL path, a UUID or a
// SHA-256 in hex several times over) and keeps the header small next to
// the events' own.
const MaxKeyLen = 256

// ValidateOrderKey reports an order key that cannot be kept as given: one
// longer than MaxKeyLen bytes, or with a control character (a NATS header
// cannot carry CR or LF: the stored key would differ from the one given).
func ValidateOrderKey(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("the order key is %d bytes; at most %d", len(key), MaxKeyLen)
	}
	if i := strings.IndexFunc(key, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(key[i:])
		return fmt.Errorf("the order key has a control character (%#02x) at byte %d: use printable characters", r, i)
	}
	return nil
}

// Publish stores ev in the event stream and returns once JetStream confirmed.
func (p *Producer) Publish(ctx context.Context, ev Event) (Published, error) {
	m, span, err := p.prepare(ctx, &ev)
	if err != nil {
		return Published{}, err
	}
	ack, err := p.js.PublishMsg(ctx, m)
	if err == nil && ack.Duplicate {
		err = p.sameAsStored(ctx, ev.ID, ack.Sequence, m)
	} else if err != nil {
		err = publishErr(m, err)
	}
	if err != nil {
		endPublish(span, nil, err)
		return Published{}, err
	}
	endPublish(span, ack, nil)
	return Published{ID: ev.ID, Stream: ack.Stream, Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// endPublish ends a publish's span (if there is one) with JetStream's
// answer: ack, or err.
func endPublish(span trace.Span, ack *jetstream.PubAck, err error) {
	if span == nil {
		return
	}
	if ack != nil {
		span.SetAttributes(spans.AttrSeq.Int64(int64(ack.Sequence)), spans.AttrDup.Bool(ack.Duplicate))
	}
	spans.End(span, err)
}

func publishErr(m *nats.Msg, err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("publish to %s: no stream answered (are relay's streams set up? is the key a single subject token?): %w", m.Subject, err)
	}
	return fmt.Errorf("publish to %s: %w", m.Subject, err)
}

// prepare checks ev, gives it an id if it has none, and returns its
// message, and when p traces, the publish's span (the caller ends it).
func (p *Producer) prepare(ctx context.Context, ev *Event) (_ *nats.Msg, span trace.Span, err error) {
	if ev.Tenant != "" {
		if err := stream.ValidateTenantID(ev.Tenant); err != nil {
			return nil, nil, err
		}
	}
	switch {
	case ev.Dest != "" && ev.Type != "":
		return nil, nil, errors.New("an event goes to one destination or by its type, not both: give Dest or Type")
	case ev.Type != "":
		if err := stream.ValidateEventType(ev.Type); err != nil {
			return nil, nil, err
		}
	default:
		if err := stream.ValidateDestName(ev.Dest); err != nil {
			return nil, nil, err
		}
	}
	if err := ValidateOrderKey(ev.Key); err != nil {
		return nil, nil, err
	}
	if ev.ID == "" {
		ev.ID = NewEventID()
	}
	if err := ValidateEventID(ev.ID); err != nil {
		return nil, nil, err
	}
	if ev.Tenant != "" {
		if err := p.checkTenant(ctx, ev.Tenant); err != nil {
			return nil, nil, err
		}
	}
	dest, typ := stream.DestRef(ev.Tenant, ev.Dest), ev.Type
	if ev.Type == "" {
		if err := p.checkDest(ctx, ev.Tenant, ev.Dest); err != nil {
			return nil, nil, err
		}
	} else if ev.Tenant != "" {
		typ += "\x00" + ev.Tenant // the tenant's type: ids do not collide with another's
	}
	env := stream.Envelope{ID: ev.ID, Dest: dest, Key: ev.Key, Headers: make(nats.Header, len(ev.Headers)), Body: ev.Data,
		Dedup: DedupID(ev.Scope, dest, typ, ev.ID)}
	for k, v := range ev.Headers {
		if err := destination.ValidateEventHeader(k, v); err != nil {
			return nil, nil, err
		}
		env.Headers.Set(k, v)
	}
	subject := stream.InSubject(dest, ev.Key)
	switch {
	case ev.Type != "" && ev.Tenant != "":
		subject = stream.TenantTypeSubject(ev.Tenant, ev.Type)
	case ev.Type != "":
		// The key travels in Relay-Order-Key only: the router puts it in
		// each copy's subject.
		subject = stream.TypeSubject(ev.Type)
	}
	if p.tracer != nil {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = stream.ExtractTrace(ctx, env.Headers)
		}
		attrs := []attribute.KeyValue{spans.AttrEventID.String(ev.ID), spans.AttrSubject.String(subject), attribute.String("messaging.system", "nats"), attribute.String("messaging.operation.type", "send")}
		if ev.Type != "" {
			attrs = append(attrs, spans.AttrType.String(ev.Type))
		} else {
			attrs = append(attrs, spans.AttrDest.String(dest))
		}
		ctx, span = p.tracer.Start(ctx, spans.Publish, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		defer func() {
			if err != nil {
				spans.End(span, err)
				span = nil
			}
		}()
		env.Headers = stream.WithTrace(ctx, env.Headers)
	}
	m := env.Msg(stream.Produced, subject, nil)
	size := int64(len(m.Data) + len(m.Subject))
	if ev.Type != "" {
		// Room for what the router adds to each copy (see TypedOverhead).
		size += TypedOverhead(ev.ID, ev.Type)
	}
	for k, vs := range m.Header {
		for _, v := range vs {
			size += int64(len(k) + len(v) + 4)
		}
	}
	if p.maxSize > 0 && size > p.maxSize {
		return nil, nil, fmt.Errorf("%w: it is %d bytes with its headers; the events stream accepts at most %d (relay run --max-event-size); nothing was published", ErrEventTooLarge, size, p.maxSize)
	}
	if max := p.js.Conn().MaxPayload(); size > max {
		return nil, nil, fmt.Errorf("%w: it is %d bytes with its headers; the NATS server accepts at most %d (its max_payload); nothing was published", ErrEventTooLarge, size, max)
	}
	return m, span, nil
}

// BatchError says which event of a batch PublishBatch refused, and why;
// it published none.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("event %d of the batch: %v", e.Index, e.Err) }

func (e *BatchError) Unwrap() error { return e.Err }

// BatchResult is the outcome of one event of a batch: Published, or Err
// when JetStream did not confirm it stored the event (it may have: publish
// it again with the same ID, a duplicate within the window stores nothing).
type BatchResult struct {
	Published
	Err error
}

// PublishBatch checks every event as Publish does; if one fails it returns
// a *BatchError and publishes none. Otherwise it publishes them all at once,
// in order (events of one order key keep it), and returns each one's
// outcome once JetStream answered for all, or ctx ended.
func (p *Producer) PublishBatch(ctx context.Context, evs []Event) ([]BatchResult, error) {
	msgs := make([]*nats.Msg, len(evs))
	var evSpans []trace.Span // when p traces, each event's publish
	if p.tracer != nil {
		evSpans = make([]trace.Span, len(evs))
	}
	endAll := func(err error) {
		for _, s := range evSpans {
			if s != nil {
				spans.End(s, err)
			}
		}
	}
	for i := range evs {
		m, span, err := p.prepare(ctx, &evs[i])
		if err != nil {
			endAll(errors.New("not published: another event of the batch was refused"))
			return nil, &BatchError{Index: i, Err: err}
		}
		msgs[i] = m
		if evSpans != nil {
			evSpans[i] = span
		}
	}
	pub, err := p.publisher()
	if err != nil {
		endAll(err)
		return nil, err
	}
	out := make([]BatchResult, len(evs))
	futures := make([]jetstream.PubAckFuture, len(evs))
	for i, m := range msgs {
		out[i].ID = evs[i].ID
		if futures[i], err = pub.PublishMsgAsync(m); err != nil {
			out[i].Err = publishErr(m, err)
		}
	}
	for i, f := range futures {
		if f == nil {
			if evSpans != nil {
				endPublish(evSpans[i], nil, out[i].Err)
			}
			continue
		}
		ack, err := settle(ctx, f)
		switch {
		case errors.Is(err, errNotConfirmed):
			out[i].Err = fmt.Errorf("publish to %s: %w (%w): it may be stored", msgs[i].Subject, err, ctx.Err())
		case err != nil:
			out[i].Err = publishErr(msgs[i], err)
		case ack.Duplicate:
			if out[i].Err = p.sameAsStored(ctx, evs[i].ID, ack.Sequence, msgs[i]); out[i].Err == nil {
				out[i].Stream, out[i].Seq, out[i].Duplicate = ack.Stream, ack.Sequence, true
			}
		default:
			out[i].Stream, out[i].Seq, out[i].Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
		}
		if evSpans != nil {
			endPublish(evSpans[i], ack, out[i].Err)
		}
	}
	return out, nil
}

var errNotConfirmed = errors.New("not confirmed")

// DedupID is the dedup id (Nats-Msg-Id) of event id published with scope
// to dest or, for a typed event, typ: "pub:" and 32 hex digits of a
// SHA-256 of the three. The id itself travels in Relay-Event-Id. So an id
// is a duplicate only of one published with the same scope to the same
// destination or type: another producer (an API key) claiming it stores
// an event of its own, and learns nothing of the first.
func DedupID(scope, dest, typ, id string) string {
	target := "d:" + dest
	if typ != "" {
		target = "t:" + typ
	}
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(scope)+len(target)+len(id))
	for _, s := range [...]string{scope, target, id} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	sum := sha256.Sum256(b)
	return "pub:" + hex.EncodeToString(sum[:16])
}

// sameAsStored checks a publish m that JetStream answered as a duplicate
// of the event at seq: the stored event must have m's body, order key and
// headers (but its trace context, which each publish has its own of), or
// m reused the id for another event (ErrIDConflict). The stored event is
// of the same scope and target (its dedup id is m's). When it cannot be
// read (aged out, or a producer without the permission to read it), the
// duplicate is taken as it is.
func (p *Producer) sameAsStored(ctx context.Context, id string, seq uint64, m *nats.Msg) error {
	stored, err := stream.GetMsg(ctx, p.js, stream.EventsStream, seq, "")
	if err != nil {
		return nil
	}
	was, is := stream.FromHeader(stored.Header), stream.FromHeader(m.Header)
	if was.MsgID(stream.Produced) != is.MsgID(stream.Produced) {
		return nil
	}
	if bytes.Equal(stored.Data, m.Data) && was.Key == is.Key && sameOwnHeaders(stored.Header, m.Header) {
		return nil
	}
	return fmt.Errorf("%w: id %q was published within the duplicate window with another body, key or headers; nothing was stored: give this event an id of its own", ErrIDConflict, id)
}

// sameOwnHeaders reports whether a and b have the same event headers,
// their trace context aside.
func sameOwnHeaders(a, b nats.Header) bool {
	own := func(h nats.Header) map[string][]string {
		out := map[string][]string{}
		for k, vs := range stream.OwnHeader(h) {
			if !stream.IsTraceHeader(k) {
				out[http.CanonicalHeaderKey(k)] = vs
			}
		}
		return out
	}
	oa, ob := own(a), own(b)
	if len(oa) != len(ob) {
		return false
	}
	for k, vs := range oa {
		if !slices.Equal(vs, ob[k]) {
			return false
		}
	}
	return true
}

// settle waits for f's answer until ctx ends; an answer there by then wins
// over the end of ctx.
func settle(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-ctx.Done():
	}
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	default:
		return nil, errNotConfirmed
	}
}

// producerMaxPending bounds a producer's publishes not yet acknowledged.
const producerMaxPending = 16384

// publisher is the producer's JetStream context for asynchronous
// publishes, made once.
func (p *Producer) publisher() (jetstream.JetStream, error) {
	p.pubOnce.Do(func() { p.pub, p.pubErr = stream.AsyncPublisher(p.js, producerMaxPending) })
	return p.pub, p.pubErr
}

// TypedOverhead is how many bytes a copy of a typed event may have more
// than the event: relay's headers and a destination's longer subject.
// Publish refuses a typed event that would not fit in the stream with
// them, so that every subscriber's copy can be stored.
func TypedOverhead(id, typ string) int64 { return int64(stream.RoutedOverhead(id, typ)) }

// checkDest checks that destination name of tenant ("" for none) exists.
func (p *Producer) checkDest(ctx context.Context, tenant, name string) error {
	ref := stream.DestRef(tenant, name)
	if p.knows(ref) {
		return nil
	}
	if _, err := p.store.Get(ctx, ref); err != nil {
		if errors.Is(err, destination.ErrNotFound) {
			if tenant != "" {
				return fmt.Errorf("%w %q of tenant %q: add it with 'relay dest add %s --tenant %s --url ...' first; nothing was published", ErrUnknownDestination, name, tenant, name, tenant)
			}
			return fmt.Errorf("%w %q: add it with 'relay dest add %s --url ...' first; nothing was published", ErrUnknownDestination, name, name)
		}
		return err
	}
	p.seen(ref)
	return nil
}

// knownTenant marks a tenant's entry in Producer.known: no destination's
// name contains it.
const knownTenant = "\x00tenant"

// checkTenant checks that tenant id exists.
func (p *Producer) checkTenant(ctx context.Context, id string) error {
	if p.knows(id + knownTenant) {
		return nil
	}
	ts, err := p.tenantStore(ctx)
	if err != nil {
		return err
	}
	if _, err := ts.Get(ctx, id); err != nil {
		if errors.Is(err, tenant.ErrNotFound) {
			return fmt.Errorf("%w %q: create it with 'relay tenant put %s' first; nothing was published", ErrUnknownTenant, id, id)
		}
		return err
	}
	p.seen(id + knownTenant)
	return nil
}

// ForgetTenant forgets that tenant id and its destinations exist: the
// next publish for it asks again. (Another process's producer trusts what
// it saw for knownFor.)
func (p *Producer) ForgetTenant(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.known, id+knownTenant)
	for k := range p.known {
		if strings.HasPrefix(k, stream.DestRef(id, "")) {
			delete(p.known, k)
		}
	}
}

// tenantStore opens the tenants' bucket the first time it is needed (and
// again after a failure).
func (p *Producer) tenantStore(ctx context.Context) (*tenant.Store, error) {
	p.tenantsMu.Lock()
	defer p.tenantsMu.Unlock()
	if p.tenants == nil {
		ts, err := tenant.Open(ctx, p.js, nil)
		if err != nil {
			return nil, err
		}
		p.tenants = ts
	}
	return p.tenants, nil
}

// knows reports whether what was seen to exist within knownFor.
func (p *Producer) knows(what string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen, ok := p.known[what]
	return ok && p.now().Sub(seen) < knownFor
}

func (p *Producer) seen(what string) {
	p.mu.Lock()
	p.known[what] = p.now()
	p.mu.Unlock()
}

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewEventID returns a new unique event id: "evt_" and 26 characters that
// sort by creation time (48 bits of milliseconds, 80 random bits).
func NewEventID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return "evt_" + idEncoding.EncodeToString(b[:])
}
