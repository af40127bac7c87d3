// Package deliverylog is relay's delivery log: a record of every attempt
// and of every event settled without one (stream.LogStream), written off
// the delivery path in batches (Writer), read by destination, status and
// time (ReadAttempts), by event (LookupEvent), and replayed (ReplayLog).
package deliverylog

import (
	"cmp"
	"crypto/rand"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/quiet"
	"github.com/relaydev/relay/stream"
)

// AttemptRecord is one record of the delivery log (stream.LogStream): an
// attempt to deliver an event to a destination, whatever came of it, or an
// event settled without one (filtered out, dead-lettered at once). A typed
// event's routing is a record too (Outcome "routed", Dest empty, Dests
// its subscribers).
type AttemptRecord struct {
	// Seq is the record's sequence in the log: the cursor of a listing.
	// Set when read.
	Seq uint64 `json:"seq,omitempty"`
	// EventID, Type and Key are the event's.
	EventID string `json:"event_id"`
	Type    string `json:"type,omitempty"`
	Key     string `json:"key,omitempty"`
	Dest    string `json:"dest,omitempty"`
	// Attempt is the attempt's number, 0 when none was made.
	Attempt int `json:"attempt"`
	// Outcome is what relay did after it: delivered, retry, dead_letter,
	// filtered (the destination's filter turned the event down) or routed.
	Outcome string `json:"outcome"`
	// Reason is a dead letter's reason; RetryInMS a retry's wait, Parked
	// whether it waits in Redis.
	Reason    string `json:"reason,omitempty"`
	RetryInMS int64  `json:"retry_in_ms,omitempty"`
	Parked    bool   `json:"parked,omitempty"`
	// At is when the attempt started (or the outcome, without one).
	At time.Time `json:"at"`
	// DurationMS is how long the attempt took, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// URL is the URL attempted, its credentials and query values redacted.
	URL string `json:"url,omitempty"`
	// Class is the status class (stream.LogClass): 2xx... 5xx, error (no
	// response), none (no attempt).
	Class  string `json:"class"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// ResponseHeaders are the response's headers of LoggedResponseHeaders;
	// ResponseBody the start of its body (invalid UTF-8 replaced).
	ResponseHeaders map[string]string `json:"response_headers,omitempty"`
	ResponseBody    string            `json:"response_body,omitempty"`
	// EventSeq is where the event is stored in the events stream: the
	// message it first came in as.
	EventSeq uint64 `json:"event_seq,omitempty"`
	// Dests are a routing record's subscribers (at most maxRoutedDests;
	// DestsMore counts the others).
	Dests     []string `json:"dests,omitempty"`
	DestsMore int      `json:"dests_more,omitempty"`
}

// The outcomes of an AttemptRecord (relay's Action.String gives the first
// six).
const (
	OutcomeDelivered  = "delivered"
	OutcomeRetry      = "retry"
	OutcomeDeadLetter = "dead_letter"
	OutcomeHandedBack = "handed_back"
	OutcomeLeft       = "left"
	OutcomeFiltered   = "filtered"
	OutcomeRouted     = "routed"
)

// noLosses counts nothing (a writer given no Losses).
type noLosses struct{}

func (noLosses) LogLost(int, bool) {}
func (noLosses) LogIndexLost()     {}

// Losses counts the records a log writer lost (relay's metrics do).
type Losses interface {
	// LogLost counts n records not written: dropped (the queue was full)
	// or failed (JetStream did not store them).
	LogLost(n int, dropped bool)
	// LogIndexLost counts an index batch not stored.
	LogIndexLost()
}

// MaxRoutedDests bounds the subscribers a routing record names.
const MaxRoutedDests = 1000

// logQueue is how many records a writer holds before it drops new ones:
// deliveries never wait for the log.
const logQueue = 16384

// logFlush is how often the writer publishes the batches it gathered (a
// record reaches the log within about that, and its index entry one flush
// after its batch is stored); logBatchBytes caps a batch.
const (
	logFlush      = 100 * time.Millisecond
	logBatchBytes = 256 << 10
)

// Writer writes the delivery log, off the delivery path: records queue,
// and one goroutine encodes them into batches, a batch per destination and
// status class (stream.LogSubject), which it publishes every logFlush or
// when full, each acknowledged by JetStream asynchronously. Once a batch is
// stored, its records' event ids go to the index (stream.LogIndexSubject)
// with the batch's sequence. A message costs the NATS server about as much
// as a small record's whole delivery (measured): batching is what keeps the
// log's cost to a few per cent of throughput.
type Writer struct {
	// Indexed, when set before Run, is called with the event ids of each
	// index batch stored: from then on LookupEvent finds their records.
	// For tests, which wait for it rather than poll.
	Indexed func(ids []string)

	js      jetstream.JetStream
	log     *slog.Logger
	metrics Losses
	q       chan AttemptRecord
	done    chan struct{}
	// redacted caches RedactURL per URL (few distinct URLs, one per
	// attempt).
	redacted map[string]string
	// warn keeps "cannot write the delivery log" to a line a minute.
	warn quiet.Limiter
	now  func() time.Time

	// Owned by run.
	batches map[string]*logBatch // by subject, gathering
	next    uint64               // the order of the next batch
	stored  []pendingBatch       // published, the acknowledgement awaited
	index   map[string]*logBatch // index entries by subject, gathering
	indexed []pendingBatch       // index batches published
	// retrying are batches not stored, to publish again at the next
	// flush, and retryBytes their size.
	retrying   []*logBatch
	retryBytes int
	// batchID and batches give each batch of records its Nats-Msg-Id;
	// finishing: retry no more.
	batchID   string
	batchSeq  uint64
	finishing bool
}

// logBatch is a message being gathered: lines of JSON, and for a batch of
// records, each record's event id.
type logBatch struct {
	subject string
	buf     []byte
	ids     []string
	// order is when its first record came, among the batches gathered:
	// batches are published in that order, so that the log's order is the
	// records' to within a flush.
	order uint64
	// msgID is its Nats-Msg-Id and first when it was first published.
	msgID string
	first time.Time
}

// pendingBatch is a published batch whose acknowledgement is awaited.
type pendingBatch struct {
	f   jetstream.PubAckFuture
	b   *logBatch // a batch of records (nil for an index batch)
	n   int       // its lines
	ids []string  // an index batch's event ids
}

// logRetryFor is how long a batch of records the log could not store (the
// server unreachable, a node of the cluster restarting) is published again,
// at each flush, before its records are counted lost; logRetryBytes bounds
// the batches kept for that. Each batch has its own Nats-Msg-Id, so one
// stored whose acknowledgement was lost is stored once.
const (
	logRetryFor   = time.Minute
	logRetryBytes = 16 << 20
)

// NewWriter returns a writer of the delivery log on nc; Relay.Run runs
// it.
func NewWriter(nc *nats.Conn, log *slog.Logger, m Losses, now func() time.Time) (*Writer, error) {
	if m == nil {
		m = noLosses{}
	}
	w := &Writer{log: log, metrics: m, q: make(chan AttemptRecord, logQueue), done: make(chan struct{}), redacted: map[string]string{}, now: now,
		batches: map[string]*logBatch{}, index: map[string]*logBatch{}, batchID: "log-" + rand.Text() + "-"}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	w.js = js
	return w, nil
}

// Add queues rec; it never waits.
func (w *Writer) Add(rec AttemptRecord) {
	select {
	case w.q <- rec:
	default:
		w.lost(1, true, nil)
	}
}

// lost counts n records lost: dropped before they were written, or not
// stored.
func (w *Writer) lost(n int, dropped bool, err error) {
	w.metrics.LogLost(n, dropped)
	if ok, held := w.warn.Allow("", w.now()); ok {
		if dropped {
			w.log.Warn("delivery log falling behind: records dropped (relay_attempt_log_dropped_total counts them)", "also_since_last_warning", held)
		} else {
			w.log.Warn("cannot write the delivery log: records lost (relay_attempt_log_write_failures_total counts them)", "err", err, "also_since_last_warning", held)
		}
	}
}

func (w *Writer) Run() {
	defer close(w.done)
	tick := time.NewTicker(logFlush)
	defer tick.Stop()
	for {
		select {
		case rec, ok := <-w.q:
			if !ok {
				w.finish()
				return
			}
			w.gather(&rec)
		case <-tick.C:
			w.flush()
		}
	}
}

// gather adds rec to its batch, and publishes the batch when full.
func (w *Writer) gather(rec *AttemptRecord) {
	if rec.URL != "" {
		u, ok := w.redacted[rec.URL]
		if !ok {
			if len(w.redacted) > 10000 {
				clear(w.redacted)
			}
			u = destination.RedactURL(rec.URL)
			w.redacted[rec.URL] = u
		}
		rec.URL = u
	}
	dest := rec.Dest
	if rec.Outcome == OutcomeRouted {
		dest = stream.LogRoute
	}
	subject := stream.LogSubject(dest, rec.Class)
	b := w.batches[subject]
	if b == nil {
		w.next++
		b = &logBatch{subject: subject, order: w.next}
		w.batches[subject] = b
	}
	b.buf = rec.appendJSON(b.buf)
	b.buf = append(b.buf, '\n')
	b.ids = append(b.ids, rec.EventID)
	if len(b.ids) >= stream.LogBatchMax || len(b.buf) >= logBatchBytes {
		w.publish(b)
		delete(w.batches, subject)
	}
}

// publish publishes batch b of records, its acknowledgement awaited.
func (w *Writer) publish(b *logBatch) {
	if b.msgID == "" {
		w.batchSeq++
		b.msgID = w.batchID + strconv.FormatUint(w.batchSeq, 36)
		b.first = w.now()
	}
	f, err := w.js.PublishMsgAsync(&nats.Msg{Subject: b.subject, Data: b.buf, Header: nats.Header{jetstream.MsgIDHeader: []string{b.msgID}}})
	if err != nil {
		w.retry(b, err)
		return
	}
	w.stored = append(w.stored, pendingBatch{f: f, b: b, n: len(b.ids)})
}

// retry keeps b, which was not stored because of err, to be published
// again at the next flush, for logRetryFor from its first try and while
// the batches kept stay within logRetryBytes; past that (or while the
// writer finishes) its records are lost.
func (w *Writer) retry(b *logBatch, err error) {
	if w.finishing || w.now().Sub(b.first) >= logRetryFor || w.retryBytes+len(b.buf) > logRetryBytes {
		w.lost(len(b.ids), false, err)
		return
	}
	if len(w.retrying) == 0 {
		w.log.Debug("delivery log: a batch was not stored; trying again", "err", err)
	}
	w.retrying = append(w.retrying, b)
	w.retryBytes += len(b.buf)
}

// publishRetrying publishes again the batches not stored.
func (w *Writer) publishRetrying() {
	bs := w.retrying
	w.retrying, w.retryBytes = nil, 0
	for _, b := range bs {
		w.publish(b)
	}
}

// flush publishes what was gathered, and indexes the batches stored since
// the last flush.
func (w *Writer) flush() {
	w.publishRetrying()
	w.publishGathered()
	w.collect(time.Time{})
	for subject, b := range w.index {
		f, err := w.js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: b.buf})
		if err != nil {
			w.metrics.LogIndexLost()
		} else {
			w.indexed = append(w.indexed, pendingBatch{f: f, n: len(b.ids), ids: b.ids})
		}
		delete(w.index, subject)
	}
	w.collectIndexed(time.Time{})
}

// publishGathered publishes the batches gathered, in the order their first
// records came.
func (w *Writer) publishGathered() {
	bs := slices.SortedFunc(maps.Values(w.batches), func(a, b *logBatch) int { return cmp.Compare(a.order, b.order) })
	for _, b := range bs {
		w.publish(b)
	}
	clear(w.batches)
}

// collect takes the acknowledgements that came (until deadline, when it
// is set, all of them): a stored batch's ids go to the index; a batch not
// stored is counted lost.
func (w *Writer) collect(deadline time.Time) {
	keep := w.stored[:0]
	for _, p := range w.stored {
		ack, err, ok := awaitAck(p.f, deadline)
		switch {
		case !ok:
			keep = append(keep, p)
		case err != nil:
			w.retry(p.b, err)
		default:
			// A batch stored before, whose acknowledgement was lost, is
			// acknowledged again as a duplicate, with its sequence.
			w.indexBatch(ack.Sequence, p.b.ids)
		}
	}
	clear(w.stored[len(keep):])
	w.stored = keep
}

// awaitAck is f's outcome, if it came: at once when deadline is zero,
// else by deadline.
func awaitAck(f jetstream.PubAckFuture, deadline time.Time) (*jetstream.PubAck, error, bool) {
	if deadline.IsZero() {
		select {
		case ack := <-f.Ok():
			return ack, nil, true
		case err := <-f.Err():
			return nil, err, true
		default:
			return nil, nil, false
		}
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case ack := <-f.Ok():
		return ack, nil, true
	case err := <-f.Err():
		return nil, err, true
	case <-t.C:
		return nil, nil, false
	}
}

// indexBatch adds the ids of the batch stored at seq to the index, once
// each.
func (w *Writer) indexBatch(seq uint64, ids []string) {
	for i, id := range ids {
		if slices.Contains(ids[:i], id) {
			continue
		}
		subject := stream.LogIndexSubject(stream.EventBucket(id))
		b := w.index[subject]
		if b == nil {
			b = &logBatch{subject: subject}
			w.index[subject] = b
		}
		b.buf = append(b.buf, `{"id":`...)
		b.buf = appendString(b.buf, id)
		b.buf = append(b.buf, `,"seq":`...)
		b.buf = strconv.AppendUint(b.buf, seq, 10)
		b.buf = append(b.buf, "}\n"...)
		b.ids = append(b.ids, id)
	}
}

// collectIndexed counts the index batches not stored (until deadline,
// when it is set, all of them).
func (w *Writer) collectIndexed(deadline time.Time) {
	keep := w.indexed[:0]
	for _, p := range w.indexed {
		_, err, ok := awaitAck(p.f, deadline)
		switch {
		case !ok:
			keep = append(keep, p)
		case err != nil:
			w.metrics.LogIndexLost()
		case w.Indexed != nil:
			w.Indexed(p.ids)
		}
	}
	clear(w.indexed[len(keep):])
	w.indexed = keep
}

// finish writes everything within logFinish: the batches gathered, then,
// once they are stored, their index.
func (w *Writer) finish() {
	deadline := time.Now().Add(FinishTimeout)
	w.publishRetrying()
	w.finishing = true
	w.publishGathered()
	w.collect(deadline)
	w.flush()
	w.collectIndexed(deadline)
}

// FinishTimeout bounds finish; close waits a little longer.
const FinishTimeout = 4 * time.Second

// Close writes what is queued and waits up to timeout for JetStream to
// confirm it.
func (w *Writer) Close(timeout time.Duration) {
	close(w.q)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
	}
}

// LoggedResponseHeaders are the response headers the delivery log keeps:
// those that tell what the destination made of a request.
var LoggedResponseHeaders = []string{"Content-Type", "Content-Length", "Location", "Retry-After", "Request-Id", "X-Request-Id", "X-Correlation-Id"}
