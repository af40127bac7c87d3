package stream

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/stream/embedded"
	"github.com/stretchr/testify/require"
)

func readAll(t *testing.T, js jetstream.JetStream, filters []string, since time.Time) []string {
	t.Helper()
	var got []string
	require.NoError(t, Read(context.Background(), js, EventsStream, ReadOptions{Filters: filters, Since: since}, func(m *jetstream.RawStreamMsg) error {
		got = append(got, string(m.Data))
		return nil
	}))
	return got
}

func TestReadReadsInOrder(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	require.Empty(t, readAll(t, js, nil, time.Time{}), "an empty stream")
	var seqs []uint64
	for _, d := range []string{"a", "b", "a", "c", "a"} {
		ack, err := js.Publish(ctx, InSubject(d, ""), []byte(d))
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	require.Equal(t, []string{"a", "a", "a"}, readAll(t, js, []string{InSubject("a", "")}, time.Time{}))
	require.Equal(t, []string{"a", "b", "a", "c", "a"}, readAll(t, js, nil, time.Time{}))
	// Several filters: merged in stream order.
	require.Equal(t, []string{"a", "b", "a", "a"}, readAll(t, js, []string{InSubject("b", ""), InSubject("a", "")}, time.Time{}))
	require.Equal(t, []string{"b", "c"}, readAll(t, js, []string{InSubject("c", ""), InSubject("b", ""), InSubject("d", "")}, time.Time{}),
		"with one for a destination that was not published to")
	require.Empty(t, readAll(t, js, []string{InSubject("d", "")}, time.Time{}), "nothing on the filter")

	// A deleted message is skipped.
	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(ctx, seqs[2]))
	require.Equal(t, []string{"a", "a"}, readAll(t, js, []string{InSubject("a", "")}, time.Time{}))

	// Since: stored at or after it.
	raw, err := s.GetMsg(ctx, seqs[3])
	require.NoError(t, err)
	require.Equal(t, []string{"c", "a"}, readAll(t, js, nil, raw.Time))
	require.Equal(t, []string{"a"}, readAll(t, js, []string{InSubject("a", "")}, raw.Time))

	// Nothing stored after the scan began.
	var got []string
	require.NoError(t, Read(ctx, js, EventsStream, ReadOptions{}, func(m *jetstream.RawStreamMsg) error {
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
func TestReadReadsAMessageWithAStatusHeaderAndNoBody(t *testing.T) {
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
	require.NoError(t, Read(sctx, js, EventsStream, ReadOptions{}, func(m *jetstream.RawStreamMsg) error {
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
func TestReadStartsAgainWhenItsConsumerGoes(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	var want []string
	// More than it asks for ahead (readAhead) twice over: what came before
	// a deletion is read first, then the new consumer's.
	for i := range 3000 {
		want = append(want, strconv.Itoa(i))
		_, err := js.Publish(ctx, InSubject("a", ""), []byte(want[i]))
		require.NoError(t, err)
	}
	var got []string
	deleted := 0
	require.NoError(t, Read(ctx, js, EventsStream, ReadOptions{}, func(m *jetstream.RawStreamMsg) error {
		got = append(got, string(m.Data))
		if len(got) == 100 || len(got) == 2500 {
			names := consumerNames(t, js)
			require.Len(t, names, 1, "the reader's consumer")
			require.NoError(t, js.DeleteConsumer(ctx, EventsStream, names[0]))
			deleted++
		}
		return nil
	}))
	require.Equal(t, 2, deleted)
	require.Equal(t, want, got)
	require.Empty(t, consumerNames(t, js), "no consumer left behind")
}

func TestReadStopsEarly(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	for range 3 {
		_, err := js.Publish(ctx, InSubject("a", ""), []byte("a"))
		require.NoError(t, err)
	}
	n := 0
	require.NoError(t, Read(ctx, js, EventsStream, ReadOptions{}, func(*jetstream.RawStreamMsg) error { n++; return ErrStop }))
	require.Equal(t, 1, n, "ErrStop")
	boom := errors.New("boom")
	require.ErrorIs(t, Read(ctx, js, EventsStream, ReadOptions{}, func(*jetstream.RawStreamMsg) error { return boom }), boom)
	cctx, cancel := context.WithCancel(ctx)
	n = 0
	err := Read(cctx, js, EventsStream, ReadOptions{}, func(*jetstream.RawStreamMsg) error { n++; cancel(); return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, n, "nothing read after its context ended")
	_, err = js.Stream(ctx, "NO_SUCH_STREAM")
	require.Error(t, err)
	require.ErrorContains(t, Read(ctx, js, "NO_SUCH_STREAM", ReadOptions{}, func(*jetstream.RawStreamMsg) error { return nil }), "read NO_SUCH_STREAM")
}

// BenchmarkScan reads 10,000 stored 1 KiB events of one destination among
// two (what dlq list and log replay cost per message).
func BenchmarkRead(b *testing.B) {
	s, err := embedded.Start(embedded.Config{DataDir: b.TempDir(), Port: -1})
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
		require.NoError(b, Read(ctx, js, EventsStream, ReadOptions{Filters: []string{InSubject("a", "")}}, func(*jetstream.RawStreamMsg) error {
			got++
			return nil
		}))
		require.Equal(b, n, got)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
}

// With Follow, Read goes on with messages stored after it began, from
// after the given sequence; with HeadersOnly it reads no bodies.
func TestReadFollowsFromASequence(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	publish := func(n int) {
		for range n {
			_, err := js.Publish(ctx, InSubject("a", ""), []byte("body"))
			require.NoError(t, err)
		}
	}
	publish(5)
	var seqs []uint64
	err := Read(ctx, js, EventsStream, ReadOptions{After: 2, Follow: true, HeadersOnly: true}, func(m *jetstream.RawStreamMsg) error {
		seqs = append(seqs, m.Sequence)
		require.Empty(t, m.Data, "headers only")
		require.Equal(t, "4", m.Header.Get("Nats-Msg-Size"), "the body's size is in its place")
		switch len(seqs) {
		case 3:
			publish(2) // stored after Read began
		case 5:
			return ErrStop
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4, 5, 6, 7}, seqs)
	require.Empty(t, consumerNames(t, js), "no consumer left behind")
}

// GetMsg reads a message by sequence, or the next one on a subject.
func TestGetMsg(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	for i, dest := range []string{"a", "a", "b", "a"} {
		_, err := js.Publish(ctx, InSubject(dest, ""), []byte(strconv.Itoa(i+1)), jetstream.WithMsgID("id-"+strconv.Itoa(i+1)))
		require.NoError(t, err)
	}
	m, err := GetMsg(ctx, js, EventsStream, 2, "")
	require.NoError(t, err)
	require.Equal(t, "2", string(m.Data))
	require.EqualValues(t, 2, m.Sequence)
	require.Equal(t, InSubject("a", ""), m.Subject)
	require.Equal(t, "id-2", m.Header.Get("Nats-Msg-Id"))
	require.False(t, m.Time.IsZero())

	m, err = GetMsg(ctx, js, EventsStream, 1, InSubject("b", ""))
	require.NoError(t, err)
	require.EqualValues(t, 3, m.Sequence, "the first on b at or after 1")

	_, err = GetMsg(ctx, js, EventsStream, 100, "")
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
	_, err = GetMsg(ctx, js, EventsStream, 4, InSubject("b", ""))
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
	_, err = GetMsg(ctx, js, "NO_SUCH_STREAM", 1, "")
	require.Error(t, err)
}

// TestReadReadsPastRequestsEndedByTheirByteLimit: a pull request ends at
// its max_bytes with a status while the next one is being served; the
// messages after that status are read too (a Read once returned there,
// with the rest of the stream already delivered to it, and a dead-letter
// replay republished 812 of 1,000 letters).
func TestReadReadsPastRequestsEndedByTheirByteLimit(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	const n = 1000
	// The first request ends at its max_bytes (twice the maximum payload)
	// some 30 messages before the last.
	body := make([]byte, 2*js.Conn().MaxPayload()/(n-30))
	for range n {
		_, err := js.PublishAsync(InSubject("a", ""), body)
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishing did not finish")
	}
	for round := range 10 {
		got := 0
		require.NoError(t, Read(ctx, js, EventsStream, ReadOptions{Filters: []string{InSubject("a", "")}}, func(m *jetstream.RawStreamMsg) error {
			got++
			// As a replay does: a publish per message read.
			_, err := js.Publish(ctx, InSubject("b", ""), nil)
			return err
		}))
		require.Equal(t, n, got, "round %d", round)
	}
}

// TestPullerReceivesWhatNATSGoWould: the puller's events carry the same
// metadata as nats.go's for the same delivery, and its acks work: one
// event acked, one nak'd (and delivered again), one in progress then
// terminated.
func TestPullerReceivesWhatNATSGoWould(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	require.NoError(t, Ensure(context.Background(), js, Config{}))
	cons, err := js.CreateOrUpdateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{
		Durable:       "pulltest",
		FilterSubject: DestFilters("pt")[0],
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
	})
	require.NoError(t, err)
	subj := DestFilters("pt")[0]
	for i := range 3 {
		_, err := js.Publish(ctx, subj, []byte{byte('a' + i)})
		require.NoError(t, err)
	}

	// The server counts a consumer's pending events apart from storing
	// them: wait until it counts all three, so that the counts the
	// deliveries carry are exact.
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 3
	}, 10*time.Second, 10*time.Millisecond, "the consumer counts the three events")
	p, err := NewPuller(js, EventsStream, "pulltest", 2*time.Second, time.Second, 0)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, p.Fill(3, 0, now))
	require.Equal(t, 3, p.asked)
	var got []*PulledMsg
	for len(got) < 3 {
		select {
		case <-p.signal:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of 3 events arrived", len(got))
		}
		for _, m := range p.Take(nil) {
			st, err := p.Status(m, time.Now())
			if st == PullReleased {
				// With max_bytes, the server says a batch done
				// with bytes left.
				require.ErrorContains(t, err, "409 Batch Completed")
				continue
			}
			require.NoError(t, err)
			require.Equal(t, PullEvent, st)
			got = append(got, NewPulledMsg(m, js.Conn()))
		}
	}
	require.Equal(t, 0, p.asked, "every event asked for arrived")

	for i, m := range got {
		meta, err := m.Metadata()
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), meta.Sequence.Stream)
		require.Equal(t, uint64(i+1), meta.Sequence.Consumer)
		require.Equal(t, uint64(1), meta.NumDelivered)
		require.Equal(t, uint64(2-i), meta.NumPending)
		require.Equal(t, EventsStream, meta.Stream)
		require.Equal(t, "pulltest", meta.Consumer)
		stored, err := js.Stream(ctx, EventsStream)
		require.NoError(t, err)
		raw, err := stored.GetMsg(ctx, meta.Sequence.Stream)
		require.NoError(t, err)
		require.True(t, raw.Time.Equal(meta.Timestamp), "stored %v, metadata %v", raw.Time, meta.Timestamp)
		require.Equal(t, raw.Data, m.Data())
		require.Equal(t, raw.Subject, m.Subject())
	}

	require.NoError(t, got[0].DoubleAck(ctx))
	require.ErrorIs(t, got[0].Nak(), jetstream.ErrMsgAlreadyAckd, "an acked event cannot be nak'd")
	require.NoError(t, got[1].Nak())
	require.NoError(t, got[2].InProgress())
	require.NoError(t, got[2].InProgress(), "in-progress acks can be repeated")
	require.NoError(t, got[2].TermWithReason("test"))

	// The nak'd one comes again, to nats.go, with the same metadata
	// nats.go reads.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var again jetstream.Msg
	for m := range batch.Messages() {
		again = m
	}
	require.NoError(t, batch.Error())
	require.NotNil(t, again, "the nak'd event was delivered again")
	want, err := again.Metadata()
	require.NoError(t, err)
	mine, err := AckMetadata(again.Reply())
	require.NoError(t, err)
	require.Equal(t, want, mine)
	require.Equal(t, uint64(2), mine.Sequence.Stream)
	require.Equal(t, uint64(2), mine.NumDelivered)
	require.NoError(t, again.Ack())

	// Acks are fire-and-forget: the server may take a moment.
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0
	}, 5*time.Second, 10*time.Millisecond, "every event acked or terminated")
	// What arrives after that can only be a status of the request (an idle
	// heartbeat, its end), never an event: CI once got one here.
	for _, m := range p.Stop(time.Second) {
		require.Empty(t, m.Reply, "an event arrived after all three: %s %v", m.Subject, m.Header)
	}
}

func statusMsg(code, descr string, pending int) *nats.Msg {
	m := nats.NewMsg("_INBOX.test")
	m.Header.Set("Status", code)
	if descr != "" {
		m.Header.Set("Description", descr)
	}
	if pending >= 0 {
		m.Header.Set("Nats-Pending-Messages", strconv.Itoa(pending))
		m.Header.Set("Nats-Pending-Bytes", "0")
	}
	return m
}

// TestPullerReadsTheServersStatuses: what each status from the server does
// to the count of events asked for (ADR-13 and nats-server 2.15).
func TestPullerReadsTheServersStatuses(t *testing.T) {
	event := nats.NewMsg("relay.in.d._")
	event.Reply = "$JS.ACK.RELAY_EVENTS.relay_d.1.1.1.1.0"
	// An event published with no body and a header named Status is an
	// event: it has an ack subject.
	odd := nats.NewMsg("relay.in.d._")
	odd.Header.Set("Status", "404")
	odd.Reply = event.Reply

	for _, c := range []struct {
		name  string
		msg   *nats.Msg
		want  PullStatus
		asked int // from 10
	}{
		{"event", event, PullEvent, 9},
		{"event with a Status header", odd, PullEvent, 9},
		{"idle heartbeat", statusMsg("100", "Idle Heartbeat", -1), PullBeat, 10},
		{"request expired", statusMsg("408", "Request Timeout", 4), PullReleased, 6},
		{"next event over the request's max_bytes", statusMsg("409", "Message Size Exceeds MaxBytes", 3), PullReleased, 7},
		{"batch done with bytes left", statusMsg("409", "Batch Completed", 0), PullReleased, 10},
		{"interest expired", statusMsg("408", "Interest Expired", 10), PullReleased, 0},
		{"more left than asked", statusMsg("408", "Request Timeout", 12), PullReleased, 0},
		{"leadership change", statusMsg("409", "Leadership Change", 3), PullLost, 0},
		{"leadership change without counts", statusMsg("409", "Leadership Change", -1), PullLost, 0},
		{"server shutdown", statusMsg("409", "Server Shutdown", -1), PullLost, 0},
		{"consumer deleted", statusMsg("409", "Consumer Deleted", -1), PullGone, 0},
		{"too many requests", statusMsg("409", "Exceeded MaxWaiting", -1), PullRefused, 0},
		{"bad request", statusMsg("400", "Bad Request", -1), PullRefused, 0},
		{"no responders", statusMsg("503", "", -1), PullUnanswered, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Puller{asked: 10, hb: time.Second}
			now := time.Now()
			st, err := p.Status(c.msg, now)
			require.Equal(t, c.want, st)
			require.Equal(t, c.asked, p.asked)
			require.Equal(t, now, p.heard, "anything from the server counts as a sign of life")
			if st == PullEvent || st == PullBeat {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, c.msg.Header.Get("Status"))
			}
		})
	}
}

// TestPullerAsksAgainAfterTwoMissedHeartbeats: requests the server has
// said nothing about for two heartbeats (and a half) are counted gone.
func TestPullerAsksAgainAfterTwoMissedHeartbeats(t *testing.T) {
	t0 := time.Now()
	p := &Puller{hb: time.Second}
	require.False(t, p.Silent(t0.Add(time.Hour)), "nothing asked for: nothing to miss")
	p.asked, p.heard = 5, t0
	require.False(t, p.Silent(t0.Add(2500*time.Millisecond)))
	require.Equal(t, 5, p.asked)
	require.True(t, p.Silent(t0.Add(2501*time.Millisecond)))
	require.Equal(t, 0, p.asked)
}
