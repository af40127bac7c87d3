package dlq

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/relaydev/relay/stream"
)

func FuzzDecode(f *testing.F) {
	hist, _ := json.Marshal([]Attempt{{N: 1, At: time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC), Duration: time.Second, Status: 503, Error: "down"}})
	type seed struct {
		dest, history, attempts, status, first, deadAt, seq, key, val string
	}
	for _, s := range []seed{
		{"orders", string(hist), "15", "503", "2024-03-01T12:00:00.123456789Z", "2024-03-01T16:05:01.5Z", "42", "X-Trace", "t"},
		{"orders", "", "", "", "", "", "", "", ""},
		{"", string(hist), "1", "0", "", "", "1", "X-A", "b"},
		{"o", `[{"n":1`, "x", "y", "yesterday", "soon", "-1", "Relay-Destination", "other"},
		{"o", `{"n":1}`, "-3", "99999999999999999999", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "18446744073709551616", "relay-x", "v"},
		{"o", `[{"n":1,"at":"noon"}]`, "+7", " 5", "2024-13-01T00:00:00Z", "", "0x10", "Nats-Msg-Id", "m"},
		{"o", "null", "1e3", "503 ", "", "", "", "Content-Type", "application/json"},
		{"o", "[]", "9223372036854775808", "-0", "", "", "", "", "x"},
		{"o", `[{"n":1,"duration_ns":1e99}]`, "", "", "", "", "", "X", ""},
		{"o", `[null,{},{"n":-1,"status":-5,"error":"\u0000"}]`, "", "", "", "", "", "X", ""},
		{"o", strings.Repeat("[", 20000), "", "", "", "", "", "", ""},
	} {
		f.Add(s.dest, s.history, s.attempts, s.status, s.first, s.deadAt, s.seq, s.key, s.val, []byte("body"))
	}
	f.Fuzz(func(t *testing.T, dest, history, attempts, status, first, deadAt, seq, key, val string, body []byte) {
		h := nats.Header{}
		if key != "" {
			h[key] = []string{val, val + "2"}
		}
		h.Set(stream.HdrDest, dest)
		h.Set(stream.HdrEventID, val)
		h.Set(stream.HdrReason, key)
		h.Set(stream.HdrAttempts, attempts)
		h.Set(stream.HdrLastStatus, status)
		h.Set(stream.HdrLastError, history)
		h.Set(stream.HdrFirst, first)
		h.Set(stream.HdrLastAt, deadAt)
		h.Set(stream.HdrDeadAt, deadAt)
		h.Set(stream.HdrOrigSubj, key)
		h.Set(stream.HdrOrigSeq, seq)
		if history != "" {
			h.Set(stream.HdrHistory, history)
		}

		l, err := Decode(7, "relay.dlq."+dest, h, body)
		if dest == "" {
			if err == nil {
				t.Fatalf("Decode accepted a letter without %s", stream.HdrDest)
			}
			return
		}
		var wantHist []Attempt
		histErr := error(nil)
		if history != "" {
			histErr = json.Unmarshal([]byte(history), &wantHist)
		}
		if histErr != nil {
			if err == nil {
				t.Fatalf("Decode accepted the bad history %q", history)
			}
			if !strings.Contains(err.Error(), stream.HdrHistory) || !strings.Contains(err.Error(), "7") {
				t.Fatalf("Decode error does not name the header and sequence: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode failed on a letter with a destination and a valid history: %v", err)
		}
		if l.Dest != dest {
			t.Fatalf("Dest = %q, want %q", l.Dest, dest)
		}
		if l.Seq != 7 || string(l.Body) != string(body) {
			t.Fatalf("Seq %d, body %q", l.Seq, l.Body)
		}
		if l.EventID != val || l.Reason != key || l.LastError != history || l.Subject != key {
			t.Fatalf("string fields not read as stored: %+v", l)
		}
		// Numbers are read leniently: garbage is 0, out of range is clamped.
		fuzzTestNumber(t, "Attempts", attempts, l.Attempts)
		fuzzTestNumber(t, "LastStatus", status, l.LastStatus)
		if n, err := strconv.ParseUint(seq, 10, 64); (err == nil && l.StreamSeq != n) || (err != nil && !fuzzTestIsRange(err) && l.StreamSeq != 0) {
			t.Fatalf("StreamSeq = %d from %q", l.StreamSeq, seq)
		}
		if ft, err := time.Parse(time.RFC3339Nano, first); (err == nil && !l.First.Equal(ft)) || (err != nil && !l.First.IsZero()) {
			t.Fatalf("First = %v from %q", l.First, first)
		}
		if !l.Last.Equal(l.DeadAt) {
			t.Fatalf("Last %v and DeadAt %v read from the same value differ", l.Last, l.DeadAt)
		}
		if len(l.History) != len(wantHist) {
			t.Fatalf("History has %d attempts, want %d", len(l.History), len(wantHist))
		}
		if l.Headers == nil {
			t.Fatal("Headers is nil")
		}
		for k, vs := range l.Headers {
			if stream.IsContractHeader(k) {
				t.Fatalf("contract header %q in the event headers", k)
			}
			if strings.Join(vs, "\x00") != strings.Join(h[k], "\x00") {
				t.Fatalf("event header %q = %q, stored %q", k, vs, h[k])
			}
		}
		for k := range h {
			if _, ok := l.Headers[k]; !ok && !stream.IsContractHeader(k) {
				t.Fatalf("event header %q lost", k)
			}
		}
	})
}

func fuzzTestIsRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func fuzzTestNumber(t *testing.T, field, stored string, got int) {
	t.Helper()
	n, err := strconv.Atoi(stored)
	switch {
	case err == nil && got != n:
		t.Fatalf("%s = %d from %q, want %d", field, got, stored, n)
	case err != nil && fuzzTestIsRange(err) && got != n:
		t.Fatalf("%s = %d from out-of-range %q, want the clamped %d", field, got, stored, n)
	case err != nil && !fuzzTestIsRange(err) && got != 0:
		t.Fatalf("%s = %d from garbage %q, want 0", field, got, stored)
	}
}

func FuzzWriteDecodeRoundTrip(f *testing.F) {
	f.Add("orders", "evt_1", "max_attempts", "503 Service Unavailable", "relay.ev.orders.5", 15, 503, uint64(42), int64(1_700_000_000_000_000_000), "timeout after 30s", "X-Trace", "t", []byte(`{"a":1}`))
	f.Add("o", "", "", "line\r\nbreak\x00", "", 0, 0, uint64(0), int64(0), "\n", "", "", []byte(nil))
	f.Add("o", "e", "r", strings.Repeat("é", 600), "s", -1, -1, uint64(1<<63), int64(-1), strings.Repeat("\xff", 300), "Relay-Attempt", "3", []byte{0})
	f.Fuzz(func(t *testing.T, dest, eventID, reason, lastErr, subject string, attempts, status int, streamSeq uint64, atNanos int64, attemptErr, key, val string, body []byte) {
		if dest == "" {
			return
		}
		at := time.Unix(0, atNanos).UTC()
		in := Letter{
			DeadAt:     at,
			Dest:       dest,
			EventID:    eventID,
			Reason:     reason,
			Attempts:   attempts,
			LastStatus: status,
			LastError:  lastErr,
			First:      at,
			Last:       at,
			Subject:    subject,
			StreamSeq:  streamSeq,
			History:    []Attempt{{N: 1, At: at, Duration: time.Duration(atNanos), Status: status, Error: attemptErr}},
			Body:       body,
		}
		if key != "" {
			in.Headers = nats.Header{key: {val}}
		}
		js := &letterTestJS{} // from letter_test.go
		if _, err := (Writer{JS: js, MaxSize: 1 << 20}).Write(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		out, err := Decode(3, js.msg.Subject, js.msg.Header, js.msg.Data)
		if err != nil {
			t.Fatalf("Decode of a written letter: %v", err)
		}
		if out.Dest != dest || out.EventID != eventID || out.Reason != reason || out.Subject != subject ||
			out.Attempts != attempts || out.LastStatus != status || out.StreamSeq != streamSeq || string(out.Body) != string(body) {
			t.Fatalf("round trip changed the letter:\n in: %+v\nout: %+v", in, out)
		}
		if !out.DeadAt.Equal(at) || !out.First.Equal(at) || !out.Last.Equal(at) {
			t.Fatalf("round trip changed the times: %v %v %v, want %v", out.DeadAt, out.First, out.Last, at)
		}
		for _, s := range []string{out.LastError, out.History[0].Error} {
			if strings.ContainsAny(s, "\r\n\x00") {
				t.Fatalf("a multi-line error was stored as is: %q", s)
			}
		}
		if utf8.RuneCountInString(out.LastError) > 512 || utf8.RuneCountInString(out.History[0].Error) > 256 {
			t.Fatalf("errors not bounded: %d and %d runes", utf8.RuneCountInString(out.LastError), utf8.RuneCountInString(out.History[0].Error))
		}
		if utf8.ValidString(lastErr) && utf8.RuneCountInString(lastErr) <= 512 && !strings.ContainsFunc(lastErr, func(r rune) bool { return r < ' ' }) && out.LastError != lastErr {
			t.Fatalf("a short printable error changed: %q -> %q", lastErr, out.LastError)
		}
		if len(out.History) != 1 || out.History[0].N != 1 || out.History[0].Status != status || !out.History[0].At.Equal(at) || out.History[0].Duration != time.Duration(atNanos) {
			t.Fatalf("history changed: %+v", out.History)
		}
		for k, vs := range out.Headers {
			if stream.IsContractHeader(k) {
				t.Fatalf("contract header %q in the event headers", k)
			}
			if k != key || len(vs) != 1 || vs[0] != val {
				t.Fatalf("event headers changed: %v", out.Headers)
			}
		}
		if key != "" && !stream.IsContractHeader(key) && len(out.Headers[key]) != 1 {
			t.Fatalf("event header %q lost: %v", key, out.Headers)
		}
	})
}
