package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// retryPublisher publishes at a rate, as publisher.atRate does, and
// publishes again, with the same id and body, every event whose PubAck did
// not come: a timeout, a disconnect, no responders while the stream elects
// a leader. JetStream drops a second copy of a stored event as a duplicate
// (Nats-Msg-Id), so every event is stored once, and the count it returns
// is the events acknowledged: what must be delivered.
type retryPublisher struct {
	js jetstream.JetStream

	mu      sync.Mutex
	again   []*nats.Msg     // failed, to publish again
	acked   map[string]bool // event ids with a PubAck
	retried int64           // publishes repeated
	dups    int64           // PubAcks that said duplicate
	lastErr error
}

// retryEvery is how often failed publishes are sent again.
const retryEvery = 100 * time.Millisecond

func newRetryPublisher(nc *nats.Conn, ackTimeout time.Duration) (*retryPublisher, error) {
	rp := &retryPublisher{acked: map[string]bool{}}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(ackTimeout),
		// Called with the client's lock held (timeouts): no publish here.
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { rp.failed(m, err) }),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, a *jetstream.PubAck) { rp.ok(m, a) }))
	if err != nil {
		return nil, err
	}
	rp.js = js
	return rp, nil
}

func (rp *retryPublisher) failed(m *nats.Msg, err error) {
	rp.mu.Lock()
	rp.again = append(rp.again, m)
	rp.lastErr = err
	rp.mu.Unlock()
}

func (rp *retryPublisher) ok(m *nats.Msg, a *jetstream.PubAck) {
	rp.mu.Lock()
	rp.acked[stream.FromHeader(m.Header).ID] = true
	if a != nil && a.Duplicate {
		rp.dups++
	}
	rp.mu.Unlock()
}

func (rp *retryPublisher) send(m *nats.Msg) {
	if _, err := rp.js.PublishMsgAsync(m); err != nil {
		rp.failed(m, err) // not registered: no callback will come
	}
}

// resend publishes again what failed so far.
func (rp *retryPublisher) resend() {
	rp.mu.Lock()
	batch := rp.again
	rp.again = nil
	rp.retried += int64(len(batch))
	rp.mu.Unlock()
	for _, m := range batch {
		rp.send(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
}

// ackedCount is how many distinct events have a PubAck.
func (rp *retryPublisher) ackedCount() int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.acked)
}

// figures are the publishes repeated and the duplicates JetStream dropped.
func (rp *retryPublisher) figures() (retried, dups int64) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.retried, rp.dups
}

// atRate publishes to dest at rate events/s for dur, paced by a ticker,
// with ids prefix<i> and the body's ts the time of the first attempt; then
// it publishes again what failed until every event has its PubAck, or
// fails after ackLimit. It returns the events published.
func (rp *retryPublisher) atRate(ctx context.Context, dest, prefix string, rate float64, dur, tick, ackLimit time.Duration) (int, error) {
	subject := stream.InSubject(dest, "")
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	lastRetry := start
	sent := 0
	for {
		el := time.Since(start)
		if el >= dur {
			break
		}
		for due := int(rate * el.Seconds()); sent < due; sent++ {
			id := prefix + strconv.Itoa(sent)
			rp.send(stream.Envelope{ID: id, Body: makeBody(time.Now().UnixNano(), id)}.Msg(stream.Produced, subject, nil))
		}
		if time.Since(lastRetry) >= retryEvery {
			rp.resend()
			lastRetry = time.Now()
		}
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-t.C:
		}
	}
	deadline := time.Now().Add(ackLimit)
	for rp.ackedCount() < sent {
		if time.Now().After(deadline) {
			rp.mu.Lock()
			defer rp.mu.Unlock()
			return sent, fmt.Errorf("%d of %d publishes still without a PubAck %s after publishing ended (the last error: %v)", sent-len(rp.acked), sent, ackLimit, rp.lastErr)
		}
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-time.After(retryEvery):
		}
		rp.resend()
	}
	return sent, nil
}
