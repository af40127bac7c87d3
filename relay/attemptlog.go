package relay

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/history"
	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/stream"
)

func attemptOf(n int, at time.Time, res Result) dlq.Attempt {
	a := dlq.Attempt{N: n, At: at.Add(-res.Duration).UTC(), Duration: res.Duration, Status: res.Status}
	switch {
	case res.Err != nil:
		a.Error = res.Err.Error()
	case res.Snippet != "":
		a.Error = res.Snippet
	}
	if res.Pooled {
		i := res.URL
		a.URL = &i
	}
	return a
}

func historyKey(ev event) string { return history.Key(ev.dest, ev.id) }

// attemptLog returns what is recorded for ev (nothing if that fails).
func (r *Relay) attemptLog(ctx context.Context, ev event) history.Log {
	l, _ := r.readLog(ctx, ev)
	return l
}

// readLog returns what is recorded for ev, and whether a record was found.
func (r *Relay) readLog(ctx context.Context, ev event) (history.Log, bool) {
	l, _, err := history.Get(ctx, r.attempts, historyKey(ev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.log.Warn("cannot read attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
	return l, err == nil
}

func (r *Relay) history(ctx context.Context, ev event) []dlq.Attempt {
	return r.attemptLog(ctx, ev).Attempts
}

// recordAttempt adds a failed attempt to ev's history, with reply, the ack
// subject of its delivery, and returns an operator's reason to skip ev if
// one was set. A failure to record is logged: the history is then
// incomplete, the event is not affected. It is a compare-and-set, so that a
// mark set meanwhile (Store.SkipHead) is kept.
func (r *Relay) recordAttempt(ctx context.Context, ev event, attempt int, res Result, reply string) string {
	skip, _ := r.recordFailure(ctx, ev, attempt, res, reply, false)
	return skip
}

// recordFailure is recordAttempt, and with parking it records as well that
// relay is about to park ev (attemptLog.Parking), in the same write. It
// reports whether the write succeeded: an event must not be parked unless
// it did, since after a crash nothing else would tell its message from
// its copy in Redis.
func (r *Relay) recordFailure(ctx context.Context, ev event, attempt int, res Result, reply string, parking bool) (string, bool) {
	l, err := history.Change(ctx, r.attempts, historyKey(ev), true, 5, func(l *history.Log, found bool) error {
		if found && l.Origin != 0 && l.Origin != ev.origin {
			r.log.Warn("two messages with one event id are in retry at once: their attempts share one record (publish each event id once)",
				"dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "other_seq", l.Origin)
		}
		if found && l.Origin == ev.origin && ev.seq > l.Parking {
			// A later message of the event is its copy from Redis: the
			// park begun before it was done.
			l.Parked = max(l.Parked, l.Parking)
		}
		l.Attempts = dlq.TrimHistory(append(l.Attempts, attemptOf(attempt, r.cfg.Now(), res)))
		l.Made = max(l.Made, attempt)
		l.Event, l.Reply, l.Origin = ev.id, reply, ev.origin
		if parking {
			l.Parking = max(l.Parking, ev.seq)
		}
		return nil
	})
	if err != nil {
		r.log.Warn("cannot record attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
		return "", false
	}
	return l.SkipAt(ev.seq, ev.origin), true
}

// forgetHistory deletes ev's attempt log once ev is settled. Where the log
// says the event was parked, a done mark keeps that first (markDone): the
// messages it was parked from, and this one, may still come back after a
// crash.
func (r *Relay) forgetHistory(ctx context.Context, ev event) {
	r.markDone(ctx, ev)
	r.deleteLog(ctx, ev)
}

// markDone records, where ev was parked, that ev's messages up to this one
// are settled (doneKey): a done mark, which outlives the attempt log.
func (r *Relay) markDone(ctx context.Context, ev event) {
	if ev.parked == 0 {
		return
	}
	b, _ := json.Marshal(doneMark{Parked: max(ev.parked, ev.seq), Origin: ev.origin})
	if _, err := r.attempts.Put(ctx, doneKey(ev), b); err != nil {
		r.log.Warn("cannot record that a parked event is settled (a crash of the NATS server could deliver it again)", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
}

// deleteLog deletes ev's attempt log.
func (r *Relay) deleteLog(ctx context.Context, ev event) {
	if err := r.attempts.Delete(ctx, historyKey(ev)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.log.Warn("cannot delete attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
}

// What a crash of the NATS server's process cannot take back.
//
// A file-store consumer keeps its acks in memory and writes them to its file
// at most every 100ms; a stream write (a KV put included) reaches the file at
// once. When the process hosting the server dies (kill -9 of 'relay run'
// with its embedded server, the OOM killer), the acks of the last moments
// are lost, confirmed ones included, and JetStream hands those events out
// again, often as first deliveries. Two promises must not rest on those
// acks, so relay also records them with stream writes:
//
//   - the head of an ordered key: the last event settled (delivered or
//     dead-lettered) per partition is put in the relay_ordered bucket
//     before its ack, and an event at or below it is acknowledged without
//     an attempt (partitionMark);
//   - a parked event: its attempt log records that relay began to park it
//     (attemptLog.Parking, with the failed attempt, before the Redis
//     write), then the sequence parked (attemptLog.Parked) before the ack,
//     and a message of that event at or below it is acknowledged without
//     an attempt, its copy in Redis carrying on. A message that comes back
//     with the park begun and not recorded is first looked for in Redis
//     (Relay.findPark). When a copy is settled, a done mark written before
//     its ack keeps the sequences settled (doneKey), since the original,
//     or the copy, may come back after that.
//
// A first delivery needs no attempt log read, except for the events that
// were in retry when this relay started (inRetryAtStart): those are the
// ones a lost ack can bring back as first deliveries.

// partitionMark is the last event settled in one partition of an ordered
// destination, as stored in the relay_ordered bucket. One consume loop
// (one event at a time) owns it.
type partitionMark struct {
	kv   jetstream.KeyValue
	nc   *nats.Conn
	dest string
	key  string
	// seq is the highest sequence known settled; loaded says seq was read
	// from the bucket since the connection last reconnected (a server
	// restart is a reconnect, and another replica may have settled events
	// meanwhile).
	seq        uint64
	loaded     bool
	reconnects uint64
	// rev is the bucket's revision of the mark as this loop last read or
	// wrote it (0: unknown, or absent).
	rev uint64
}

func newPartitionMark(kv jetstream.KeyValue, nc *nats.Conn, dest string, partition int) *partitionMark {
	return &partitionMark{kv: kv, nc: nc, dest: dest, key: dest + "." + strconv.Itoa(partition)}
}

// settled reports whether the event at seq was settled before: delivered or
// dead-lettered, its ack lost. reread reads the bucket even where the mark
// was read since the last reconnect. An error means the bucket cannot be
// read; the event must then wait.
func (m *partitionMark) settled(ctx context.Context, seq uint64, reread bool) (bool, error) {
	if seq <= m.seq {
		return true, nil
	}
	if rc := m.nc.Stats().Reconnects; reread || !m.loaded || rc != m.reconnects {
		e, err := m.kv.Get(ctx, m.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return false, fmt.Errorf("read the ordered partition's mark %s: %w", m.key, err)
		default:
			n, perr := m.parse(e)
			if perr != nil {
				return false, perr
			}
			m.seq, m.rev = max(m.seq, n), e.Revision()
		}
		m.loaded, m.reconnects = true, rc
	}
	return seq <= m.seq, nil
}

func (m *partitionMark) parse(e jetstream.KeyValueEntry) (uint64, error) {
	n, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ordered partition's mark %s is corrupt (%q): delete it with 'nats kv del %s %s' if its events were delivered", m.key, e.Value(), m.kv.Bucket(), m.key)
	}
	return n, nil
}

// settle records that the event at seq is settled. It runs before the
// event's ack: after a crash the ack may be lost, the mark is not. The mark
// only moves forward: it is written at the revision last seen, and when
// another replica wrote it since (one that was paused past AckWait and
// settles a head the partition has moved past), the higher of the two
// stays.
func (m *partitionMark) settle(ctx context.Context, seq uint64) error {
	v := strconv.AppendUint(nil, seq, 10)
	for range 8 {
		var rev uint64
		var err error
		if m.rev == 0 {
			rev, err = m.kv.Create(ctx, m.key, v)
		} else {
			rev, err = m.kv.Update(ctx, m.key, v, m.rev)
		}
		if err == nil {
			m.seq, m.rev = max(m.seq, seq), rev
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("record the ordered partition's mark %s: %w", m.key, err)
		}
		// Written since: read it again.
		e, err := m.kv.Get(ctx, m.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			m.rev = 0 // deleted or expired since
			continue
		case err != nil:
			return fmt.Errorf("read the ordered partition's mark %s: %w", m.key, err)
		}
		n, err := m.parse(e)
		if err != nil {
			return err
		}
		m.seq, m.rev = max(m.seq, n), e.Revision()
		if n >= seq {
			return nil // at or past it already
		}
	}
	return fmt.Errorf("record the ordered partition's mark %s: it kept changing under this replica", m.key)
}

// ackSettledHead acknowledges the head that an ordered partition's consumer
// waits for, when mark says it was settled: after a crash of the NATS
// server's process the consumer may wait for the ack of an event delivered
// before it, and would hand the event out again only after AckWait, holding
// up its keys until then. cons's info is as it was when the worker started.
func (r *Relay) ackSettledHead(cons jetstream.Consumer, mark *partitionMark) {
	info := cons.CachedInfo()
	if info == nil || info.NumAckPending == 0 {
		return
	}
	// One event in flight at most: the last one handed out.
	sseq, cseq := info.Delivered.Stream, info.Delivered.Consumer
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if settled, err := mark.settled(ctx, sseq, true); err != nil || !settled {
		return
	}
	if err := mark.nc.Publish(stream.AckSubject(stream.EventsStream, info.Name, sseq, cseq), []byte("+ACK")); err != nil {
		return
	}
	r.log.Info("acknowledged the head an ordered partition waited for: it was settled before its ack was lost (a crash of the NATS server's process)", "consumer", info.Name, "seq", sseq)
	r.cfg.Metrics.settledAgain(mark.dest)
	r.signals.SettledHeadAcked.Signal(sseq)
}

// listInRetry returns the keys of the attempt logs in kv: the events in
// retry. Done marks (doneKey) are not among them.
func listInRetry(ctx context.Context, kv jetstream.KeyValue) (map[string]struct{}, error) {
	l, err := kv.ListKeysFiltered(ctx, "*.*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = l.Stop() }()
	keys := map[string]struct{}{}
	for k := range l.Keys() {
		keys[k] = struct{}{}
	}
	return keys, nil
}

// inRetryAtStart reports whether ev's attempt log existed when this relay
// started: a first delivery of such an event may be one a crash brought
// back, so its log is read.
func (r *Relay) inRetryAtStart(ev event) bool {
	if len(r.retryAtStart) == 0 {
		return false
	}
	_, ok := r.retryAtStart[historyKey(ev)]
	return ok
}

// doneKey is where the parked sequence of an event in retry is kept once the
// event is settled: its log is deleted, but the message it was parked from
// may still come back. The key has three tokens, the logs two, so listing
// the events in retry ("*.*") skips these.
func doneKey(ev event) string { return "done." + historyKey(ev) }

// doneMark is what doneKey holds: the event's messages of origin Origin
// up to sequence Parked (those parked, and the one settled) are settled.
type doneMark struct {
	Parked uint64 `json:"parked"`
	Origin uint64 `json:"origin"`
}

// markParked records in ev's attempt log that the message at ev.seq was
// parked, before it is acked: a compare-and-set, so that an operator's mark
// set meanwhile is kept.
func (r *Relay) markParked(ctx context.Context, ev event) error {
	_, err := history.Change(ctx, r.attempts, historyKey(ev), false, 5, func(l *history.Log, _ bool) error {
		l.Parked, l.Origin = max(l.Parked, ev.seq), ev.origin
		return nil
	})
	return err
}

// unpark records, after a park that failed, that relay no longer parks
// the message at ev.seq: it waits in JetStream, and is attempted when it
// comes back, without a look in Redis. A failure is logged; the message is
// then looked for in Redis when it comes back.
func (r *Relay) unpark(ctx context.Context, ev event) {
	_, err := history.Change(ctx, r.attempts, historyKey(ev), false, 5, func(l *history.Log, _ bool) error {
		if l.Parking == ev.seq && l.Parked < ev.seq {
			l.Parking = l.Parked
		}
		return nil
	})
	if err != nil {
		r.log.Warn("cannot record that a park failed (when the event comes back, relay looks for it in Redis first)", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
}

// doneParked reports whether ev was parked and settled since: a message
// brought back by a crash after its done mark was written.
func (r *Relay) doneParked(ctx context.Context, ev event) bool {
	e, err := r.attempts.Get(ctx, doneKey(ev))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			r.log.Warn("cannot read the done mark of a parked event", "dest", ev.dest, "event_id", ev.id, "err", err)
		}
		return false
	}
	var m doneMark
	if json.Unmarshal(e.Value(), &m) != nil {
		return false
	}
	return history.Log{Parked: m.Parked, Origin: m.Origin}.ParkedAlready(ev.seq, ev.origin)
}

// ReasonDeadLetterFailed terminates an event whose dead letter cannot be
// stored for a reason retrying does not change (dlq.ErrPermanent). The
// event stays in the event log until its retention ends.
const ReasonDeadLetterFailed = "dead_letter_failed"

// DeadLetterFailures counts the events of one destination whose dead letter
// could not be stored for good, and describes the last one. It is kept in
// the state bucket, for 'relay stats'.
type DeadLetterFailures struct {
	Count       uint64    `json:"count"`
	LastAt      time.Time `json:"last_at"`
	LastEventID string    `json:"last_event_id"`
	LastSeq     uint64    `json:"last_seq"`
	LastError   string    `json:"last_error"`
}

// deadLetterFailuresKey is dest's key in the state bucket.
func deadLetterFailuresKey(dest string) string { return "dead-letter-failures." + dest }

// readDeadLetterFailures reads dest's record from the state bucket kv (zero
// and no error when there is none).
func readDeadLetterFailures(ctx context.Context, kv jetstream.KeyValue, dest string) (DeadLetterFailures, uint64, error) {
	e, err := kv.Get(ctx, deadLetterFailuresKey(dest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DeadLetterFailures{}, 0, nil
	}
	if err != nil {
		return DeadLetterFailures{}, 0, err
	}
	var f DeadLetterFailures
	_ = json.Unmarshal(e.Value(), &f) // one stored corrupt starts again from zero
	return f, e.Revision(), nil
}

// deadLetterFailed reports ev, whose dead letter cannot be stored for good
// (err wraps dlq.ErrPermanent): logged, counted in
// relay_dead_letter_failures_total and in the state bucket.
func (r *Relay) deadLetterFailed(ctx context.Context, ev event, reason string, err error) {
	r.log.Error("cannot store the event's dead letter, and retrying would not change that: the event is given up and stays in the event log until its retention ends ('relay replay' delivers it again)",
		"dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "reason", reason, "err", err)
	r.cfg.Metrics.deadLetterFailed(ev.dest)
	if stream.ValidateDestRef(ev.dest) != nil {
		return // no key can name it; the log and the metric have it
	}
	kv, kerr := r.cfg.JS.KeyValue(ctx, stream.StateBucket)
	for i := 0; kerr == nil && i < 5; i++ {
		var f DeadLetterFailures
		var rev uint64
		if f, rev, kerr = readDeadLetterFailures(ctx, kv, ev.dest); kerr != nil {
			break
		}
		f.Count++
		f.LastAt, f.LastEventID, f.LastSeq, f.LastError = r.cfg.Now().UTC(), ev.id, ev.seq, dlq.OneLine(err.Error(), 512)
		b, _ := json.Marshal(f)
		if rev == 0 {
			_, kerr = kv.Create(ctx, deadLetterFailuresKey(ev.dest), b)
		} else {
			_, kerr = kv.Update(ctx, deadLetterFailuresKey(ev.dest), b, rev)
		}
		if kerr == nil || !errors.Is(kerr, jetstream.ErrKeyExists) && !lease.IsWrongRevision(kerr) {
			break
		}
	}
	if kerr != nil {
		r.log.Warn("cannot record the dead-letter failure for 'relay stats'", "dest", ev.dest, "event_id", ev.id, "err", kerr)
	}
}
