package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
)

// TestPublishTargets: (p)'s targets take the median of the rounds' ratios
// to the minimal handler's rate, 80% for single events and for batches;
// the ratio to direct publishing is a note.
func TestPublishTargets(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}}
	round := func(k int, direct, floor, single, floorBatch, batch float64) {
		r.Results = append(r.Results,
			&result{Scenario: "p", System: pDirect, Round: k, Events: 50000, PerSecond: direct, Seconds: 1},
			&result{Scenario: "p", System: pFloor, Round: k, Events: 50000, PerSecond: floor, Seconds: 1},
			&result{Scenario: "p", System: pSingle, Round: k, Events: 50000, PerSecond: single, VsDirect: single / direct, VsFloor: single / floor, Seconds: 1},
			&result{Scenario: "p", System: pFloorBatch, Round: k, Events: 50000, PerSecond: floorBatch, Seconds: 1},
			&result{Scenario: "p", System: pBatch, Round: k, Events: 50000, PerSecond: batch, VsDirect: batch / direct, VsFloor: batch / floorBatch, Seconds: 1})
	}
	round(1, 40000, 20000, 17000, 30000, 27000) // 85%, 90%
	round(2, 40000, 20000, 4000, 30000, 10000)  // 20%, 33%: a disturbed round
	round(3, 40000, 20000, 16000, 30000, 23700) // 80%, 79%
	r.evaluate()
	single, batch := targetNamed(r, "publish over HTTP"), targetNamed(r, "publish batches over HTTP")
	require.Equal(t, "PASS", single.Status, single.Got)
	require.Equal(t, "median of 3 rounds 80% (85%, 20%, 80%); medians 16000/s vs 20000/s", single.Got)
	require.Equal(t, "MISS", batch.Status, "the median ratio is 79%%: %s", batch.Got)
	require.True(t, strings.HasPrefix(batch.Got, "median of 3 rounds 79% (90%, 33%, 79%)"), batch.Got)
	require.Equal(t, "of direct JetStream publishing: 40% (median), information only", single.Note)

	r = &report{Machine: machine{CPUs: 2}}
	r.evaluate()
	require.Equal(t, "n/a", targetNamed(r, "publish over HTTP").Status, "(p) not run")
	require.Equal(t, "n/a", targetNamed(r, "publish batches over HTTP").Status)
}

// The floor's handler answers what the bench checks relay's answers for:
// 202 with the event's id and sequence, a batch's stored count and a
// result per event; a body that is not JSON is a 400.
func TestAPIFloorAnswersAsRelaysAPI(t *testing.T) {
	s, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, stream.Ensure(context.Background(), js, stream.Config{}))
	srv := httptest.NewServer((&apiFloor{js: js}).handler())
	t.Cleanup(srv.Close)
	hc := srv.Client()

	require.NoError(t, postEvents(context.Background(), hc, srv.URL+"/v1/events", "k", appendEvent(nil, "floor", "evt-1", 1), 1, nil))
	require.NoError(t, postEvents(context.Background(), hc, srv.URL+"/v1/events:batch", "k", batchBody("floor", "b-", 0, 10, 1), 10, checkBatchAnswer))
	err = postEvents(context.Background(), hc, srv.URL+"/v1/events", "k", []byte("{"), 1, nil)
	require.ErrorContains(t, err, "status 400")
	st, err := js.Stream(context.Background(), stream.EventsStream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(11), info.State.Msgs, "each event stored once")
}

// TestBatchBody: the batch body is {"events":[...]} with the events asked
// for, each with its destination, its id and the bench's 1 KiB body as
// data; a single event's body is one such event.
func TestBatchBody(t *testing.T) {
	type event struct {
		Dest string          `json:"dest"`
		ID   string          `json:"id"`
		Data json.RawMessage `json:"data"`
	}
	var body struct {
		Events []event `json:"events"`
	}
	dec := json.NewDecoder(strings.NewReader(string(batchBody("p1-batch", "p1-batch-", 200, 300, 42))))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body))
	require.Len(t, body.Events, 100)
	for i, ev := range body.Events {
		id := "p1-batch-" + strconv.Itoa(200+i)
		require.Equal(t, event{Dest: "p1-batch", ID: id, Data: ev.Data}, ev)
		require.Equal(t, string(makeBody(42, id)), string(ev.Data))
		require.Len(t, ev.Data, bodySize)
	}

	var one event
	require.NoError(t, json.Unmarshal(appendEvent(nil, "p1-single", "p1-single-7", 42), &one))
	require.Equal(t, event{Dest: "p1-single", ID: "p1-single-7", Data: json.RawMessage(makeBody(42, "p1-single-7"))}, one)
}

func TestCheckBatchAnswer(t *testing.T) {
	require.NoError(t, checkBatchAnswer([]byte(`{"stored":2,"failed":0,"results":[{"id":"a","seq":1,"duplicate":false},{"id":"b","seq":2,"duplicate":false}]}`), 2))
	require.ErrorContains(t, checkBatchAnswer([]byte(`{"stored":1,"failed":1,"results":[{"id":"a","seq":1,"duplicate":false},{"id":"b","error":{"status":503,"detail":"x"}}]}`), 2), "2 events sent")
	require.ErrorContains(t, checkBatchAnswer([]byte(`{"stored":2,"failed":0,"results":[{"id":"a","seq":1,"duplicate":false},{"id":"b","seq":1,"duplicate":true}]}`), 2), "event 1 of the batch was a duplicate")
	require.ErrorContains(t, checkBatchAnswer([]byte(`{"id":"a"}`), 1), "1 events sent")
	require.ErrorContains(t, checkBatchAnswer([]byte(`oops`), 1), "not a batch's")
}

// TestPostAllSplitsAndFailsLoudly: postAll sends every event once, in
// requests of per events, with the key; an answer other than 202 stops it
// with the status and the body.
func TestPostAllSplitsAndFailsLoudly(t *testing.T) {
	var events, requests atomic.Int64
	var failAt atomic.Int64
	failAt.Store(-1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		var body struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if k := requests.Add(1); k == failAt.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"detail":"NATS is away"}`))
			return
		}
		events.Add(int64(len(body.Events)))
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	body := func(from, to int) []byte { return batchBody("d", "d-", from, to, time.Now().UnixNano()) }
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()

	lat, conns, err := postAll(t.Context(), hc, srv.URL, "k", 4, 1005, 100, body, nil)
	require.NoError(t, err)
	require.Len(t, lat, 11, "10 requests of 100 and one of 5")
	require.Equal(t, int64(1005), events.Load())
	require.Positive(t, conns)

	hc2 := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc2.CloseIdleConnections()
	lat, conns, err = postAll(t.Context(), hc2, srv.URL, "k", 4, 1000, 5, body, nil)
	require.NoError(t, err)
	require.Len(t, lat, 200)
	require.Equal(t, int64(2005), events.Load())
	require.LessOrEqual(t, conns, int64(8), "keep-alive: about a connection per client (the transport may dial one more while a connection frees up)")

	requests.Store(0)
	failAt.Store(3)
	_, _, err = postAll(t.Context(), hc, srv.URL, "k", 4, 1005, 100, body, nil)
	require.ErrorContains(t, err, `status 503, not 202: {"detail":"NATS is away"}`)

	_, _, err = postAll(t.Context(), hc, srv.URL, "wrong", 2, 10, 1, body, nil)
	require.ErrorContains(t, err, "status 401")
}

func TestLatencyMs(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(201-i)*time.Millisecond)
	}
	p50, p99, maxMs := latencyMs(d)
	require.Equal(t, []float64{100, 198, 200}, []float64{p50, p99, maxMs})
	require.Equal(t, 200*time.Millisecond, d[0], "the input is left as it was")
}
