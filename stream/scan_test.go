package stream

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func scanned(t *testing.T, js jetstream.JetStream, filters []string, since time.Time) []string {
	t.Helper()
	var got []string
	require.NoError(t, Scan(context.Background(), js, EventsStream, filters, since, func(m *jetstream.RawStreamMsg) error {
		got = append(got, string(m.Data))
		return nil
	}))
	return got
}

func TestScanReadsInOrder(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	require.Empty(t, scanned(t, js, nil, time.Time{}), "an empty stream")
	var seqs []uint64
	for _, d := range []string{"a", "b", "a", "c", "a"} {
		ack, err := js.Publish(ctx, InSubject(d, ""), []byte(d))
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	require.Equal(t, []string{"a", "a", "a"}, scanned(t, js, []string{InSubject("a", "")}, time.Time{}))
	require.Equal(t, []string{"a", "b", "a", "c", "a"}, scanned(t, js, nil, time.Time{}))
	// Several filters: merged in stream order.
	require.Equal(t, []string{"a", "b", "a", "a"}, scanned(t, js, []string{InSubject("b", ""), InSubject("a", "")}, time.Time{}))
	require.Equal(t, []string{"b", "c"}, scanned(t, js, []string{InSubject("c", ""), InSubject("b", ""), InSubject("d", "")}, time.Time{}),
		"with one for a destination that was not published to")
	require.Empty(t, scanned(t, js, []string{InSubject("d", "")}, time.Time{}), "nothing on the filter")

	// A deleted message is skipped.
	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(ctx, seqs[2]))
	require.Equal(t, []string{"a", "a"}, scanned(t, js, []string{InSubject("a", "")}, time.Time{}))

	// Since: stored at or after it.
	raw, err := s.GetMsg(ctx, seqs[3])
	require.NoError(t, err)
	require.Equal(t, []string{"c", "a"}, scanned(t, js, nil, raw.Time))
	require.Equal(t, []string{"a"}, scanned(t, js, []string{InSubject("a", "")}, raw.Time))

	// Nothing stored after the scan began.
	var got []string
	require.NoError(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(m *jetstream.RawStreamMsg) error {
		got = append(got, string(m.Data))
		if len(got) == 1 {
			_, err := js.Publish(ctx, InSubject("a", ""), []byte("late"))
			require.NoError(t, err)
		}
		return nil
	}))
	require.Equal(t, []string{"a", "b", "c", "a"}, got)
	require.Empty(t, consumerNames(t, js), "no consumer left behind")
}

// TestScanReadsAMessageWithAStatusHeaderAndNoBody: nats.go's consumers take
// such a message for a status of the pull protocol, and its ordered
// consumer never gets past it.
func TestScanReadsAMessageWithAStatusHeaderAndNoBody(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	m := nats.NewMsg(InSubject("a", ""))
	m.Header.Set("Status", "404")
	m.Header.Set("Description", "No Messages")
	_, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)
	_, err = js.Publish(ctx, InSubject("a", ""), []byte("after"))
	require.NoError(t, err)

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []*jetstream.RawStreamMsg
	require.NoError(t, Scan(sctx, js, EventsStream, nil, time.Time{}, func(m *jetstream.RawStreamMsg) error {
		got = append(got, m)
		return nil
	}))
	require.Len(t, got, 2)
	require.Empty(t, got[0].Data)
	require.Equal(t, "404", got[0].Header.Get("Status"))
	require.Equal(t, "after", string(got[1].Data))
}

// consumerNames lists the events stream's consumers.
func consumerNames(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	s, err := js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	var names []string
	l := s.ConsumerNames(context.Background())
	for n := range l.Name() {
		names = append(names, n)
	}
	require.NoError(t, l.Err())
	return names
}

// TestScanStartsAgainWhenItsConsumerGoes: a consumer deleted under a scan
// (a server restart would lose its in-memory one too) is made again after
// the last message read; nothing is read twice or skipped, and nothing is
// left behind.
func TestScanStartsAgainWhenItsConsumerGoes(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	var want []string
	for i := range 600 {
		want = append(want, strconv.Itoa(i))
		_, err := js.Publish(ctx, InSubject("a", ""), []byte(want[i]))
		require.NoError(t, err)
	}
	var got []string
	deleted := 0
	require.NoError(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(m *jetstream.RawStreamMsg) error {
		got = append(got, string(m.Data))
		if len(got) == 100 || len(got) == 400 {
			names := consumerNames(t, js)
			require.Len(t, names, 1, "the scan's consumer")
			require.NoError(t, js.DeleteConsumer(ctx, EventsStream, names[0]))
			deleted++
		}
		return nil
	}))
	require.Equal(t, 2, deleted)
	require.Equal(t, want, got)
	require.Empty(t, consumerNames(t, js), "no consumer left behind")
}

func TestScanStopsEarly(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	for range 3 {
		_, err := js.Publish(ctx, InSubject("a", ""), []byte("a"))
		require.NoError(t, err)
	}
	n := 0
	require.NoError(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(*jetstream.RawStreamMsg) error { n++; return ErrStop }))
	require.Equal(t, 1, n, "ErrStop")
	boom := errors.New("boom")
	require.ErrorIs(t, Scan(ctx, js, EventsStream, nil, time.Time{}, func(*jetstream.RawStreamMsg) error { return boom }), boom)
	cctx, cancel := context.WithCancel(ctx)
	n = 0
	err := Scan(cctx, js, EventsStream, nil, time.Time{}, func(*jetstream.RawStreamMsg) error { n++; cancel(); return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, n, "nothing read after its context ended")
	_, err = js.Stream(ctx, "NO_SUCH_STREAM")
	require.Error(t, err)
	require.ErrorContains(t, Scan(ctx, js, "NO_SUCH_STREAM", nil, time.Time{}, func(*jetstream.RawStreamMsg) error { return nil }), "read NO_SUCH_STREAM")
}

// BenchmarkScan reads 10,000 stored 1 KiB events of one destination among
// two (what dlq list and log replay cost per message).
func BenchmarkScan(b *testing.B) {
	s, err := StartEmbedded(EmbeddedConfig{DataDir: b.TempDir(), Port: -1})
	require.NoError(b, err)
	b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	ctx := context.Background()
	require.NoError(b, Ensure(ctx, js, Config{}))
	body := make([]byte, 1024)
	const n = 10_000
	for i := range 2 * n {
		d := "a"
		if i%2 == 1 {
			d = "b"
		}
		if _, err := js.PublishAsync(InSubject(d, ""), body); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing took over a minute")
	}
	b.ResetTimer()
	for range b.N {
		got := 0
		require.NoError(b, Scan(ctx, js, EventsStream, []string{InSubject("a", "")}, time.Time{}, func(*jetstream.RawStreamMsg) error {
			got++
			return nil
		}))
		require.Equal(b, n, got)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
}
