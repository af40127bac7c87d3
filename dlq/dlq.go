// Package dlq owns the dead-letter stream: writing a dead letter with its
// reason and failure history, listing and reading them, and replaying them.
package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Attempt is one failed delivery attempt in an event's history.
type Attempt struct {
	N        int           `json:"n"`
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration_ns"`
	Status   int           `json:"status,omitempty"`
	Error    string        `json:"error,omitempty"`
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
	Seq      uint64    `json:"seq"` // sequence in the dead-letter stream (0 before it is written)
	DeadAt   time.Time `json:"dead_at"`
	Dest     string    `json:"dest"`
	EventID  string    `json:"event_id"`
	Reason   string    `json:"reason"`
	Attempts int       `json:"attempts"`
	// LastStatus is the last HTTP status (0: no response).
	LastStatus int    `json:"last_status"`
	LastError  string `json:"last_error,omitempty"`
	// Note is an operator's reason for giving up on the event (reason
	// skipped).
	Note string `json:"note,omitempty"`
	// First and Last are the first and last attempt times (zero if none).
	First time.Time `json:"first_attempt,omitzero"`
	Last  time.Time `json:"last_attempt,omitzero"`
	// Subject and StreamSeq locate the original event in the event stream.
	Subject   string    `json:"subject"`
	StreamSeq uint64    `json:"stream_seq"`
	History   []Attempt `json:"history,omitempty"`
	// Headers are the event's own headers (not relay's).
	Headers nats.Header `json:"headers,omitempty"`
	Body    []byte      `json:"-"`
}

// Writer publishes dead letters.
type Writer struct {
	JS jetstream.JetStream
}

// Write publishes l to its destination's dead-letter subject and returns only
// once JetStream has stored it. The publish is idempotent per original event
// message, so writing again after a crash stores nothing twice.
func (w Writer) Write(ctx context.Context, l Letter) (uint64, error) {
	m := nats.NewMsg(stream.DLQSubject(l.Dest))
	m.Data = l.Body
	for k, vs := range l.Headers {
		if stream.IsContractHeader(k) {
			continue
		}
		m.Header[k] = vs
	}
	h := m.Header
	h.Set(stream.HdrMsgID, fmt.Sprintf("dlq:%s:%d", l.Dest, l.StreamSeq))
	h.Set(stream.HdrEventID, l.EventID)
	h.Set(stream.HdrDest, l.Dest)
	h.Set(stream.HdrReason, l.Reason)
	h.Set(stream.HdrAttempts, strconv.Itoa(l.Attempts))
	h.Set(stream.HdrLastStatus, strconv.Itoa(l.LastStatus))
	if l.LastError != "" {
		h.Set(stream.HdrLastError, OneLine(l.LastError, 512))
	}
	if l.Note != "" {
		h.Set(stream.HdrNote, OneLine(l.Note, 512))
	}
	if !l.First.IsZero() {
		h.Set(stream.HdrFirst, l.First.UTC().Format(time.RFC3339Nano))
		h.Set(stream.HdrLastAt, l.Last.UTC().Format(time.RFC3339Nano))
	}
	h.Set(stream.HdrOrigSubj, l.Subject)
	h.Set(stream.HdrOrigSeq, strconv.FormatUint(l.StreamSeq, 10))
	h.Set(stream.HdrDeadAt, l.DeadAt.UTC().Format(time.RFC3339Nano))
	if len(l.History) > 0 {
		hist := slices.Clone(TrimHistory(l.History))
		for i := range hist {
			hist[i].Error = OneLine(hist[i].Error, 256)
		}
		b, _ := json.Marshal(hist)
		h.Set(stream.HdrHistory, string(b))
	}
	ack, err := w.JS.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("publish dead letter of event %s to %s: %w", l.EventID, m.Subject, err)
	}
	return ack.Sequence, nil
}

// Decode reads a dead letter from a stored message.
func Decode(seq uint64, subject string, h nats.Header, body []byte) (Letter, error) {
	if h == nil {
		return Letter{}, fmt.Errorf("dead letter %d has no headers", seq)
	}
	l := Letter{Seq: seq, Body: body, Headers: nats.Header{}}
	l.Dest = h.Get(stream.HdrDest)
	if l.Dest == "" {
		return Letter{}, fmt.Errorf("dead letter %d (%s) has no %s header", seq, subject, stream.HdrDest)
	}
	l.EventID = h.Get(stream.HdrEventID)
	l.Reason = h.Get(stream.HdrReason)
	l.Attempts, _ = strconv.Atoi(h.Get(stream.HdrAttempts))
	l.LastStatus, _ = strconv.Atoi(h.Get(stream.HdrLastStatus))
	l.LastError = h.Get(stream.HdrLastError)
	l.Note = h.Get(stream.HdrNote)
	l.First, _ = time.Parse(time.RFC3339Nano, h.Get(stream.HdrFirst))
	l.Last, _ = time.Parse(time.RFC3339Nano, h.Get(stream.HdrLastAt))
	l.DeadAt, _ = time.Parse(time.RFC3339Nano, h.Get(stream.HdrDeadAt))
	l.Subject = h.Get(stream.HdrOrigSubj)
	l.StreamSeq, _ = strconv.ParseUint(h.Get(stream.HdrOrigSeq), 10, 64)
	if hs := h.Get(stream.HdrHistory); hs != "" {
		if err := json.Unmarshal([]byte(hs), &l.History); err != nil {
			return Letter{}, fmt.Errorf("dead letter %d: bad %s header: %w", seq, stream.HdrHistory, err)
		}
	}
	for k, vs := range h {
		if !stream.IsContractHeader(k) {
			l.Headers[k] = vs
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
}

// Open opens the dead-letter stream (stream.Ensure creates it).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	st, err := js.Stream(ctx, stream.DLQStream)
	if err != nil {
		return nil, fmt.Errorf("open dead-letter stream %s: %w", stream.DLQStream, err)
	}
	return &Store{js: js, st: st}, nil
}

// Filter selects dead letters. Zero fields select everything.
type Filter struct {
	Dest   string
	Reason string
	// Status selects by last HTTP status; 0 selects any, -1 selects those
	// that got no response.
	Status int
	// Since and Until bound the time the letter died (Until excluded).
	Since, Until time.Time
	// Seqs selects these dead-letter sequences only.
	Seqs []uint64
}

// Match reports whether l passes f (Seqs aside).
func (f Filter) Match(l Letter) bool {
	switch {
	case f.Dest != "" && l.Dest != f.Dest:
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
	}
	return true
}

// Get reads one dead letter.
func (s *Store) Get(ctx context.Context, seq uint64) (Letter, error) {
	m, err := s.st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Letter{}, fmt.Errorf("no dead letter with sequence %d (replayed, purged or expired?)", seq)
	}
	if err != nil {
		return Letter{}, err
	}
	return Decode(m.Sequence, m.Subject, m.Header, m.Data)
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
	if f.Dest != "" {
		filters = []string{stream.DLQSubject(f.Dest)}
	}
	// A letter dies after it is stored, so its stream time is a lower bound
	// on nothing; start from Since minus a margin and filter exactly.
	var since time.Time
	if !f.Since.IsZero() {
		since = f.Since.Add(-time.Minute)
	}
	return stream.Scan(ctx, s.js, stream.DLQStream, filters, since, func(m *jetstream.RawStreamMsg) error {
		l, err := Decode(m.Sequence, m.Subject, m.Header, m.Data)
		if err != nil {
			return err
		}
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
func (s *Store) Replay(ctx context.Context, l Letter, toDest string) (*jetstream.PubAck, error) {
	p, err := stream.ParseSubject(l.Subject)
	if err != nil {
		p = stream.Parsed{Dest: l.Dest}
	}
	if toDest != "" {
		p.Dest = toDest
	}
	m := nats.NewMsg(p.InputSubject())
	m.Data = l.Body
	for k, vs := range l.Headers {
		m.Header[k] = vs
	}
	m.Header.Set(stream.HdrEventID, l.EventID)
	m.Header.Set(stream.HdrMsgID, fmt.Sprintf("replay:%d", l.Seq))
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("replay dead letter %d: publish: %w", l.Seq, err)
	}
	failpoint("replay-after-publish")
	if err := s.Delete(ctx, l.Seq); err != nil {
		return ack, fmt.Errorf("replay dead letter %d: republished as event %d but not removed from the dead-letter stream (a re-run within the duplicate window publishes nothing twice): %w", l.Seq, ack.Sequence, err)
	}
	return ack, nil
}

// failpoint lets the fault-injection tests kill the process at a precise
// point (RELAY_FAILPOINT=name). It does nothing unless that variable is set.
func failpoint(name string) {
	if os.Getenv("RELAY_FAILPOINT") == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// Counts returns the number of dead letters per destination.
func (s *Store) Counts(ctx context.Context) (map[string]uint64, error) {
	info, err := s.st.Info(ctx, jetstream.WithSubjectFilter(stream.DLQPrefix+".*"))
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		out[subj[len(stream.DLQPrefix)+1:]] = n
	}
	return out, nil
}
