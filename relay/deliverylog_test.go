package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// logFixture is a relay with the delivery log on, delivering to a sink
// whose answer each test sets per destination (the path is the
// destination's name).
type logFixture struct {
	t    *testing.T
	srv  streamtest.Server
	sink *httptest.Server
	prod *publish.Producer
	st   *destination.Store

	mu       sync.Mutex
	settled  map[string]int // outcomes by event id
	stop     func()         // stops the relay (once; the test's end does too)
	r        *Relay
	answer   func(dest string, n int) (int, string)
	received map[string]int // requests by destination
	hits     map[string][]sinkHit
}

// sinkHit is a request the sink received.
type sinkHit struct {
	ID, Type, Body string
}

func startLogFixture(t *testing.T, cfg Config) *logFixture {
	t.Helper()
	f := &logFixture{t: t, srv: streamtest.Start(t), settled: map[string]int{}, received: map[string]int{}, hits: map[string][]sinkHit{}}
	f.sink = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dest := strings.TrimPrefix(r.URL.Path, "/")
		reqBody, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.received[dest]++
		f.hits[dest] = append(f.hits[dest], sinkHit{ID: r.Header.Get("webhook-id"), Type: r.Header.Get("Relay-Event-Type"), Body: string(reqBody)})
		n := f.received[dest]
		answer := f.answer
		f.mu.Unlock()
		status, body := answer(dest, n)
		w.Header().Set("X-Request-Id", "req-"+dest)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(f.sink.Close)
	ctx := context.Background()
	var err error
	f.st, err = destination.NewStore(ctx, f.srv.JS)
	require.NoError(t, err)
	f.prod, err = publish.NewProducer(ctx, f.srv.JS)
	require.NoError(t, err)
	cfg.JS = f.srv.JS
	cfg.HTTPClient = egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	cfg.OnDelivery = func(o Outcome) {
		f.mu.Lock()
		f.settled[o.EventID]++
		f.mu.Unlock()
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	r, err := New(ctx, cfg)
	require.NoError(t, err)
	f.r = r
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	f.stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(f.stop)
	return f
}

func (f *logFixture) addDest(d destination.Destination) {
	f.t.Helper()
	d.URL = f.sink.URL + "/" + d.Name
	if d.Retry == (destination.RetryPolicy{}) {
		d.Retry = destination.RetryPolicy{Base: destination.Duration(50 * time.Millisecond), Max: destination.Duration(100 * time.Millisecond), MaxAttempts: 3}
	}
	_, err := f.st.Add(context.Background(), d)
	require.NoError(f.t, err)
}

// waitLog waits until the delivery log answers q with n records.
func (f *logFixture) waitLog(q deliverylog.AttemptQuery, n int) []deliverylog.AttemptRecord {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		page, err := deliverylog.ReadAttempts(context.Background(), f.srv.JS, q)
		require.NoError(f.t, err)
		if len(page.Attempts) >= n {
			require.Len(f.t, page.Attempts, n, "no more records than attempts")
			return page.Attempts
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the delivery log has %d records for %+v, want %d: %+v", len(page.Attempts), q, n, page.Attempts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeliveryLogRecordsEveryOutcome: a delivery, a retry then a
// delivery, a dead letter after a permanent status, and a filtered event
// are each in the log, with what the destination answered, and an
// event's lookup tells each destination's state.
func TestDeliveryLogRecordsEveryOutcome(t *testing.T) {
	f := startLogFixture(t, Config{})
	f.answer = func(dest string, n int) (int, string) {
		switch {
		case dest == "flaky" && n == 1:
			return 503, "try later"
		case dest == "gone":
			return 400, "bad request: " + strings.Repeat("x", 2000)
		}
		return 200, `{"received":true}`
	}
	for _, d := range []destination.Destination{
		{Name: "ok", Types: []string{"order.created"}},
		{Name: "flaky", Types: []string{"order.created"}},
		{Name: "gone"},
		{Name: "picky", Types: []string{"order.created"}, Filter: `data.total > 100`},
	} {
		f.addDest(d)
	}
	ctx := context.Background()
	t0 := time.Now()
	_, err := f.prod.Publish(ctx, publish.Event{Type: "order.created", ID: "evt_typed", Key: "cust-1", Data: []byte(`{"total":5}`)})
	require.NoError(t, err)
	_, err = f.prod.Publish(ctx, publish.Event{Dest: "gone", ID: "evt_gone", Data: []byte(`{}`)})
	require.NoError(t, err)

	ok := f.waitLog(deliverylog.AttemptQuery{Dest: "ok"}, 1)[0]
	require.Equal(t, "evt_typed", ok.EventID)
	require.Equal(t, "order.created", ok.Type)
	require.Equal(t, "cust-1", ok.Key)
	require.Equal(t, 1, ok.Attempt)
	require.Equal(t, deliverylog.StateDelivered, deliverylog.StateOf(ok.Outcome))
	require.Equal(t, 200, ok.Status)
	require.Equal(t, stream.Class2xx, ok.Class)
	require.Equal(t, `{"received":true}`, ok.ResponseBody)
	require.Equal(t, "req-ok", ok.ResponseHeaders["X-Request-Id"])
	require.Equal(t, f.sink.URL+"/ok", ok.URL)
	require.NotZero(t, ok.Seq)

	flaky := f.waitLog(deliverylog.AttemptQuery{Dest: "flaky"}, 2)
	require.Equal(t, []int{2, 1}, []int{flaky[0].Attempt, flaky[1].Attempt}, "newest first")
	require.Equal(t, "retry", flaky[1].Outcome)
	require.Equal(t, 503, flaky[1].Status)
	require.Equal(t, "try later", flaky[1].ResponseBody)
	require.Positive(t, flaky[1].RetryInMS)
	require.Equal(t, "delivered", flaky[0].Outcome)

	gone := f.waitLog(deliverylog.AttemptQuery{Dest: "gone"}, 1)[0]
	require.Equal(t, "dead_letter", gone.Outcome)
	require.Equal(t, ReasonPermanentStatus, gone.Reason)
	require.Len(t, gone.ResponseBody, DefaultLogResponseBytes, "the body is kept up to the limit")

	picky := f.waitLog(deliverylog.AttemptQuery{Dest: "picky"}, 1)[0]
	require.Equal(t, "filtered", picky.Outcome)
	require.Equal(t, stream.ClassNone, picky.Class)
	require.Zero(t, picky.Attempt)

	// Filters.
	require.Len(t, f.waitLog(deliverylog.AttemptQuery{Status: "5xx"}, 1), 1)
	require.Len(t, f.waitLog(deliverylog.AttemptQuery{Status: "503"}, 1), 1)
	require.Len(t, f.waitLog(deliverylog.AttemptQuery{Status: "4xx"}, 1), 1)
	require.Len(t, f.waitLog(deliverylog.AttemptQuery{EventID: "evt_typed"}, 4), 4)
	require.Len(t, f.waitLog(deliverylog.AttemptQuery{EventID: "evt_typed", Dest: "flaky", Status: "2xx"}, 1), 1)
	all := f.waitLog(deliverylog.AttemptQuery{}, 5)
	require.Len(t, f.waitLog(deliverylog.AttemptQuery{Since: t0}, 5), 5)
	require.Len(t, f.waitLog(deliverylog.AttemptQuery{Since: t0, Until: time.Now()}, 5), 5)
	none, err := deliverylog.ReadAttempts(ctx, f.srv.JS, deliverylog.AttemptQuery{Until: t0})
	require.NoError(t, err)
	require.Empty(t, none.Attempts)
	none, err = deliverylog.ReadAttempts(ctx, f.srv.JS, deliverylog.AttemptQuery{Since: time.Now()})
	require.NoError(t, err)
	require.Empty(t, none.Attempts)

	// Pages: two at a time, newest first, each record once.
	var seen []uint64
	q := deliverylog.AttemptQuery{Limit: 2}
	for {
		page, err := deliverylog.ReadAttempts(ctx, f.srv.JS, q)
		require.NoError(t, err)
		for _, a := range page.Attempts {
			seen = append(seen, a.Seq)
		}
		if page.Next == 0 {
			break
		}
		q.Before = page.Next
	}
	want := make([]uint64, len(all))
	for i, a := range all {
		want[i] = a.Seq
	}
	require.Equal(t, want, seen)

	v, err := deliverylog.LookupEvent(ctx, f.srv.JS, "evt_typed")
	require.NoError(t, err)
	require.True(t, v.Stored)
	require.Equal(t, `{"total":5}`, string(v.Body))
	require.Equal(t, "order.created", v.Type)
	require.ElementsMatch(t, []string{"ok", "flaky", "picky"}, v.RoutedTo)
	states := map[string]string{}
	for _, d := range v.Destinations {
		states[d.Dest] = d.State
	}
	require.Equal(t, map[string]string{"ok": deliverylog.StateDelivered, "flaky": deliverylog.StateDelivered, "picky": deliverylog.StateFilteredOut}, states)

	v, err = deliverylog.LookupEvent(ctx, f.srv.JS, "evt_gone")
	require.NoError(t, err)
	require.Equal(t, deliverylog.StateDead, v.Destinations[0].State)
	_, err = deliverylog.LookupEvent(ctx, f.srv.JS, "evt_nobody")
	require.ErrorIs(t, err, deliverylog.ErrEventNotFound)
}

// TestDeliveryLogOffRecordsNothing: with the log off, nothing is written
// and no response body is kept.
func TestDeliveryLogOffRecordsNothing(t *testing.T) {
	f := startLogFixture(t, Config{NoAttemptLog: true})
	f.answer = func(string, int) (int, string) { return 200, "ok" }
	f.addDest(destination.Destination{Name: "ok"})
	_, err := f.prod.Publish(context.Background(), publish.Event{Dest: "ok", ID: "evt_1", Data: []byte(`{}`)})
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		f.mu.Lock()
		n := f.settled["evt_1"]
		f.mu.Unlock()
		if n > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "not delivered")
		time.Sleep(10 * time.Millisecond)
	}
	s, err := f.srv.JS.Stream(context.Background(), stream.LogStream)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs)
}

func TestAttemptQueryValidate(t *testing.T) {
	for _, c := range []struct {
		q     deliverylog.AttemptQuery
		field string
	}{
		{deliverylog.AttemptQuery{Status: "6xx"}, "status"},
		{deliverylog.AttemptQuery{Status: "99"}, "status"},
		{deliverylog.AttemptQuery{Dest: "Bad Name"}, "dest"},
		{deliverylog.AttemptQuery{Limit: deliverylog.MaxAttemptLimit + 1}, "limit"},
		{deliverylog.AttemptQuery{Since: time.Unix(100, 0), Until: time.Unix(50, 0)}, "until"},
	} {
		var qe *deliverylog.QueryError
		require.ErrorAs(t, c.q.Validate(), &qe, "%+v", c.q)
		require.Equal(t, c.field, qe.Field)
	}
	for _, s := range []string{"", "2xx", "5XX", "error", "none", "503", "200"} {
		require.NoError(t, deliverylog.AttemptQuery{Status: s}.Validate(), s)
	}
}

// TestDeliveryLogKeepsBatchesThatWereNotStored: while the log cannot be
// written (here its stream is gone; a restarting node or a disconnect
// does the same), the writer keeps its batches and publishes them again
// at each flush; once the log takes them, every record is there once,
// and found by its event id.
func TestDeliveryLogKeepsBatchesThatWereNotStored(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	require.NoError(t, srv.JS.DeleteStream(ctx, stream.LogStream))
	var out lockedBuffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := deliverylog.NewWriter(srv.JS.Conn(), logger, nil, time.Now)
	require.NoError(t, err)
	go w.Run()
	t.Cleanup(func() { w.Close(10 * time.Second) })

	ids := []string{"evt_a", "evt_b", "evt_c"}
	for i, id := range ids {
		w.Add(deliverylog.AttemptRecord{EventID: id, Dest: "d" + strconv.Itoa(i%2), Attempt: 1, Outcome: "delivered", At: time.Now().UTC(), Class: "2xx", Status: 204})
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "trying again") {
		require.False(t, time.Now().After(deadline), "the writer never tried again: %s", out.String())
		time.Sleep(10 * time.Millisecond)
	}
	require.NotContains(t, out.String(), "records lost")

	require.NoError(t, stream.Ensure(ctx, srv.JS, stream.Config{}))
	for _, id := range ids {
		for {
			page, err := deliverylog.ReadAttempts(ctx, srv.JS, deliverylog.AttemptQuery{EventID: id})
			if err == nil && len(page.Attempts) > 0 {
				require.Len(t, page.Attempts, 1, "%s recorded once", id)
				require.Equal(t, 204, page.Attempts[0].Status)
				break
			}
			require.False(t, time.Now().After(deadline), "%s not in the log: %v", id, err)
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.NotContains(t, out.String(), "records lost")
}

// TestAttemptPagesGoPastAFullWindow: a page that fills up exactly with a
// window of the log (one record per message here) still points to the
// older records.
func TestAttemptPagesGoPastAFullWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := streamtest.Start(t)
	_, err := New(ctx, Config{JS: srv.JS})
	require.NoError(t, err)
	const n = 150
	for i := range n {
		rec, err := json.Marshal(deliverylog.AttemptRecord{EventID: fmt.Sprintf("evt_%d", i), Dest: "d", Attempt: 1, Outcome: "delivered", Status: 200, Class: stream.Class2xx, At: time.Now()})
		require.NoError(t, err)
		_, err = srv.JS.Publish(ctx, stream.LogSubject("d", stream.Class2xx), append(rec, '\n'))
		require.NoError(t, err)
	}
	for _, limit := range []int{64, 50, 1, 150} {
		var ids []string
		q := deliverylog.AttemptQuery{Limit: limit}
		for pages := 0; ; pages++ {
			require.Less(t, pages, n+2, "limit %d: the pages do not end", limit)
			page, err := deliverylog.ReadAttempts(ctx, srv.JS, q)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Attempts), limit)
			for _, a := range page.Attempts {
				ids = append(ids, a.EventID)
			}
			if page.Next == 0 {
				break
			}
			q.Before = page.Next
		}
		require.Len(t, ids, n, "limit %d: every record, once", limit)
		require.Equal(t, "evt_149", ids[0], "limit %d: newest first", limit)
		require.Equal(t, "evt_0", ids[n-1], "limit %d", limit)
	}
}

// TestEventStateIsItsLatestAttempts: an event's state at a destination is
// the outcome of the attempt that began last, wherever its record was
// stored (a batch whose write was retried is stored after later ones);
// an attempt left past AckWait decides nothing.
func TestEventStateIsItsLatestAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := streamtest.Start(t)
	_, err := New(ctx, Config{JS: srv.JS})
	require.NoError(t, err)
	t0 := time.Now().UTC()
	store := func(recs ...deliverylog.AttemptRecord) {
		for _, r := range recs {
			b, err := json.Marshal(r)
			require.NoError(t, err)
			ack, err := srv.JS.Publish(ctx, stream.LogSubject(r.Dest, r.Class), append(b, '\n'))
			require.NoError(t, err)
			idx, err := json.Marshal(map[string]any{"id": r.EventID, "seq": ack.Sequence})
			require.NoError(t, err)
			_, err = srv.JS.Publish(ctx, stream.LogIndexSubject(stream.EventBucket(r.EventID)), idx)
			require.NoError(t, err)
		}
	}
	rec := func(dest string, attempt int, outcome string, status int, after time.Duration) deliverylog.AttemptRecord {
		return deliverylog.AttemptRecord{EventID: "evt_1", Dest: dest, Attempt: attempt, Outcome: outcome, Status: status,
			Class: stream.LogClass(true, status), At: t0.Add(after), EventSeq: 1}
	}
	store(
		rec("a", 2, "delivered", 200, 2*time.Second),
		rec("a", 1, "retry", 503, 0), // stored late
		rec("a", 3, "left", 200, 5*time.Second),
		rec("b", 1, "left", 0, 0),
	)
	v, err := deliverylog.LookupEvent(ctx, srv.JS, "evt_1")
	require.NoError(t, err)
	states := map[string]string{}
	for _, d := range v.Destinations {
		states[d.Dest] = d.State
	}
	require.Equal(t, map[string]string{"a": deliverylog.StateDelivered, "b": deliverylog.StateRetrying}, states)
}

// TestDeadLetterNotWrittenIsRecordedAsARetry: an event whose dead letter
// NATS did not take this time comes back to be dead-lettered again, and
// its record says so (retry), not dead; one whose dead letter can never be
// written is recorded dead with reason dead_letter_failed.
func TestDeadLetterNotWrittenIsRecordedAsARetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := streamtest.Start(t)
	r, err := New(ctx, Config{JS: srv.JS})
	require.NoError(t, err)
	go r.logw.Run()
	defer r.logw.Close(5 * time.Second)
	d := destination.Destination{Name: "d", URL: "https://example.com"}
	dead := Decision{Action: DeadLetter, Reason: ReasonMaxAttempts}
	r.recordOutcome(&event{id: "evt_again", dest: "d", hdr: nats.Header{}, origin: 1}, d,
		&Outcome{Attempt: 3, Decision: dead, Result: Result{Status: 503}, Err: errors.New("nats: timeout")}, true)
	// What Decide decides again once the dead letter failed for good.
	failed := Decision{Action: DeadLetter, Reason: ReasonDeadLetterFailed, Effect: Failing}
	r.recordOutcome(&event{id: "evt_never", dest: "d", hdr: nats.Header{}, origin: 2}, d,
		&Outcome{Attempt: 3, Decision: failed, Result: Result{Status: 503}, Err: fmt.Errorf("too large: %w", dlq.ErrPermanent)}, true)
	var page deliverylog.AttemptPage
	deadline := time.Now().Add(30 * time.Second)
	for len(page.Attempts) < 2 {
		require.False(t, time.Now().After(deadline), "the records were not written")
		time.Sleep(20 * time.Millisecond)
		page, err = deliverylog.ReadAttempts(ctx, srv.JS, deliverylog.AttemptQuery{Dest: "d"})
		require.NoError(t, err)
	}
	got := map[string]deliverylog.AttemptRecord{}
	for _, a := range page.Attempts {
		got[a.EventID] = a
	}
	require.Equal(t, "retry", got["evt_again"].Outcome)
	require.Equal(t, int64(5000), got["evt_again"].RetryInMS)
	require.Empty(t, got["evt_again"].Reason)
	require.Equal(t, "dead_letter", got["evt_never"].Outcome)
	require.Equal(t, ReasonDeadLetterFailed, got["evt_never"].Reason)
}
