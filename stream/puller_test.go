package stream

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

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
