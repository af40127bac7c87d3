package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// A crash of the relay between the park of an event's failed first attempt
// in Redis and its record in the attempt log leaves what these tests set
// up by hand: the attempt and the park's intent recorded, the entry in
// Redis, the message unacknowledged. The relay that comes back delivers the
// event once: the message, back from JetStream, is acknowledged without an
// attempt, and the copy from Redis is delivered. With the entry promoted
// before the message comes back, the copy republished for it is dropped as
// a duplicate of the promoter's.
func TestParkInterruptedByACrashDeliversOnce(t *testing.T) {
	for _, tc := range []struct {
		name            string
		promotedAlready bool
	}{{"entry still in Redis", false}, {"entry promoted before the message came back", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := streamtest.Start(t)
			rs := redistest.Start(t, redistest.Options{})
			sched := schedule.NewStore(rs.Client())
			var requests atomic.Int64
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(sink.Close)
			st, err := destination.NewStore(ctx, srv.JS)
			require.NoError(t, err)
			_, err = st.Add(ctx, destination.Destination{Name: "crashed", URL: sink.URL})
			require.NoError(t, err)
			prod, err := publish.NewProducer(ctx, srv.JS)
			require.NoError(t, err)
			pub, err := prod.Publish(ctx, publish.Event{Dest: "crashed", ID: "evt_1", Data: []byte(`{"n":1}`)})
			require.NoError(t, err)

			// What the killed relay did: the failed attempt and the park's
			// intent recorded, the entry stored in Redis, due now; nothing
			// more.
			raw, err := stream.GetMsg(ctx, srv.JS, stream.EventsStream, pub.Seq, "")
			require.NoError(t, err)
			ev, err := rawEvent(raw, nil)
			require.NoError(t, err)
			killed, err := New(ctx, Config{JS: srv.JS, Schedule: sched})
			require.NoError(t, err)
			_, recorded := killed.recordFailure(ctx, ev, 1, Result{Status: 503}, "", true)
			require.True(t, recorded)
			e, err := killed.parkEntry(ev, 1, ev.hdr, time.Now())
			require.NoError(t, err)
			require.NoError(t, sched.Park(ctx, e))
			promoter := schedule.Promoter{Store: sched, JS: srv.JS}
			if tc.promotedAlready {
				n, err := promoter.PromoteDue(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n, "the copy republished")
			}

			runRelay(t, Config{JS: srv.JS, Schedule: sched,
				HTTPClient: egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})})
			idle := func() bool { // the relay creates its consumer as it starts
				cons, err := srv.JS.Consumer(ctx, stream.EventsStream, destination.ConsumerName("crashed"))
				if err != nil {
					return false
				}
				info, err := cons.Info(ctx)
				return err == nil && info.NumPending == 0 && info.NumAckPending == 0
			}
			if !tc.promotedAlready {
				waitFor(t, 30*time.Second, idle, "the message acknowledged")
				require.Zero(t, requests.Load(), "the message is not attempted: its copy waits in Redis")
				has, err := sched.Has(ctx, e)
				require.NoError(t, err)
				require.True(t, has, "the copy still parked")
				_, err = promoter.PromoteDue(ctx)
				require.NoError(t, err)
			}
			waitFor(t, 30*time.Second, func() bool { return requests.Load() >= 1 && idle() }, "the copy delivered")
			require.EqualValues(t, 1, requests.Load(), "delivered once")
		})
	}
}

// waitFor polls cond until it holds, failing the test with what after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The copy of a parked event is delivered and acknowledged, and a crash of
// the NATS server's process takes the ack back: the copy comes back, and is
// acknowledged without an attempt. Its done mark, written before the ack,
// says it was settled, whether the attempt log was deleted after the ack
// or not (the crash, or a lost confirmation, came first).
func TestSettledCopyOfParkedEventIsNotAttemptedAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ackLost error
	}{{"ack confirmed, log deleted", nil}, {"ack not confirmed, log kept", context.DeadlineExceeded}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rs := redistest.Start(t, redistest.Options{})
			r, err := New(ctx, Config{JS: streamtest.Start(t).JS, Schedule: schedule.NewStore(rs.Client())})
			require.NoError(t, err)
			original := event{dest: "orders", id: "evt_1", seq: 7, origin: 7}
			_, recorded := r.recordFailure(ctx, original, 1, Result{Status: 503}, "", true)
			require.True(t, recorded)
			require.NoError(t, r.markParked(ctx, original))

			copied := event{dest: "orders", id: "evt_1", seq: 12, origin: 7, prior: 1}
			in := Input{NeedLog: true}
			r.readLogInto(&in, &copied)
			require.False(t, in.Settled, "the copy's first delivery is attempted")
			require.Equal(t, 2, in.Attempt)
			msg := &ackMsg{doubleAckErr: tc.ackLost}
			err = act(t, r, ctx, settles(msg), copied, 2, nil, &Outcome{Decision: Decision{Action: Ack}})
			require.ErrorIs(t, err, tc.ackLost)

			for _, back := range []event{copied, original} {
				back.parked = 0
				in := Input{NeedLog: true}
				r.readLogInto(&in, &back)
				require.True(t, in.Settled, "message %d back after its ack was lost", back.seq)
			}
		})
	}
}
