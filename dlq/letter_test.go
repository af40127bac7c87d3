package dlq

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
)

func letterTestHistory(n int) []Attempt {
	h := make([]Attempt, n)
	t0 := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range h {
		h[i] = Attempt{N: i + 1, At: t0.Add(time.Duration(i) * time.Minute), Duration: time.Duration(i+1) * time.Millisecond, Status: 500 + i%4, Error: "boom " + strconv.Itoa(i+1)}
	}
	return h
}

func letterTestNs(h []Attempt) []int {
	out := make([]int, len(h))
	for i, a := range h {
		out[i] = a.N
	}
	return out
}

func TestTrimHistory(t *testing.T) {
	t.Parallel()
	require.Equal(t, 50, MaxHistory)
	seq := func(from, to int) []int {
		var out []int
		for i := from; i <= to; i++ {
			out = append(out, i)
		}
		return out
	}
	tests := []struct {
		name  string
		n     int
		wantN []int
	}{
		{"empty", 0, []int{}},
		{"one", 1, []int{1}},
		{"two", 2, []int{1, 2}},
		{"49", 49, seq(1, 49)},
		{"exactly MaxHistory", 50, seq(1, 50)},
		{"MaxHistory+1 drops the second", 51, append([]int{1}, seq(3, 51)...)},
		{"MaxHistory+2", 52, append([]int{1}, seq(4, 52)...)},
		{"200", 200, append([]int{1}, seq(152, 200)...)},
		{"1000", 1000, append([]int{1}, seq(952, 1000)...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := letterTestHistory(tc.n)
			orig := letterTestHistory(tc.n)
			got := TrimHistory(in)
			require.Equal(t, tc.wantN, letterTestNs(got))
			require.LessOrEqual(t, len(got), MaxHistory)
			require.Equal(t, orig, in, "TrimHistory must not modify its input")
			if tc.n > 0 {
				require.Equal(t, in[0], got[0], "the first attempt is always kept")
				require.Equal(t, in[tc.n-1], got[len(got)-1], "the last attempt is always kept")
			}
			if tc.n <= MaxHistory {
				require.Len(t, got, tc.n)
			} else {
				require.Len(t, got, MaxHistory)
			}
		})
	}
	require.Nil(t, TrimHistory(nil))
}

// letterTestHeader builds the headers of a stored dead letter by hand.
func letterTestHeader(t *testing.T) (nats.Header, []Attempt) {
	t.Helper()
	hist := letterTestHistory(3)
	hb, err := json.Marshal(hist)
	require.NoError(t, err)
	h := nats.Header{}
	h.Set(stream.HdrMsgID, "dlq:orders:42")
	h.Set(stream.HdrEventID, "evt_01hq3")
	h.Set(stream.HdrDest, "orders")
	h.Set(stream.HdrReason, "max_attempts")
	h.Set(stream.HdrAttempts, "15")
	h.Set(stream.HdrLastStatus, "503")
	h.Set(stream.HdrLastError, "503 Service Unavailable: try later")
	h.Set(stream.HdrFirst, "2024-03-01T12:00:00.123456789Z")
	h.Set(stream.HdrLastAt, "2024-03-01T16:05:00Z")
	h.Set(stream.HdrDeadAt, "2024-03-01T16:05:01.5Z")
	h.Set(stream.HdrOrigSubj, "relay.ev.orders.5")
	h.Set(stream.HdrOrigSeq, "42")
	h.Set(stream.HdrHistory, string(hb))
	h.Set(stream.HdrKey, "user-1")
	h.Set(stream.HdrType, "order.created")
	h.Set(stream.HdrAttempt, "3")
	h.Set("Nats-Expected-Stream", "RELAY_EVENTS")
	h["X-Trace"] = []string{"a", "b"}
	h.Set("Content-Type", "application/json")
	return h, hist
}

func TestDecodeReadsEveryField(t *testing.T) {
	t.Parallel()
	h, hist := letterTestHeader(t)
	body := []byte(`{"order":1}`)

	l, err := Decode(7, "relay.dlq.orders", h, body)
	require.NoError(t, err)
	require.Equal(t, Letter{
		Seq:        7,
		DeadAt:     time.Date(2024, 3, 1, 16, 5, 1, 500000000, time.UTC),
		Dest:       "orders",
		EventID:    "evt_01hq3",
		Key:        "user-1",
		Type:       "order.created",
		Reason:     "max_attempts",
		Attempts:   15,
		LastStatus: 503,
		LastError:  "503 Service Unavailable: try later",
		First:      time.Date(2024, 3, 1, 12, 0, 0, 123456789, time.UTC),
		Last:       time.Date(2024, 3, 1, 16, 5, 0, 0, time.UTC),
		Subject:    "relay.ev.orders.5",
		StreamSeq:  42,
		History:    hist,
		Headers: nats.Header{
			"X-Trace":      {"a", "b"},
			"Content-Type": {"application/json"},
		},
		Body: body,
	}, l)
	for k := range l.Headers {
		require.False(t, stream.IsContractHeader(k), "contract header %s leaked into the event headers", k)
	}
}

func TestDecodeMinimalAndLenient(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	h.Set(stream.HdrDest, "orders")
	h.Set(stream.HdrAttempts, "many")
	h.Set(stream.HdrFirst, "yesterday")

	l, err := Decode(1, "relay.dlq.orders", h, nil)
	require.NoError(t, err)
	require.Equal(t, "orders", l.Dest)
	require.Zero(t, l.Attempts)
	require.True(t, l.First.IsZero())
	require.Nil(t, l.History)
	require.NotNil(t, l.Headers)
	require.Empty(t, l.Headers)
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		edit    func(nats.Header) nats.Header
		wantErr string
	}{
		{"nil header", func(nats.Header) nats.Header { return nil }, "has no headers"},
		{"no destination", func(h nats.Header) nats.Header { h.Del(stream.HdrDest); return h }, "has no " + stream.HdrDest},
		{"empty destination", func(h nats.Header) nats.Header { h.Set(stream.HdrDest, ""); return h }, "has no " + stream.HdrDest},
		{"destination under another case", func(h nats.Header) nats.Header {
			v := h.Get(stream.HdrDest)
			h.Del(stream.HdrDest)
			h["relay-destination"] = []string{v}
			return h
		}, "has no " + stream.HdrDest},
		{"truncated history", func(h nats.Header) nats.Header { h.Set(stream.HdrHistory, `[{"n":1`); return h }, "bad " + stream.HdrHistory},
		{"history not a list", func(h nats.Header) nats.Header { h.Set(stream.HdrHistory, `{"n":1}`); return h }, "bad " + stream.HdrHistory},
		{"history with a bad time", func(h nats.Header) nats.Header { h.Set(stream.HdrHistory, `[{"n":1,"at":"noon"}]`); return h }, "bad " + stream.HdrHistory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, _ := letterTestHeader(t)
			l, err := Decode(9, "relay.dlq.orders", tc.edit(h), []byte("x"))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
			require.Contains(t, err.Error(), "9")
			require.Equal(t, Letter{}, l)
		})
	}
}

// letterTestJS records the message Writer.Write publishes; it needs no server.
type letterTestJS struct {
	jetstream.JetStream
	msg *nats.Msg
}

func (f *letterTestJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	f.msg = m
	return &jetstream.PubAck{Stream: stream.DLQStream, Sequence: 11}, nil
}

func TestWriteThenDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	hist := letterTestHistory(60)
	in := Letter{
		DeadAt:     time.Date(2024, 3, 1, 16, 5, 1, 0, time.UTC),
		Dest:       "orders",
		EventID:    "evt_1",
		Key:        "customer 42",
		Type:       "order.created",
		Reason:     "max_attempts",
		Attempts:   60,
		LastStatus: hist[59].Status,
		LastError:  hist[59].Error,
		First:      hist[0].At,
		Last:       hist[59].At,
		Subject:    "relay.ev.orders.5",
		StreamSeq:  42,
		History:    hist,
		Headers:    nats.Header{"X-Trace": {"t"}, stream.HdrAttempt: {"3"}, stream.HdrMsgID: {"orig"}},
		Body:       []byte(`{"a":1}`),
	}
	js := &letterTestJS{}
	seq, err := Writer{JS: js, MaxSize: 1 << 20}.Write(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, uint64(11), seq)
	require.NotNil(t, js.msg)
	require.Equal(t, "relay.dlq.orders", js.msg.Subject)
	require.Equal(t, "dlq:orders:42", js.msg.Header.Get(stream.HdrMsgID))

	out, err := Decode(11, js.msg.Subject, js.msg.Header, js.msg.Data)
	require.NoError(t, err)
	want := in
	want.Seq = 11
	want.History = TrimHistory(hist)
	want.HistoryOmitted = 60 - MaxHistory // the marker of what was left out
	want.Headers = nats.Header{"X-Trace": {"t"}}
	require.Equal(t, want, out)
	require.Len(t, out.History, MaxHistory)
	require.False(t, strings.Contains(js.msg.Header.Get(stream.HdrHistory), "\n"))
}
