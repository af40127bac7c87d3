package deliverylog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// AttemptQuery selects records of the delivery log. Every field is
// optional; records match all that are set.
type AttemptQuery struct {
	// Scoped: the records of Tenant's destinations only (Tenant "": of
	// those of no tenant). Otherwise every destination's.
	Scoped bool
	Tenant string
	// Dest is a destination (a stream.DestRef): its records only.
	Dest    string
	EventID string
	// Type is an event type: the records of events of that type only.
	Type string
	// Status is a status code ("503"), or a class: 2xx, 3xx, 4xx, 5xx,
	// error (no response) or none (no attempt: filtered out, or
	// dead-lettered without one).
	Status string
	// Since and Until bound when the records were written (Until
	// excluded).
	Since, Until time.Time
	// Before is a cursor: records written before the record of this
	// sequence (AttemptPage.Next). 0: from the newest.
	Before uint64
	// Limit is how many records a page holds at most: default 100, at
	// most MaxAttemptLimit.
	Limit int
}

// MaxAttemptLimit is the largest AttemptQuery.Limit.
const MaxAttemptLimit = 1000

// QueryError says which field of an AttemptQuery is wrong and why.
type QueryError struct {
	Field string
	Err   error
}

func (e *QueryError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *QueryError) Unwrap() error { return e.Err }

// statusFilter is q.Status taken apart: the subjects' class, and the
// exact code when one is asked for (0: any).
func (q AttemptQuery) statusFilter() (class string, code int, err error) {
	s := strings.ToLower(q.Status)
	if s == "" {
		return "", 0, nil
	}
	if slices.Contains(stream.LogClasses, s) {
		return s, 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return "", 0, &QueryError{"status", fmt.Errorf("%q is neither a status code (100-599) nor a class (%s)", q.Status, strings.Join(stream.LogClasses, ", "))}
	}
	return stream.LogClass(true, n), n, nil
}

// Validate reports a query that cannot be answered, as a *QueryError.
func (q AttemptQuery) Validate() error {
	if q.Dest != "" {
		if err := stream.ValidateDestRef(q.Dest); err != nil {
			return &QueryError{"dest", err}
		}
	}
	if q.Tenant != "" {
		if err := stream.ValidateTenantID(q.Tenant); err != nil {
			return &QueryError{"tenant", err}
		}
	}
	if _, _, err := q.statusFilter(); err != nil {
		return err
	}
	if q.Limit < 0 || q.Limit > MaxAttemptLimit {
		return &QueryError{"limit", fmt.Errorf("%d is not between 1 and %d", q.Limit, MaxAttemptLimit)}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return &QueryError{"until", fmt.Errorf("%s is not after since (%s)", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))}
	}
	return nil
}

// AttemptPage is a page of the delivery log, newest first.
type AttemptPage struct {
	Attempts []AttemptRecord `json:"attempts"`
	// Next is the cursor of the next (older) page: AttemptQuery.Before.
	// 0 when there is none.
	Next uint64 `json:"next,omitempty"`
}

// ReadAttempts reads the records of the delivery log that q selects, newest
// first. Without an event id it reads the log backwards in windows of
// growing size, each through a consumer filtered on q's destination and
// class, so that a selective query over a long log reads what matches;
// with one, it reads the event's records through the index.
func ReadAttempts(ctx context.Context, js jetstream.JetStream, q AttemptQuery) (AttemptPage, error) {
	if err := q.Validate(); err != nil {
		return AttemptPage{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = 100
	}
	class, code, _ := q.statusFilter()
	match := func(r *AttemptRecord) bool {
		return r.Outcome != OutcomeRouted &&
			(q.Dest == "" || r.Dest == q.Dest) && (!q.Scoped || destTenant(r.Dest) == q.Tenant) && (class == "" || r.Class == class) && (code == 0 || r.Status == code) &&
			(q.EventID == "" || r.EventID == q.EventID) && (q.Type == "" || r.Type == q.Type) &&
			(q.Since.IsZero() || !r.At.Before(q.Since)) && (q.Until.IsZero() || r.At.Before(q.Until)) &&
			(q.Before == 0 || r.Seq < q.Before)
	}
	page := AttemptPage{Attempts: []AttemptRecord{}}
	if q.EventID != "" {
		recs, err := eventRecords(ctx, js, q.EventID)
		if err != nil {
			return AttemptPage{}, err
		}
		for i := len(recs) - 1; i >= 0; i-- {
			if match(&recs[i]) {
				if len(page.Attempts) == limit {
					page.Next = page.Attempts[limit-1].Seq
					break
				}
				page.Attempts = append(page.Attempts, recs[i])
			}
		}
		return page, nil
	}
	st, err := js.Stream(ctx, stream.LogStream)
	if err != nil {
		return AttemptPage{}, fmt.Errorf("open the delivery log: %w", err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return page, nil
	}
	// Message sequences: a record's Seq is its message's times 256 plus
	// its place in it.
	floor, hi := state.FirstSeq, state.LastSeq
	if q.Before > 0 {
		hi = min(hi, q.Before>>8)
	}
	if !q.Since.IsZero() {
		// A message stored before Since holds only attempts started
		// before it.
		s, ok, err := firstAt(ctx, js, q.Since)
		if err != nil {
			return AttemptPage{}, err
		}
		if !ok {
			return page, nil
		}
		floor = max(floor, s)
	}
	if !q.Until.IsZero() {
		// An attempt started before Until is stored after it by at most
		// its duration and a flush: messages stored well after hold none.
		s, ok, err := firstAt(ctx, js, q.Until.Add(untilSlack))
		if err != nil {
			return AttemptPage{}, err
		}
		if ok {
			if s <= floor {
				return page, nil
			}
			hi = min(hi, s-1)
		}
	}
	if hi < floor {
		return page, nil
	}
	filters := stream.LogFilters(q.Scoped, q.Tenant, q.Dest, class)
	window := uint64(max(limit/4, 64))
	for len(page.Attempts) < limit {
		lo := floor
		if hi-floor+1 > window {
			lo = hi - window + 1
		}
		var got []AttemptRecord
		err := stream.Read(ctx, js, stream.LogStream, stream.ReadOptions{After: lo - 1, Filters: filters, Description: "relay attempts"},
			func(m *jetstream.RawStreamMsg) error {
				if m.Sequence > hi {
					return stream.ErrStop
				}
				got = append(got, decodeBatch(m.Sequence, m.Data)...)
				return nil
			})
		if err != nil {
			return AttemptPage{}, fmt.Errorf("read the delivery log: %w", err)
		}
		for i := len(got) - 1; i >= 0; i-- {
			if !match(&got[i]) {
				continue
			}
			if len(page.Attempts) == limit {
				page.Next = page.Attempts[limit-1].Seq
				return page, nil
			}
			page.Attempts = append(page.Attempts, got[i])
		}
		if lo == floor {
			break
		}
		hi, window = lo-1, window*4
		if len(page.Attempts) == limit {
			// Full, and older messages are left unread: they may hold
			// more (the next page says, empty if not).
			page.Next = page.Attempts[limit-1].Seq
			break
		}
	}
	return page, nil
}

// destTenant is the tenant of destination ref dest ("" for none).
func destTenant(dest string) string {
	t, _ := stream.SplitDestRef(dest)
	return t
}

// untilSlack is how long after an attempt starts its record may be
// stored: the longest attempt (a destination's timeout, at most 10m), the
// writer's flush and its retries of a batch (about a minute), with room to
// spare.
const untilSlack = 12 * time.Minute

// decodeBatch reads the records of the message stored at seq, each with
// its Seq. A line that is not a record is skipped.
func decodeBatch(seq uint64, data []byte) []AttemptRecord {
	var out []AttemptRecord
	i := 0
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec AttemptRecord
		if json.Unmarshal(line, &rec) == nil && i < 256 {
			rec.Seq = seq<<8 | uint64(i)
			out = append(out, rec)
		}
		i++
	}
	return out
}

// firstAt is the sequence of the first message of the delivery log stored
// at or after t, and whether there is one.
func firstAt(ctx context.Context, js jetstream.JetStream, t time.Time) (uint64, bool, error) {
	var seq uint64
	err := stream.Read(ctx, js, stream.LogStream, stream.ReadOptions{Since: t, HeadersOnly: true, Description: "relay attempts (time)"},
		func(m *jetstream.RawStreamMsg) error {
			seq = m.Sequence
			return stream.ErrStop
		})
	if err != nil {
		return 0, false, fmt.Errorf("read the delivery log: %w", err)
	}
	return seq, seq != 0, nil
}

// eventRecords are the records of event id, oldest first: the index's
// bucket of the id names the messages that hold them.
func eventRecords(ctx context.Context, js jetstream.JetStream, id string) ([]AttemptRecord, error) {
	var seqs []uint64
	err := stream.Read(ctx, js, stream.LogStream, stream.ReadOptions{Filters: []string{stream.LogIndexSubject(stream.EventBucket(id))}, Description: "relay event lookup"},
		func(m *jetstream.RawStreamMsg) error {
			for line := range bytes.SplitSeq(m.Data, []byte("\n")) {
				var e struct {
					ID  string `json:"id"`
					Seq uint64 `json:"seq"`
				}
				if len(line) > 0 && json.Unmarshal(line, &e) == nil && e.ID == id && !slices.Contains(seqs, e.Seq) {
					seqs = append(seqs, e.Seq)
				}
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read the delivery log's index: %w", err)
	}
	slices.Sort(seqs)
	var out []AttemptRecord
	for _, seq := range seqs {
		m, err := stream.GetMsg(ctx, js, stream.LogStream, seq, "")
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // aged out after its index entry was read
		}
		if err != nil {
			return nil, fmt.Errorf("read the delivery log: %w", err)
		}
		for _, rec := range decodeBatch(seq, m.Data) {
			if rec.EventID == id {
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

// Event states in an EventView.
const (
	StateDelivered   = "delivered"
	StateRetrying    = "retrying"
	StateDead        = "dead"
	StateFilteredOut = "filtered_out"
	// StatePending: routed to the destination, not attempted yet.
	StatePending = "pending"
)

// EventView is an event as the delivery log knows it: what it is, and for
// each destination it went to, where its delivery stands and every attempt
// recorded.
type EventView struct {
	ID   string `json:"id"`
	Type string `json:"type,omitempty"`
	Key  string `json:"key,omitempty"`
	// Seq is where the event is stored in the events stream; Stored says
	// it still is (else Headers and Body are unknown: it aged out).
	Seq     uint64              `json:"seq,omitempty"`
	Stored  bool                `json:"stored"`
	Headers map[string][]string `json:"headers,omitempty"`
	Body    []byte              `json:"-"`
	// RoutedTo are a typed event's subscribers when it was routed.
	RoutedTo     []string    `json:"routed_to,omitempty"`
	Destinations []DestState `json:"destinations"`
}

// DestState is where an event's delivery to one destination stands.
type DestState struct {
	Dest     string          `json:"dest"`
	State    string          `json:"state"`
	Attempts []AttemptRecord `json:"attempts"`
}

// ErrEventNotFound: the delivery log has no record of the event.
var ErrEventNotFound = errors.New("no record of the event in the delivery log")

// LookupEvent returns what the delivery log knows of event id: the event,
// read from the events stream while it is kept there, and for each
// destination its state and attempts, oldest first.
func LookupEvent(ctx context.Context, js jetstream.JetStream, id string) (EventView, error) {
	return LookupEventOf(ctx, js, id, nil)
}

// LookupEventOf is LookupEvent of the records of the destinations keep
// keeps only (nil: every one's): an event none of whose records it keeps
// is not found. Ids are the producers', so two tenants' events may share
// one: each sees its own.
func LookupEventOf(ctx context.Context, js jetstream.JetStream, id string, keep func(dest string) bool) (EventView, error) {
	v := EventView{ID: id, Destinations: []DestState{}}
	byDest := map[string]int{}
	latest := map[int]time.Time{} // when the attempt deciding each destination's state began
	recs, err := eventRecords(ctx, js, id)
	if err != nil {
		return EventView{}, err
	}
	if keep != nil {
		kept := recs[:0:0]
		for _, rec := range recs {
			if rec.Outcome == OutcomeRouted {
				rec.Dests = slices.DeleteFunc(slices.Clone(rec.Dests), func(d string) bool { return !keep(d) })
				if len(rec.Dests) > 0 {
					kept = append(kept, rec)
				}
			} else if keep(rec.Dest) {
				kept = append(kept, rec)
			}
		}
		recs = kept
	}
	for _, rec := range recs {
		if v.Seq == 0 || rec.Outcome == OutcomeRouted {
			v.Seq, v.Type, v.Key = rec.EventSeq, rec.Type, rec.Key
		}
		if rec.Outcome == OutcomeRouted {
			v.RoutedTo = rec.Dests
			for _, d := range rec.Dests {
				if _, ok := byDest[d]; !ok {
					byDest[d] = len(v.Destinations)
					v.Destinations = append(v.Destinations, DestState{Dest: d, State: StatePending, Attempts: []AttemptRecord{}})
				}
			}
			continue
		}
		i, ok := byDest[rec.Dest]
		if !ok {
			i = len(v.Destinations)
			byDest[rec.Dest] = i
			v.Destinations = append(v.Destinations, DestState{Dest: rec.Dest, Attempts: []AttemptRecord{}})
		}
		d := &v.Destinations[i]
		d.Attempts = append(d.Attempts, rec)
		// The state is the latest attempt's outcome, by when attempts
		// began, not by where their records were stored (a batch stored
		// late, after a retry of its write, comes after later ones).
		if s, ok := decisive(rec.Outcome); ok {
			if at, seen := latest[i]; !seen || !rec.At.Before(at) {
				d.State, latest[i] = s, rec.At
			}
		} else if d.State == "" {
			d.State = StateRetrying // another attempt follows
		}
	}
	if v.Seq == 0 {
		return EventView{}, ErrEventNotFound
	}
	m, err := stream.GetMsg(ctx, js, stream.EventsStream, v.Seq, "")
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return v, nil // aged out of the events stream
	case err != nil:
		return EventView{}, err
	}
	var env stream.Envelope
	if _, ok := stream.TypeOf(m.Subject); ok {
		env, err = stream.DecodeTyped(m.Subject, m.Sequence, m.Time, m.Header, m.Data)
	} else {
		var seal *stream.Seal
		if seal, err = stream.LoadSeal(ctx, js); err != nil {
			return EventView{}, err
		}
		env, err = stream.Decode(m.Subject, m.Sequence, m.Time, m.Header, m.Data, seal)
	}
	if err != nil || env.ID != id {
		return v, nil // the sequence holds another event: this one is gone
	}
	v.Stored, v.Body = true, env.Body
	v.Type, v.Key = env.Type, env.Key
	if h := stream.OwnHeader(env.Headers); len(h) > 0 {
		v.Headers = destination.RedactHeaders(h)
	}
	return v, nil
}

// MarshalJSON writes v with its body: as JSON where it is JSON (body),
// else as text where it is UTF-8 (body_text), else in base64
// (body_base64); none when the event is no longer stored.
func (v EventView) MarshalJSON() ([]byte, error) {
	type plain EventView
	out := struct {
		plain
		Body       json.RawMessage `json:"body,omitempty"`
		BodyText   *string         `json:"body_text,omitempty"`
		BodyBase64 []byte          `json:"body_base64,omitempty"`
	}{plain: plain(v)}
	switch {
	case !v.Stored:
	case json.Valid(v.Body):
		out.Body = v.Body
	case utf8.Valid(v.Body):
		s := string(v.Body)
		out.BodyText = &s
	default:
		out.BodyBase64 = v.Body
	}
	// Not json.Marshal: it would escape <, > and & in the body, which is
	// the event's as it was published.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// decisive is the state an outcome puts its event in, and whether it
// decides one: an attempt left past AckWait or handed back at a stop does
// not (another attempt follows it).
func decisive(outcome string) (string, bool) {
	switch outcome {
	case OutcomeLeft, OutcomeHandedBack:
		return "", false
	}
	return StateOf(outcome), true
}

func StateOf(outcome string) string {
	switch outcome {
	case OutcomeDelivered:
		return StateDelivered
	case OutcomeRetry:
		return StateRetrying
	case OutcomeDeadLetter:
		return StateDead
	case OutcomeFiltered:
		return StateFilteredOut
	}
	return outcome
}
