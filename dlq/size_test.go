package dlq

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// wireSize is m's size as the server counts it: headers and body.
func wireSize(m *nats.Msg) int {
	n := len("NATS/1.0\r\n\r\n") + len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + len(": \r\n")
		}
	}
	return n
}

func bigLetter(body, errLen int) Letter {
	hist := letterTestHistory(MaxHistory)
	for i := range hist {
		hist[i].Error = strings.Repeat("<", errLen-3) + strconv.Itoa(100+i)
	}
	return Letter{
		DeadAt: time.Date(2024, 3, 1, 16, 5, 1, 0, time.UTC), Dest: "orders", EventID: "evt_1", Reason: "max_attempts",
		Attempts: MaxHistory, LastStatus: 500, LastError: strings.Repeat("e", 2000), Note: strings.Repeat("n", 2000),
		Subject: "relay.in.orders", StreamSeq: 42, History: hist,
		Headers: nats.Header{"X-Trace": {"t"}}, Body: []byte(strings.Repeat("b", body)),
	}
}

// A dead letter is encoded within the limit whatever the event's size and
// history: the event referenced instead of copied, the history cut in the
// middle with the number left out, the free text bounded.
func TestEncodeFitsTheLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		l                Letter
		limit            int
		omitted, trimmed bool
	}{
		{"small event, long history: all of it", bigLetter(1000, 200), 1 << 20, false, false},
		{"event of exactly the limit: referenced", bigLetter(1<<20, 256), 1 << 20, true, false},
		{"event that fits alone but not with the history", bigLetter(1<<20-2000, 256), 1 << 20, true, false},
		{"small limit: the history cut", bigLetter(100_000, 256), 8 << 10, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := Encode(tc.l, tc.limit)
			require.NoError(t, err)
			require.LessOrEqual(t, wireSize(m), tc.limit)
			got, err := Decode(1, m.Subject, m.Header, m.Data)
			require.NoError(t, err)
			require.Equal(t, tc.omitted, got.EventOmitted)
			if tc.omitted {
				require.Empty(t, got.Body)
				require.Empty(t, got.Headers)
			} else {
				require.Equal(t, tc.l.Body, got.Body)
				require.Equal(t, tc.l.Headers, got.Headers)
			}
			require.Equal(t, len(tc.l.History), len(got.History)+got.HistoryOmitted)
			require.Equal(t, tc.trimmed, got.HistoryOmitted > 0)
			require.Equal(t, tc.l.History[0], got.History[0], "the first attempt kept")
			require.Equal(t, tc.l.History[len(tc.l.History)-1], got.History[len(got.History)-1], "the latest attempt kept")
			require.Len(t, []rune(got.LastError), maxTextHeader)
			require.Len(t, []rune(got.Note), maxTextHeader)
		})
	}
	_, err := Encode(bigLetter(10, 10), 300)
	require.ErrorIs(t, err, ErrPermanent, "not even relay's own headers fit")
}

// A letter that references its event is shown and replayed with the event
// read from the event stream by its sequence; once the event stream no
// longer holds it, both say so.
func TestOmittedEventIsReadFromTheEventStream(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	body := []byte(strings.Repeat("b", 10_000))
	ev := nats.NewMsg(stream.InSubject("orders", ""))
	ev.Header.Set(stream.HdrMsgID, "evt_1")
	ev.Header.Set("X-Trace", "t")
	ev.Data = body
	ack, err := srv.JS.PublishMsg(ctx, ev)
	require.NoError(t, err)

	l := bigLetter(len(body), 10)
	l.Body, l.StreamSeq, l.History = body, ack.Sequence, l.History[:3]
	seq, err := Writer{JS: srv.JS, MaxSize: 4096}.Write(ctx, l)
	require.NoError(t, err)
	st, err := Open(ctx, srv.JS)
	require.NoError(t, err)
	got, err := st.Get(ctx, seq)
	require.NoError(t, err)
	require.True(t, got.EventOmitted)
	require.Empty(t, got.Body)
	full, err := st.Resolve(ctx, got)
	require.NoError(t, err)
	require.Equal(t, body, full.Body)
	require.Equal(t, nats.Header{"X-Trace": {"t"}}, full.Headers)

	sub, err := srv.JS.Conn().SubscribeSync(stream.InPrefix + ".orders")
	require.NoError(t, err)
	_, err = st.Replay(ctx, got, "")
	require.NoError(t, err)
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, body, m.Data, "replayed with the event's body")
	require.Equal(t, "evt_1", m.Header.Get(stream.HdrEventID))
	require.Equal(t, "t", m.Header.Get("X-Trace"))

	// The original gone (retention): a clear error, nothing published.
	l.StreamSeq = ack.Sequence + 100
	seq, err = Writer{JS: srv.JS, MaxSize: 4096}.Write(ctx, l)
	require.NoError(t, err)
	got, err = st.Get(ctx, seq)
	require.NoError(t, err)
	_, err = st.Replay(ctx, got, "")
	require.ErrorContains(t, err, "no longer holds it at sequence")
	_, err = sub.NextMsg(200 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "nothing replayed")
}
