// Package dlq owns the dead-letter stream: writing a dead letter with its
// reason and failure history, listing and reading them, and replaying them.
package dlq

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/internal/failpoint"
	"github.com/relaydev/relay/stream"
)

// Attempt is one failed delivery attempt in an event's history.
type Attempt struct {
	N        int           `json:"n"`
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration_ns"`
	Status   int           `json:"status,omitempty"`
	Error    string        `json:"error,omitempty"`
	// URL is the index (0-based), in the destination's URL pool, of the
	// URL attempted; nil for a destination with a single URL.
	URL *int `json:"url,omitempty"`
}

// MaxHistory bounds the attempts kept in a history: the first and the most
// recent ones are kept.
const MaxHistory = 50

// TrimHistory keeps the first attempt and the latest MaxHistory-1.
func TrimHistory(h []Attempt) []Attempt {
	if len(h) <= MaxHistory {
		return h
	}
	out := append([]Attempt{h[0]}, h[len(h)-(MaxHistory-1):]...)
	return out
}

// Letter is a dead letter.
type Letter struct {
	Seq     uint64    `json:"seq"` // sequence in the dead-letter stream (0 before it is written)
	DeadAt  time.Time `json:"dead_at"`
	Dest    string    `json:"dest"`
	EventID string    `json:"event_id"`
	// Key is the event's order key (Relay-Order-Key), empty if it has
	// none. The stored subject keeps only the key's bucket, so a replay
	// takes the key from here.
	Key string `json:"key,omitempty"`
	// Type is the event's type (Relay-Event-Type), empty for an event
	// published to its destination by name. A replay keeps it.
	Type     string `json:"type,omitempty"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
	// LastStatus is the last HTTP status (0: no response).
	LastStatus int    `json:"last_status"`
	LastError  string `json:"last_error,omitempty"`
	// Note is an operator's reason for giving up on the event (reason
	// skipped), or what the reason alone does not say (the header of an
	// invalid_event, why the filter failed for filter_error, why the body
	// template failed for template_error).
	Note string `json:"note,omitempty"`
	// First and Last are the first and last attempt times (zero if none).
	First time.Time `json:"first_attempt,omitzero"`
	Last  time.Time `json:"last_attempt,omitzero"`
	// Subject and StreamSeq locate the original event in the event stream.
	Subject   string    `json:"subject"`
	StreamSeq uint64    `json:"stream_seq"`
	History   []Attempt `json:"history,omitempty"`
	// HistoryOmitted is the number of attempts left out of History so that
	// the letter fits in one message (the first and the latest are kept).
	HistoryOmitted int `json:"history_omitted,omitempty"`
	// EventOmitted says the event's headers and body are not in the letter:
	// with them it would not fit in one message. They are read from the
	// event stream at StreamSeq (Store.Resolve), while it keeps them.
	EventOmitted bool `json:"event_omitted,omitempty"`
	// Malformed, when set, says why the message stored at Seq could not be
	// read as a dead letter; only Seq, Subject, Dest (from the subject) and
	// DeadAt (when it was stored) are known then.
	Malformed string `json:"malformed,omitempty"`
	// Headers are the event's own headers (not relay's).
	Headers nats.Header `json:"headers,omitempty"`
	Body    []byte      `json:"-"`
	// DedupID, when set, replaces the dead letter's dedup id
	// (dlq:<dest>:<StreamSeq>), for a letter that is no stream message's.
	DedupID string `json:"-"`
}

// ReasonCorruptParkedEntry is the reason of a dead letter that holds an
// entry parked in Redis that relay could not read or would not republish;
// its body is the entry as stored. It cannot be replayed.
const ReasonCorruptParkedEntry = "corrupt_parked_entry"

// ErrNotReplayable marks a dead letter that cannot be replayed (malformed,
// or a corrupt parked entry).
var ErrNotReplayable = errors.New("cannot be replayed")

// ErrPermanent marks a dead letter that cannot be written for a reason that
// retrying does not change (no record of it fits in what the server or the
// dead-letter stream accepts).
var ErrPermanent = errors.New("dead letter cannot be stored")

// Writer publishes dead letters.
type Writer struct {
	JS jetstream.JetStream
	// MaxSize caps a dead letter, headers and body, in bytes. Optional,
	// default the connection's max payload, and the dead-letter stream's
	// maximum message size if that is lower.
	MaxSize int
}

// Bounds that keep a dead letter's own part small beside the event: the
// free-text headers, one failure in the history, the whole history.
const (
	maxTextHeader   = 512
	maxAttemptError = 256
	maxHistoryBytes = 32 << 10
)

// Write publishes l to its destination's dead-letter subject and returns only
// once JetStream has stored it. The publish is idempotent per original event
// message, so writing again after a crash stores nothing twice.
//
// A letter always fits in one message: when the event's headers and body do
// not fit beside relay's headers, the letter references the event by its
// sequence instead of copying it (EventOmitted), and a history too long is
// cut in the middle (HistoryOmitted). An error wrapping ErrPermanent means
// not even that fits.
func (w Writer) Write(ctx context.Context, l Letter) (uint64, error) {
	limit := w.MaxSize
	if limit <= 0 {
		limit = int(w.JS.Conn().MaxPayload())
	}
	m, err := Encode(l, limit)
	if err != nil {
		return 0, err
	}
	ack, err := w.JS.PublishMsg(ctx, m)
	if isTooLarge(err) && w.MaxSize <= 0 {
		// The dead-letter stream takes less than the connection: fit that.
		if n := streamLimit(ctx, w.JS); n > 0 && n < limit {
			if m, err = Encode(l, n); err != nil {
				return 0, err
			}
			ack, err = w.JS.PublishMsg(ctx, m)
		}
	}
	if err != nil {
		if isTooLarge(err) {
			return 0, fmt.Errorf("publish dead letter of event %s to %s: %w: %w", l.EventID, m.Subject, ErrPermanent, err)
		}
		return 0, fmt.Errorf("publish dead letter of event %s to %s: %w", l.EventID, m.Subject, err)
	}
	return ack.Sequence, nil
}

// isTooLarge reports a message refused for its size, by the client (the
// server's max payload) or by the stream (its maximum message size).
func isTooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// streamLimit is the dead-letter stream's maximum message size (0: unknown
// or none).
func streamLimit(ctx context.Context, js jetstream.JetStream) int {
	st, err := js.Stream(ctx, stream.DLQStream)
	if err != nil {
		return 0
	}
	return max(int(st.CachedInfo().Config.MaxMsgSize), 0)
}

// Encode builds l's message, at most limit bytes of headers and body: the
// event is left out (referenced by its sequence) if it does not fit with
// the rest, and the history cut to fit. It fails, wrapping ErrPermanent,
// only if relay's own headers alone exceed limit.
func Encode(l Letter, limit int) (*nats.Msg, error) {
	e := stream.LetterEnvelope{
		Dedup: l.DedupID, EventID: l.EventID, Dest: l.Dest, Reason: l.Reason,
		Attempts: l.Attempts, LastStatus: l.LastStatus, Key: l.Key, Subject: l.Subject, Seq: l.StreamSeq,
		DeadAt: l.DeadAt, EventOmitted: l.EventOmitted, Headers: l.Headers, Body: l.Body,
		// A typed event's type, as delivered (Relay-Event-Type): operator
		// events' dead letters are told apart by it.
		Type: cmp.Or(l.Type, stream.FromHeader(l.Headers).Type),
	}
	if l.LastError != "" {
		e.LastError = OneLine(l.LastError, maxTextHeader)
	}
	if l.Note != "" {
		e.Note = OneLine(l.Note, maxTextHeader)
	}
	if !l.First.IsZero() {
		e.First, e.Last = l.First, l.Last
	}

	hist := slices.Clone(TrimHistory(l.History))
	for i := range hist {
		hist[i].Error = OneLine(hist[i].Error, maxAttemptError)
	}
	omitted := len(l.History) - len(hist) + l.HistoryOmitted
	histBudget := maxHistoryBytes
	setHistory := func() {
		var dropped int
		e.History, dropped = fitHistory(hist, histBudget)
		e.HistoryOmitted = omitted + dropped
	}
	setHistory()

	if !e.EventOmitted && e.Size() > limit {
		e.EventOmitted = true
	}
	// Without the event, a limit this low (a few KiB) leaves less room for
	// the history: halve it until the letter fits.
	for e.Size() > limit && e.History != "" {
		histBudget = len(e.History) / 2
		setHistory()
	}
	if size := e.Size(); size > limit {
		return nil, fmt.Errorf("dead letter of event %s: %d bytes without the event and its history, over the %d bytes a message may have: %w", l.EventID, size, limit, ErrPermanent)
	}
	return e.Msg(), nil
}

// fitHistory encodes h in at most budget bytes, leaving out the attempts
// after the first, oldest first, and says how many it left out.
func fitHistory(h []Attempt, budget int) (string, int) {
	for drop := 0; drop < len(h); drop++ {
		kept := h
		if drop > 0 {
			kept = append([]Attempt{h[0]}, h[1+drop:]...)
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // a response's <, > and & stay one byte each
		_ = enc.Encode(kept)
		if s := strings.TrimSuffix(b.String(), "\n"); len(s) <= budget {
			return s, drop
		}
	}
	return "", len(h)
}

// Decode reads a dead letter from a stored message.
func Decode(seq uint64, subject string, h nats.Header, body []byte) (Letter, error) {
	if h == nil {
		return Letter{}, fmt.Errorf("dead letter %d has no headers", seq)
	}
	e, err := stream.DecodeLetter(seq, subject, h, body)
	if err != nil {
		return Letter{}, err
	}
	l := Letter{
		Seq: seq, DeadAt: e.DeadAt, Dest: e.Dest, EventID: e.EventID, Key: e.Key, Type: e.Type,
		Reason: e.Reason, Attempts: e.Attempts, LastStatus: e.LastStatus, LastError: e.LastError, Note: e.Note,
		First: e.First, Last: e.Last, Subject: e.Subject, StreamSeq: e.Seq,
		HistoryOmitted: e.HistoryOmitted, EventOmitted: e.EventOmitted, Headers: e.Headers, Body: e.Body,
	}
	if e.History != "" {
		if err := e.DecodeHistory(&l.History); err != nil {
			return Letter{}, fmt.Errorf("dead letter %d: %w", seq, err)
		}
	}
	return l, nil
}

// OneLine is s on one line (control characters made spaces), cut to limit
// runes with an ellipsis.
func OneLine(s string, limit int) string {
	b := []rune(s)
	for i, r := range b {
		if r == '\r' || r == '\n' || r < ' ' {
			b[i] = ' '
		}
	}
	if len(b) > limit {
		b = append(b[:limit-1], '…')
	}
	return string(b)
}

// Store reads and replays dead letters.
type Store struct {
	js jetstream.JetStream
	st jetstream.Stream
	// tracer makes the replays' spans (nil: no tracing).
	tracer trace.Tracer
	// seal seals the replays, loaded at the first (see stream.Seal).
	seal *lazySeal
}

// lazySeal is relay's seal, loaded from the relay_state bucket when first
// needed: reading dead letters does not need it.
type lazySeal struct {
	mu   sync.Mutex
	seal *stream.Seal
}

func (l *lazySeal) get(ctx context.Context, js jetstream.JetStream) (*stream.Seal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seal == nil {
		s, err := stream.LoadSeal(ctx, js)
		if err != nil {
			return nil, err
		}
		l.seal = s
	}
	return l.seal, nil
}

// SpanReplay is the span of a dead letter replayed.
const SpanReplay = "relay.replay"

// tracerName is the instrumentation scope of relay's spans (relay.TracerName).
const tracerName = "github.com/relaydev/relay"

// WithTracerProvider returns a Store whose replays are traced with tp: a
// span (SpanReplay) per dead letter replayed, a child of ctx's span, or
// where ctx has none, of the span whose context the letter carries (its
// dead-letter write's); the replayed event carries the replay's context.
// nil traces nothing.
func (s *Store) WithTracerProvider(tp trace.TracerProvider) *Store {
	c := *s
	c.tracer = nil
	if tp != nil {
		c.tracer = tp.Tracer(tracerName)
	}
	return &c
}

// Open opens the dead-letter stream (stream.Ensure creates it).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	st, err := js.Stream(ctx, stream.DLQStream)
	if err != nil {
		return nil, fmt.Errorf("open dead-letter stream %s: %w", stream.DLQStream, err)
	}
	return &Store{js: js, st: st, seal: &lazySeal{}}, nil
}

// Filter selects dead letters. Zero fields select everything.
type Filter struct {
	// Scoped: the letters of Tenant's destinations only (Tenant "": of
	// those of no tenant). Otherwise every destination's.
	Scoped bool
	Tenant string
	// Dest is a destination (a stream.DestRef): its letters only.
	Dest   string
	Reason string
	// Status selects by last HTTP status; 0 selects any, -1 selects those
	// that got no response.
	Status int
	// Since and Until bound the time the letter died (Until excluded).
	Since, Until time.Time
	// Seqs selects these dead-letter sequences only.
	Seqs []uint64
	// After selects the letters stored after this dead-letter sequence
	// (a cursor: the last letter of the page before).
	After uint64
}

// Match reports whether l passes f (Seqs aside).
func (f Filter) Match(l Letter) bool {
	switch {
	case f.Dest != "" && l.Dest != f.Dest:
		return false
	case f.Scoped && destTenant(l.Dest) != f.Tenant:
		return false
	case f.Reason != "" && l.Reason != f.Reason:
		return false
	case f.Status > 0 && l.LastStatus != f.Status:
		return false
	case f.Status < 0 && l.LastStatus != 0:
		return false
	case !f.Since.IsZero() && l.DeadAt.Before(f.Since):
		return false
	case !f.Until.IsZero() && !l.DeadAt.Before(f.Until):
		return false
	case f.After > 0 && l.Seq <= f.After:
		return false
	}
	return true
}

func destTenant(dest string) string {
	t, _ := stream.SplitDestRef(dest)
	return t
}

// ErrLetterNotFound is returned for a sequence that holds no dead letter.
var ErrLetterNotFound = errors.New("no such dead letter")

// NotFound is ErrLetterNotFound for sequence seq, as Get returns it.
func NotFound(seq uint64) error { return notFoundError(seq) }

// notFoundError is ErrLetterNotFound for the sequence it is.
type notFoundError uint64

func (e notFoundError) Error() string {
	return fmt.Sprintf("no dead letter with sequence %d (replayed, purged or expired?)", uint64(e))
}

func (e notFoundError) Is(target error) bool { return target == ErrLetterNotFound }

// Get reads one dead letter; ErrLetterNotFound if there is none at seq.
func (s *Store) Get(ctx context.Context, seq uint64) (Letter, error) {
	m, err := s.st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Letter{}, notFoundError(seq)
	}
	if err != nil {
		return Letter{}, err
	}
	return decodeStored(m), nil
}

// decodeStored reads a dead letter from m, or describes it as malformed.
func decodeStored(m *jetstream.RawStreamMsg) Letter {
	l, err := Decode(m.Sequence, m.Subject, m.Header, m.Data)
	if err == nil {
		return l
	}
	l = Letter{Seq: m.Sequence, Subject: m.Subject, DeadAt: m.Time, Malformed: err.Error(), Headers: m.Header, Body: m.Data}
	if d, ok := stream.DLQDest(m.Subject); ok {
		l.Dest = d
	}
	return l
}

// ErrEventGone is Resolve's error for a letter whose event is no longer in
// the events stream.
var ErrEventGone = errors.New("event gone")

// Resolve returns l with its event's headers and body: l itself, or when
// the letter references its event (EventOmitted), l with them read from
// the event stream at l.StreamSeq.
func (s *Store) Resolve(ctx context.Context, l Letter) (Letter, error) {
	if !l.EventOmitted {
		return l, nil
	}
	evs, err := s.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return l, fmt.Errorf("dead letter %d: open stream %s to read its event: %w", l.Seq, stream.EventsStream, err)
	}
	m, err := evs.GetMsg(ctx, l.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return l, fmt.Errorf("dead letter %d holds no copy of event %s (too large to copy) and stream %s no longer holds it at sequence %d (older than the event retention, or deleted): %w", l.Seq, l.EventID, stream.EventsStream, l.StreamSeq, ErrEventGone)
	}
	if err != nil {
		return l, fmt.Errorf("dead letter %d: read event %s at sequence %d of stream %s: %w", l.Seq, l.EventID, l.StreamSeq, stream.EventsStream, err)
	}
	id := stream.FromHeader(m.Header).ID
	if m.Subject != l.Subject || id != "" && id != l.EventID {
		return l, fmt.Errorf("dead letter %d: sequence %d of stream %s holds another message (%s, event %q) than its event %s", l.Seq, l.StreamSeq, stream.EventsStream, m.Subject, id, l.EventID)
	}
	l.Body, l.Headers = m.Data, stream.OwnHeader(m.Header)
	return l, nil
}

// Each calls fn for every dead letter matching f, oldest first, up to the
// newest one stored when it started. fn returning stream.ErrStop ends it
// early without an error.
func (s *Store) Each(ctx context.Context, f Filter, fn func(Letter) error) error {
	if len(f.Seqs) > 0 {
		for _, seq := range f.Seqs {
			l, err := s.Get(ctx, seq)
			if err != nil {
				return err
			}
			if f.Scoped && destTenant(l.Dest) != f.Tenant {
				return notFoundError(seq) // another tenant's is none of this one's
			}
			if !f.Match(l) {
				continue
			}
			if err := fn(l); err != nil {
				if errors.Is(err, stream.ErrStop) {
					return nil
				}
				return err
			}
		}
		return nil
	}
	var filters []string
	if f.Dest != "" || f.Scoped {
		filters = stream.DLQFilters(f.Scoped, f.Tenant, f.Dest)
	}
	// A letter dies after it is stored, so its stream time is a lower bound
	// on nothing; start from Since minus a margin and filter exactly.
	var since time.Time
	if !f.Since.IsZero() {
		since = f.Since.Add(-time.Minute)
	}
	return stream.Read(ctx, s.js, stream.DLQStream, stream.ReadOptions{Filters: filters, After: f.After, Since: since}, func(m *jetstream.RawStreamMsg) error {
		l := decodeStored(m)
		if !f.Match(l) {
			return nil
		}
		return fn(l)
	})
}

// List returns the dead letters matching f, oldest first, at most limit (0: no
// limit).
func (s *Store) List(ctx context.Context, f Filter, limit int) ([]Letter, error) {
	var out []Letter
	err := s.Each(ctx, f, func(l Letter) error {
		out = append(out, l)
		if limit > 0 && len(out) >= limit {
			return stream.ErrStop
		}
		return nil
	})
	return out, err
}

// Summaries is List without each letter's body, event headers and
// history: what a listing, a purge or a count needs, in memory however
// large the events were.
func (s *Store) Summaries(ctx context.Context, f Filter, limit int) ([]Letter, error) {
	var out []Letter
	err := s.Each(ctx, f, func(l Letter) error {
		l.Body, l.Headers, l.History = nil, nil, nil
		out = append(out, l)
		if limit > 0 && len(out) >= limit {
			return stream.ErrStop
		}
		return nil
	})
	return out, err
}

// Delete removes one dead letter (purge). Deleting one that is gone is not
// an error.
func (s *Store) Delete(ctx context.Context, seq uint64) error {
	err := s.st.DeleteMsg(ctx, seq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !isNoSuchMsg(err) {
		return fmt.Errorf("delete dead letter %d: %w", seq, err)
	}
	return nil
}

// isNoSuchMsg reports a delete of a message that is not there. The server
// answers that with the generic "message delete failed" code (10057) and the
// description "no message found".
func isNoSuchMsg(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound ||
			(apiErr.ErrorCode == 10057 && strings.Contains(apiErr.Description, "no message found"))
	}
	// nats.go flattens the API error into the text of ErrMsgDeleteUnsuccessful.
	return errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "err_code=10057") && strings.Contains(err.Error(), "no message found")
}

// Replay republishes l to its destination's input subject with its event id,
// a fresh attempt count and a dedup id derived from its dead-letter sequence,
// and deletes it from the dead-letter stream once the publish is confirmed.
// Replaying the same letter twice within the duplicate window publishes once.
// toDest, when not empty, sends it to another destination.
func (s *Store) Replay(ctx context.Context, l Letter, toDest string) (_ *jetstream.PubAck, err error) {
	if l.Malformed != "" {
		return nil, fmt.Errorf("dead letter %d is malformed (%s): it %w; see 'relay dlq show %d', remove it with 'relay dlq purge --seq %d'", l.Seq, l.Malformed, ErrNotReplayable, l.Seq, l.Seq)
	}
	if l.Reason == ReasonCorruptParkedEntry {
		return nil, fmt.Errorf("dead letter %d holds a parked entry relay could not use (%s): it %w; its body is the entry as stored ('relay dlq show %d')", l.Seq, l.LastError, ErrNotReplayable, l.Seq)
	}
	l, err = s.Resolve(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	p, perr := stream.ParseSubject(l.Subject)
	if perr != nil {
		p = stream.Parsed{Dest: l.Dest}
	}
	if toDest != "" {
		p.Dest = toDest
	}
	seal, err := s.seal.get(ctx, s.js)
	if err != nil {
		return nil, fmt.Errorf("replay dead letter %d: %w", l.Seq, err)
	}
	env := stream.Envelope{ID: l.EventID, Dest: p.Dest, Key: l.Key, Type: l.Type, Seq: l.Seq, Headers: l.Headers, Body: l.Body}
	if s.tracer != nil {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = stream.ExtractTrace(ctx, l.Headers)
		}
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, SpanReplay, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
			attribute.String("relay.destination", p.Dest), attribute.String("relay.event_id", l.EventID),
			attribute.Int64("relay.dead_letter_seq", int64(l.Seq)), attribute.String("relay.reason", l.Reason)))
		defer func() {
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
		env.Headers = stream.WithTrace(ctx, env.Headers)
	}
	ack, err := s.js.PublishMsg(ctx, env.Msg(stream.ReplayedDeadLetter, p.InputSubject(env.Key), seal))
	if err != nil {
		return nil, fmt.Errorf("replay dead letter %d: publish: %w", l.Seq, err)
	}
	failpoint.Inject("replay-after-publish")
	if err := s.Delete(ctx, l.Seq); err != nil {
		return ack, fmt.Errorf("replay dead letter %d: republished as event %d but not removed from the dead-letter stream (a re-run within the duplicate window publishes nothing twice): %w", l.Seq, ack.Sequence, err)
	}
	return ack, nil
}

// Counts returns the number of dead letters per destination.
func (s *Store) Counts(ctx context.Context) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, f := range stream.DLQFilters(false, "", "") {
		info, err := s.st.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return nil, err
		}
		for subj, n := range info.State.Subjects {
			if d, ok := stream.DLQDest(subj); ok {
				out[d] += n
			}
		}
	}
	return out, nil
}
