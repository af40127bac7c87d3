package stream

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Envelope is an event as it travels in a stream message: its id, order key
// and retry state in relay's headers, the producer's own headers, and the
// body. Decode reads one from a stored message; Header and Msg write one for
// every publish of an event, whose Kind says which contract headers it
// carries and what its dedup id is.
type Envelope struct {
	// ID is the event id (webhook-id).
	ID string
	// Dest is the destination. Decode takes it from the subject; for a
	// ReplayedLog publish it is the destination replayed to.
	Dest string
	// Type is the event's type (Relay-Event-Type, or the subject of a
	// typed event), empty for an event published for one destination.
	Type string
	// Key is the producer's order key (Relay-Order-Key), empty when the
	// message carries none. Events published to relay.in.D.K by a plain NATS
	// client without the header have no Key: the stored subject
	// (relay.ev.D.B) keeps only the key's bucket.
	Key string
	// Attempt is the number of attempts made before this message.
	Attempt int
	// Origin is the stream sequence of the message the event first came in
	// as. Decode sets it to Seq unless the message carries another. A
	// Promoted publish always carries it (schedule refuses to park an event
	// without one).
	Origin uint64
	// Published is when the producer published the event. Decode sets it to
	// Stored unless the message carries another.
	Published time.Time
	// Headers holds the message's headers as given: Decode keeps the stored
	// headers, relay's included, without copying them. Only the event's own
	// headers (not IsContractHeader) are written on a publish, and passed on
	// by HTTPHeader.
	Headers nats.Header
	// Body is the event body.
	Body []byte

	// Subject, Seq and Stored locate the message Decode read: its subject,
	// stream sequence and the time the stream stored it. Seq also makes the
	// dedup id of a replay (see Kind).
	Subject string
	Seq     uint64
	Stored  time.Time
	// NotBefore, on a Split publish, is when its delivery may be attempted
	// (Relay-Not-Before): a retry's wait.
	NotBefore time.Time
	// Dests, on a Fanned publish, are the shared destinations it is for
	// (Relay-Fan-Dests).
	Dests []string
	// Dedup, on a Produced publish, is its dedup id when it is not the
	// event id: relay's producer scopes idempotency to who publishes and
	// to what (see relay.DedupID), and the id then travels in
	// Relay-Event-Id.
	Dedup string
	// Copied reports a message relay republished (a retry from Redis, a
	// replay, a move to a lane: it carries Relay-Event-Id, a dedup id of
	// relay's, park:, replay:, log: or lane:, and a valid seal), not one a
	// producer published. A typed event's copy for a destination (Routed)
	// is that destination's original, not Copied.
	Copied bool
	// Unsealed, on a message Decode read, names the headers only relay may
	// set (see ProducerHeader) that the message carried without a valid
	// seal: Decode dropped them, from Headers too, and read the message as
	// a producer's without them.
	Unsealed []string
}

// Kind is which publish of an event a message is. It decides the dedup id
// (Nats-Msg-Id) and which of relay's headers the message carries:
//
//	kind                Nats-Msg-Id                      Relay-Event-Id  Relay-Attempt, -Origin-Seq, -Published
//	Produced            Dedup, else the event id         when Dedup set  no
//	Promoted            park:<id>:<attempt>@<origin>     yes             yes (published when set)
//	ReplayedDeadLetter  replay:<Seq of the dead letter>  yes             no: a replay starts again
//	ReplayedLog         log:<Dest>:<Seq in the log>      yes             no: a replay starts again
//	Routed              route:<Seq of the typed event>:<Dest>  yes       Relay-Published only
//	Laned               lane:<Seq on the shared consumer>  yes           yes
//	Fanned              fan:<Origin>:<Dest>              yes             Relay-Published, -Origin-Seq, -Fan-Dests
//	Split               route:<Origin>:<Dest>            yes             yes, and Relay-Not-Before when set
//
// Every kind carries the event's own headers, the body, Relay-Order-Key
// when Key is set and Relay-Event-Type when Type is. No other header is
// carried over. Every kind but Produced is sealed (Relay-Seal, see Seal):
// Decode trusts relay's headers on a message only when its seal holds.
type Kind uint8

const (
	// Produced is a producer's publish.
	Produced Kind = iota
	// Promoted is an event parked in Redis republished by the promoter
	// once due. Its dedup id names the attempt and the origin, so that a
	// promoter that crashed after publishing republishes nothing twice,
	// and another message's copy of the same event is not dropped.
	Promoted
	// ReplayedDeadLetter is a dead letter replayed; Seq is the dead
	// letter's sequence, so a replay run twice publishes once.
	ReplayedDeadLetter
	// ReplayedLog is an event replayed from the event log (relay replay);
	// Seq is its sequence in the log and Dest the destination replayed to.
	ReplayedLog
	// Routed is a typed event's copy for one destination subscribed to
	// its type, written by the router; Seq is the typed event's sequence,
	// so a router that crashed after publishing publishes nothing twice.
	Routed
	// Laned is an event of a shared destination moved to the
	// destination's lane (LaneSubject) because it could not keep up; Seq
	// is the sequence of the message moved, so a move retried after a
	// crash publishes nothing twice. It keeps the attempts made, the
	// origin and the publish time.
	Laned
	// Fanned is a typed event's fan-out to shared destinations (on
	// FanSubject, the destinations Dests in Relay-Fan-Dests):
	// Origin is the typed event's sequence and Dest a name for the set of
	// destinations (the router's: a hash of them), so a router that
	// crashed after publishing publishes nothing twice.
	Fanned
	// Split is one destination's share of a Fanned message, published to
	// the destination as a copy of its own when the shared loop cannot
	// deliver it from the fan-out (the destination is paused, behind, or
	// the attempt must wait): its dedup id is the Routed copy's the
	// router would have written (Origin is the typed event's sequence),
	// and it keeps the attempts made and the wait (NotBefore).
	Split
)

// String names k.
func (k Kind) String() string {
	switch k {
	case Produced:
		return "produced"
	case Promoted:
		return "promoted"
	case ReplayedDeadLetter:
		return "replayed dead letter"
	case ReplayedLog:
		return "replayed log"
	case Routed:
		return "routed"
	case Laned:
		return "laned"
	case Fanned:
		return "fanned"
	case Split:
		return "split"
	}
	return "kind " + strconv.Itoa(int(k))
}

// routedPrefix starts the dedup id of a Routed publish.
const routedPrefix = "route:"

// copiedPrefixes start the dedup ids of the publishes that are Copied.
var copiedPrefixes = [...]string{"park:", "replay:", "log:", "lane:"}

// copied reports whether msgID is the dedup id of a Copied publish.
func copied(msgID string) bool {
	for _, p := range copiedPrefixes {
		if strings.HasPrefix(msgID, p) {
			return true
		}
	}
	return false
}

// maxAttempt bounds the attempt count a message may carry; a larger one is
// read as none.
const maxAttempt = 1_000_000

// Decode reads the envelope of the event stored at seq on subject at time
// stored. The id is Relay-Event-Id, else Nats-Msg-Id, else one made from
// seq and stored; an attempt count that is not a number in [0, 1000000)
// is read as 0; Origin defaults to seq and Published to stored. The
// headers only relay may set (see ProducerHeader) are read only when the
// message carries seal's valid seal; without it they are dropped (see
// Unsealed), so that a producer cannot set the attempts made, the origin,
// the publish time, the wait or the type of an event it publishes. A
// message carrying Relay-Event-Id is Copied only when it is sealed and its
// dedup id is of relay's republishes (park:, replay:, log:, lane:). It
// fails only when subject is not an event subject.
func Decode(subject string, seq uint64, stored time.Time, h nats.Header, body []byte, seal *Seal) (Envelope, error) {
	var p Parsed
	var err error
	if subject != FanSubject { // a fan-out message has no destination of its own
		if p, err = ParseSubject(subject); err != nil {
			return Envelope{}, err
		}
	}
	e := Envelope{Dest: p.Dest, Subject: subject, Seq: seq, Stored: stored, Headers: h, Body: body, Origin: seq, Published: stored}
	sealed := h[HdrSeal] != nil && seal.Valid(h)
	if !sealed {
		if e.Unsealed = unsealed(h); e.Unsealed != nil {
			h = without(h, e.Unsealed)
			e.Headers = h
		}
	}
	if e.ID = eventID(h); e.ID == "" {
		e.ID = "evt_" + strconv.FormatUint(seq, 10) + "_" + strconv.FormatInt(stored.UnixMilli(), 36)
	} else if h.Get(HdrEventID) != "" {
		e.Copied = sealed && copied(h.Get(HdrMsgID))
	}
	e.read(h)
	return e, nil
}

// FromHeader reads the envelope that relay's headers in h say, as Decode
// reads them, but trusting them as they are: for headers relay read from a
// message already (Decode's Headers, kept in a parked entry or a dead
// letter) or wrote itself. ID is Relay-Event-Id, else Nats-Msg-Id; Dedup is
// Nats-Msg-Id where it is not ID, so that MsgID(Produced) is the dedup id h
// carries. A field whose header h lacks, or holds a value Decode would not
// take, is zero; Headers is h.
func FromHeader(h nats.Header) Envelope {
	e := Envelope{ID: eventID(h), Headers: h}
	if id := h.Get(HdrMsgID); id != e.ID {
		e.Dedup = id
	}
	e.read(h)
	return e
}

// eventID is the event id h names: Relay-Event-Id, else Nats-Msg-Id,
// empty if neither.
func eventID(h nats.Header) string {
	if id := h.Get(HdrEventID); id != "" {
		return id
	}
	return h.Get(HdrMsgID)
}

// read sets e's order key and type from h, and its publish time, attempt
// count, origin, wait and fan-out destinations where h carries a valid one
// (see Decode).
func (e *Envelope) read(h nats.Header) {
	e.Key, e.Type = h.Get(HdrKey), h.Get(HdrType)
	if s := h.Get(HdrPublished); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			e.Published = t
		}
	}
	if s := h.Get(HdrAttempt); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < maxAttempt {
			e.Attempt = n
		}
	}
	if s := h.Get(HdrOrigin); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n > 0 {
			e.Origin = n
		}
	}
	if s := h.Get(HdrNotBefore); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			e.NotBefore = t
		}
	}
	if s := h.Get(HdrFanDests); s != "" {
		e.Dests = strings.Split(s, ",")
	}
}

// NotBefore is the wait that a Split copy's headers h carry
// (Relay-Not-Before, Envelope.NotBefore as Decode reads it), zero when h
// carries none or seal's seal does not hold: a producer's is not relay's.
// The seal is checked only when h carries a wait, so that reading it of
// every message costs little.
func NotBefore(h nats.Header, seal *Seal) time.Time {
	s := h.Get(HdrNotBefore)
	if s == "" || !seal.Valid(h) {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// DecodeTyped reads the envelope of a typed event stored at seq on subject
// (relay.type.T) at time stored, as Decode reads a destination's: its
// Dest is empty and its Type is T.
func DecodeTyped(subject string, seq uint64, stored time.Time, h nats.Header, body []byte) (Envelope, error) {
	t, ok := TypeOf(subject)
	if !ok {
		return Envelope{}, fmt.Errorf("subject %q is not a typed event's", subject)
	}
	e := Envelope{Type: t, Subject: subject, Seq: seq, Stored: stored, Headers: h, Body: body, Origin: seq, Published: stored}
	if e.ID = eventID(h); e.ID == "" {
		e.ID = "evt_" + strconv.FormatUint(seq, 10) + "_" + strconv.FormatInt(stored.UnixMilli(), 36)
	}
	e.Key = h.Get(HdrKey)
	return e, nil
}

// MsgID is the dedup id of a publish of kind k (see Kind).
func (e Envelope) MsgID(k Kind) string {
	switch k {
	case Promoted:
		return "park:" + e.ID + ":" + strconv.Itoa(e.Attempt) + "@" + strconv.FormatUint(e.Origin, 10)
	case ReplayedDeadLetter:
		return "replay:" + strconv.FormatUint(e.Seq, 10)
	case ReplayedLog:
		return "log:" + e.Dest + ":" + strconv.FormatUint(e.Seq, 10)
	case Routed:
		return routedPrefix + strconv.FormatUint(e.Seq, 10) + ":" + e.Dest
	case Laned:
		return "lane:" + strconv.FormatUint(e.Seq, 10)
	case Fanned:
		return "fan:" + strconv.FormatUint(e.Origin, 10) + ":" + e.Dest
	case Split:
		return routedPrefix + strconv.FormatUint(e.Origin, 10) + ":" + e.Dest
	}
	if e.Dedup != "" {
		return e.Dedup
	}
	return e.ID
}

// Header returns the headers of a publish of kind k: the event's own
// headers and the contract headers k carries (see Kind), sealed with seal
// unless k is Produced. A nil seal seals nothing: relay's headers on the
// message are then read as a producer's, and dropped.
func (e Envelope) Header(k Kind, seal *Seal) nats.Header {
	h := OwnHeader(e.Headers)
	h.Set(HdrMsgID, e.MsgID(k))
	if e.Key != "" {
		h.Set(HdrKey, e.Key)
	}
	if e.Type != "" {
		h.Set(HdrType, e.Type)
	}
	if k == Produced {
		if e.Dedup != "" {
			h.Set(HdrEventID, e.ID)
		}
		return h
	}
	h.Set(HdrEventID, e.ID)
	if (k == Routed || k == Fanned) && !e.Published.IsZero() {
		h.Set(HdrPublished, e.Published.UTC().Format(time.RFC3339Nano))
	}
	if k == Fanned {
		h.Set(HdrOrigin, strconv.FormatUint(e.Origin, 10))
		h.Set(HdrFanDests, strings.Join(e.Dests, ","))
	}
	if k == Split {
		if e.Attempt > 0 {
			h.Set(HdrAttempt, strconv.Itoa(e.Attempt))
		}
		if !e.Published.IsZero() {
			h.Set(HdrPublished, e.Published.UTC().Format(time.RFC3339Nano))
		}
		h.Set(HdrOrigin, strconv.FormatUint(e.Origin, 10))
		if !e.NotBefore.IsZero() {
			h.Set(HdrNotBefore, e.NotBefore.UTC().Format(time.RFC3339Nano))
		}
	}
	if k == Promoted || k == Laned {
		h.Set(HdrAttempt, strconv.Itoa(e.Attempt))
		if !e.Published.IsZero() {
			h.Set(HdrPublished, e.Published.UTC().Format(time.RFC3339Nano))
		}
		h.Set(HdrOrigin, strconv.FormatUint(e.Origin, 10))
	}
	seal.seal(h)
	return h
}

// Msg is the message of a publish of kind k to subject, sealed with seal
// unless k is Produced (see Header).
func (e Envelope) Msg(k Kind, subject string, seal *Seal) *nats.Msg {
	return &nats.Msg{Subject: subject, Header: e.Header(k, seal), Data: e.Body}
}

// OwnHeader returns the event's own headers in h (those that are not
// IsContractHeader), never nil.
func OwnHeader(h nats.Header) nats.Header {
	out := nats.Header{}
	for name, vs := range h {
		if !IsContractHeader(name) {
			out[name] = vs
		}
	}
	return out
}

// HTTPHeader returns the event's own headers to pass on to its
// destination, canonicalised, nil if it has none.
func (e Envelope) HTTPHeader() http.Header {
	var out http.Header
	for name, vs := range e.Headers {
		if !IsContractHeader(name) {
			if out == nil {
				out = make(http.Header, len(e.Headers))
			}
			ck := http.CanonicalHeaderKey(name)
			out[ck] = append(out[ck], vs...)
		}
	}
	return out
}

// TypeHTTPHeader is the HTTP header that carries a typed event's type to
// its destination: the envelope's Relay-Event-Type, canonicalised.
var TypeHTTPHeader = http.CanonicalHeaderKey(HdrType)

// RoutedOverhead is how many bytes a Routed copy of a typed event with id
// and type typ may have more than the event as its producer published it:
// the headers the router adds or lengthens (a dedup id route:<seq>:<dest>
// in place of the producer's, Relay-Event-Id, Relay-Published,
// Relay-Event-Type and the seal) and a destination's longer subject.
func RoutedOverhead(id, typ string) int {
	const dedup = len(HdrMsgID) + len(routedPrefix) + 20 + 1 + 64 + 4 // route:<seq>:<dest>, replacing the id
	const published = len(HdrPublished) + len("2006-01-02T15:04:05.999999999Z") + 4
	const subject = len(InPrefix) + 1 + 64 + 1 + 64 // relay.in.<dest>.<key token>
	return dedup + published + subject + len(HdrEventID) + len(id) + 4 + len(HdrType) + len(typ) + 4 + SealHeaderBytes
}

// Producers publish to the same subjects as relay's own republishes (a
// retry from Redis, a replay, a typed event's copy all go to
// relay.in.<dest>), so the subject cannot tell relay's messages from a
// producer's. What does is a seal: relay's republishes carry Relay-Seal, an
// HMAC-SHA256 of their dedup id and relay's headers under a secret kept in
// the relay_state bucket, which producers cannot read. Decode trusts
// relay's headers (the attempts made, the origin, the publish time, the
// wait, the type, a fan-out's destinations) only on a message whose seal
// holds; on any other message they are dropped, as if absent.
//
// A producer may set, of relay's headers, Relay-Event-Id and
// Relay-Order-Key only (see ProducerHeader).

// SealSecretKey is the key, in the relay_state bucket, of the secret
// that seals relay's republishes: one for every replica and every CLI run,
// created by the first that needs it.
const SealSecretKey = "header-seal-secret"

// sealLen is the length of a seal as a header value: base64 (URL, no
// padding) of the 32 bytes of an HMAC-SHA256.
const sealLen = 43

// SealHeaderBytes is how many bytes Relay-Seal adds to a message.
const SealHeaderBytes = len(HdrSeal) + sealLen + 4 // "K: V\r\n"

// sealedHeaders are the headers a seal covers, in this order: the dedup id,
// the event id and every header only relay may set.
var sealedHeaders = [...]string{HdrMsgID, HdrEventID, HdrAttempt, HdrOrigin, HdrPublished, HdrNotBefore, HdrType, HdrFanDests}

// Seal seals relay's republishes and checks the seal of a stored message.
// A nil *Seal seals nothing and finds no seal valid: every message is then
// read as a producer's. Safe for concurrent use.
type Seal struct {
	key   []byte
	state sync.Pool // of *sealState
}

// sealState is one HMAC and the buffers of one sealing.
type sealState struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// MinSealKey is the shortest secret NewSeal accepts, in bytes.
const MinSealKey = 32

// NewSeal returns the seal keyed by secret, at least MinSealKey bytes.
func NewSeal(secret []byte) (*Seal, error) {
	if len(secret) < MinSealKey {
		return nil, fmt.Errorf("header seal: a secret of %d bytes is too short; it needs at least %d", len(secret), MinSealKey)
	}
	s := &Seal{key: append([]byte(nil), secret...)}
	s.state.New = func() any { return &sealState{mac: hmac.New(sha256.New, s.key), buf: make([]byte, 0, 256)} }
	return s, nil
}

// LoadSeal returns the seal of relay's republishes, keyed by the secret in
// the relay_state bucket, creating the secret if none exists yet.
func LoadSeal(ctx context.Context, js jetstream.JetStream) (*Seal, error) {
	secret, err := LoadSecret(ctx, js, SealSecretKey, "the header seal's secret")
	if err != nil {
		return nil, err
	}
	return NewSeal(secret)
}

// LoadSecret returns the 32 random bytes stored under key in the relay_state
// bucket, creating them if the key holds none: every replica and CLI run
// that asks gets the same secret. what names the secret in errors.
func LoadSecret(ctx context.Context, js jetstream.JetStream, key, what string) ([]byte, error) {
	kv, err := js.KeyValue(ctx, StateBucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", StateBucket, err)
	}
	for range 3 {
		e, err := kv.Get(ctx, key)
		if err == nil && len(e.Value()) == 32 {
			return e.Value(), nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read %s (%s/%s): %w", what, StateBucket, key, err)
		}
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		if _, err := kv.Create(ctx, key, secret); err == nil {
			return secret, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store %s (%s/%s): %w", what, StateBucket, key, err)
		}
		// Another replica created it first: read theirs.
	}
	return nil, fmt.Errorf("cannot agree on %s with the other replicas (%s/%s)", what, StateBucket, key)
}

// sum computes h's seal into st.sum.
func (s *Seal) sum(st *sealState, h nats.Header) {
	b := st.buf[:0]
	for _, name := range sealedHeaders {
		v := h.Get(name)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	st.mac.Reset()
	_, _ = st.mac.Write(b)
	st.mac.Sum(st.sum[:0])
	if cap(b) <= 4096 {
		st.buf = b
	}
}

// seal sets h's Relay-Seal. A nil s leaves h unsealed.
func (s *Seal) seal(h nats.Header) {
	if s == nil {
		return
	}
	st := s.state.Get().(*sealState)
	s.sum(st, h)
	h[HdrSeal] = []string{base64.RawURLEncoding.EncodeToString(st.sum[:])}
	s.state.Put(st)
}

// Valid reports whether h carries a seal of s over its values: the message
// is one relay published. Always false for a nil s.
func (s *Seal) Valid(h nats.Header) bool {
	v := h.Get(HdrSeal)
	if s == nil || len(v) != sealLen {
		return false
	}
	st := s.state.Get().(*sealState)
	s.sum(st, h)
	var want [sealLen]byte
	base64.RawURLEncoding.Encode(want[:], st.sum[:])
	s.state.Put(st)
	// In constant time, as hmac.Equal, without copying v.
	var diff byte
	for i := range sealLen {
		diff |= want[i] ^ v[i]
	}
	return diff == 0
}

// ProducerHeader reports whether a producer may set header name: any but
// relay's (Relay-*), of which Relay-Event-Id and Relay-Order-Key only.
// Case does not matter.
func ProducerHeader(name string) bool {
	if !hasPrefixFold(name, "relay-") {
		return true
	}
	return strings.EqualFold(name, HdrEventID) || strings.EqualFold(name, HdrKey)
}

// unsealed returns the headers of h that are relay's own and that a
// producer may not set (not ProducerHeader), nil if none: a message
// without a valid seal carrying them did not get them from relay.
func unsealed(h nats.Header) []string {
	var out []string
	for name := range h {
		if !ProducerHeader(name) {
			out = append(out, name)
		}
	}
	return out
}

// without returns a copy of h without the headers named.
func without(h nats.Header, names []string) nats.Header {
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = vs
	}
	for _, n := range names {
		delete(out, n)
	}
	return out
}

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
