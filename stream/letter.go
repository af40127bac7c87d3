package stream

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// LetterEnvelope is a dead letter as it travels in a message of the
// dead-letter stream (DLQSubject): why and how an event's delivery failed,
// in relay's dead-letter headers, and the event's own headers and body,
// unless the letter leaves them out (EventOmitted). Msg writes one;
// DecodeLetter reads one. What the letter says is package dlq's (its
// history, the bounds of its text, how it fits in a message); which header
// carries what is this package's.
type LetterEnvelope struct {
	// Dedup, when set, is the letter's dedup id (Nats-Msg-Id) in place of
	// dlq:<Dest>:<Seq>, for a letter that is no stream message's.
	Dedup string
	// EventID is the event's id (Relay-Event-Id).
	EventID string
	// Dest is the destination the event failed for (Relay-Destination).
	Dest string
	// Reason is why it was given up (Relay-Reason).
	Reason string
	// Attempts is the number of attempts made (Relay-Attempts).
	Attempts int
	// LastStatus is the last HTTP status, 0 for none (Relay-Last-Status).
	LastStatus int
	// LastError and Note (Relay-Last-Error, Relay-Note) are written when
	// not empty.
	LastError string
	Note      string
	// First and Last are the first and the last attempt's times
	// (Relay-First-Attempt, Relay-Last-Attempt), written when First is set.
	First, Last time.Time
	// Key and Type are the event's order key and type (Relay-Order-Key,
	// Relay-Event-Type), written when set.
	Key  string
	Type string
	// Subject and Seq locate the event in the events stream (Relay-Subject,
	// Relay-Seq).
	Subject string
	Seq     uint64
	// DeadAt is when the event was given up (Relay-Dead-At).
	DeadAt time.Time
	// History is the failed attempts as JSON, package dlq's
	// (Relay-History), written when not empty; HistoryOmitted is the number
	// of attempts left out of it (Relay-History-Omitted), written when not 0.
	History        string
	HistoryOmitted int
	// EventOmitted says the letter does not carry the event's headers and
	// body (Relay-Event-Omitted): they are read from the events stream at
	// Seq.
	EventOmitted bool
	// Headers are the event's own headers: Msg writes those that are not
	// IsContractHeader, and DecodeLetter reads those.
	Headers nats.Header
	// Body is the event's body.
	Body []byte
}

// MsgID is the letter's dedup id: Dedup, else dlq:<Dest>:<Seq>, so that
// writing the letter of a stream message again stores nothing twice.
func (l LetterEnvelope) MsgID() string {
	if l.Dedup != "" {
		return l.Dedup
	}
	return "dlq:" + l.Dest + ":" + strconv.FormatUint(l.Seq, 10)
}

// Header returns the letter's headers: relay's dead-letter headers, and
// unless EventOmitted the event's own.
func (l LetterEnvelope) Header() nats.Header {
	h := nats.Header{}
	h.Set(HdrMsgID, l.MsgID())
	h.Set(HdrEventID, l.EventID)
	h.Set(HdrDest, l.Dest)
	h.Set(HdrReason, l.Reason)
	h.Set(HdrAttempts, strconv.Itoa(l.Attempts))
	h.Set(HdrLastStatus, strconv.Itoa(l.LastStatus))
	if l.LastError != "" {
		h.Set(HdrLastError, l.LastError)
	}
	if l.Note != "" {
		h.Set(HdrNote, l.Note)
	}
	if !l.First.IsZero() {
		h.Set(HdrFirst, l.First.UTC().Format(time.RFC3339Nano))
		h.Set(HdrLastAt, l.Last.UTC().Format(time.RFC3339Nano))
	}
	if l.Key != "" {
		h.Set(HdrKey, l.Key)
	}
	if l.Type != "" {
		h.Set(HdrType, l.Type)
	}
	h.Set(HdrOrigSubj, l.Subject)
	h.Set(HdrOrigSeq, strconv.FormatUint(l.Seq, 10))
	h.Set(HdrDeadAt, l.DeadAt.UTC().Format(time.RFC3339Nano))
	if l.History != "" {
		h.Set(HdrHistory, l.History)
	}
	if l.HistoryOmitted > 0 {
		h.Set(HdrHistoryOmitted, strconv.Itoa(l.HistoryOmitted))
	}
	if l.EventOmitted {
		h.Set(HdrEventOmitted, "true")
		return h
	}
	for k, vs := range OwnHeader(l.Headers) {
		h[k] = vs
	}
	return h
}

// Msg is the letter's message, to its destination's dead-letter subject:
// Header, and the event's body unless EventOmitted.
func (l LetterEnvelope) Msg() *nats.Msg {
	m := &nats.Msg{Subject: DLQSubject(l.Dest), Header: l.Header()}
	if !l.EventOmitted {
		m.Data = l.Body
	}
	return m
}

// Size is the size of the letter's message on the wire, headers and body.
func (l LetterEnvelope) Size() int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range l.Header() {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // "K: V\r\n"
		}
	}
	if !l.EventOmitted {
		n += len(l.Body)
	}
	return n
}

// DecodeLetter reads the letter stored at seq on subject in the
// dead-letter stream, from its headers h and body. A number or time that
// does not parse reads as zero (as strconv and time leave it). It fails
// when h names no destination, a message relay did not write; the fields it
// read are returned all the same.
func DecodeLetter(seq uint64, subject string, h nats.Header, body []byte) (LetterEnvelope, error) {
	l := LetterEnvelope{
		EventID:   h.Get(HdrEventID),
		Dest:      h.Get(HdrDest),
		Reason:    h.Get(HdrReason),
		LastError: h.Get(HdrLastError),
		Note:      h.Get(HdrNote),
		Key:       h.Get(HdrKey),
		Type:      h.Get(HdrType),
		Subject:   h.Get(HdrOrigSubj),
		History:   h.Get(HdrHistory),
		Headers:   OwnHeader(h),
		Body:      body,
	}
	l.Attempts, _ = strconv.Atoi(h.Get(HdrAttempts))
	l.LastStatus, _ = strconv.Atoi(h.Get(HdrLastStatus))
	l.First, _ = time.Parse(time.RFC3339Nano, h.Get(HdrFirst))
	l.Last, _ = time.Parse(time.RFC3339Nano, h.Get(HdrLastAt))
	l.DeadAt, _ = time.Parse(time.RFC3339Nano, h.Get(HdrDeadAt))
	l.Seq, _ = strconv.ParseUint(h.Get(HdrOrigSeq), 10, 64)
	l.HistoryOmitted, _ = strconv.Atoi(h.Get(HdrHistoryOmitted))
	l.EventOmitted = h.Get(HdrEventOmitted) != ""
	if id := h.Get(HdrMsgID); id != l.MsgID() {
		l.Dedup = id
	}
	if l.Dest == "" {
		return l, fmt.Errorf("dead letter %d (%s) has no %s header", seq, subject, HdrDest)
	}
	return l, nil
}

// DecodeHistory reads the letter's History, the JSON package dlq writes in
// it, into v. Its error names the header.
func (l LetterEnvelope) DecodeHistory(v any) error {
	if err := json.Unmarshal([]byte(l.History), v); err != nil {
		return fmt.Errorf("bad %s header: %w", HdrHistory, err)
	}
	return nil
}
