package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"net/http"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/internal/failpoint"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
)

// handle takes one delivered message through its delivery: it learns what
// Decide asks for (the rate limit, the attempt log, the attempt itself)
// until Decide chooses an outcome, and then carries that out. mark is set
// when msg heads an ordered key: its partition's mark.
func (r *Relay) handle(ctx context.Context, msg delivered, mark *partitionMark) {
	ev, err := r.eventOf(msg)
	if err != nil {
		r.log.Error("cannot read event; terminating it", "subject", msg.Subject(), "err", err)
		r.execute(context.Background(), msg, &ev, mark, Input{Unreadable: true}, Decide(Input{Unreadable: true}))
		return
	}
	in := r.input(ctx, ev, mark)
	if in.Probing {
		defer r.breakers.endProbe(in.Dest.Name)
	}
	var span trace.Span // the attempt's, when relay traces
	for {
		dec := Decide(in)
		switch dec.Action {
		case WaitRate:
			in.RateAsked = true
			in.RateWait = r.waitRate(ctx, r.limiter(in.Dest), in.Dest, in.Ordered)
		case WaitTenant:
			in.TenantAsked = true
			var release func()
			release, in.TenantWait = r.tenantSlot(ctx, in.Dest.Tenant())
			if release != nil {
				defer release() // once the delivery is settled
			}
		case ReadLog:
			r.readLogInto(&in, &ev)
		case FindPark:
			r.findPark(&in, ev)
		case Send:
			if !in.Late && late(msg, Result{}, r.ackWaitNow()) {
				in.Late = true // decided on next: no request is made
				continue
			}
			d, err := r.delivery(ctx, in.Dest, ev)
			d.Attempt = in.Attempt
			switch {
			case errors.Is(err, destination.ErrRenderStopped):
				in.Interrupted = true // decided on next: no request is made
				continue
			case err != nil:
				// Decided on next: no request is made.
				in.TemplateErr = err.Error()
				continue
			}
			if r.tracer != nil {
				_, span = r.startSpan(ctx, ev, spans.Attempt, trace.SpanKindClient, spans.AttrAttempt.Int(in.Attempt))
				d.Trace = span.SpanContext()
			}
			inf := r.cfg.Metrics.attemptStarted(in.Dest.Name)
			res := r.send(ctx, in.Dest, d)
			inf.done()
			if res.ProxyFailed {
				// Decided on next: no request reached the destination.
				if ctx.Err() != nil {
					in.Interrupted = true
				} else {
					in.ProxyFailed = res.Err.Error()
					r.proxyFailed(res.Err)
				}
				continue
			}
			in.Sent, in.Result = true, res
			if in.CanPark && !res.OK() {
				// A park may fail, and Decide is asked again then: the
				// same draws give the event the same wait in JetStream.
				in.seed = [2]uint64{rand.Uint64(), rand.Uint64()}
			}
			in.Cancelled = ctx.Err() != nil
			in.Late = late(msg, res, r.ackWaitNow())
		default:
			if span == nil {
				r.execute(context.Background(), msg, &ev, mark, in, dec)
				return
			}
			// What the attempt leads to (a park, a dead letter) is
			// part of its span.
			out := r.execute(trace.ContextWithSpan(context.Background(), span), msg, &ev, mark, in, dec)
			endAttempt(span, in.Dest, out)
			return
		}
	}
}

// delivery is the request of an attempt to deliver ev to d: the event's
// body, or what d's body template renders for it. A template that fails
// returns why (its first line), and logs it; one cut short by a shutdown
// (ctx) returns errRenderStopped.
func (r *Relay) delivery(ctx context.Context, d destination.Destination, ev event) (Delivery, error) {
	dl := Delivery{ID: ev.id, Type: ev.typ, Body: ev.body, Headers: eventHeaders(ev.hdr), Key: ev.key}
	if d.CompiledTemplate() == nil {
		return dl, nil
	}
	body, err := d.CompiledTemplate().Render(ctx, destination.NewTemplateEvent(dl.ID, dl.Type, ev.key, ev.dest, ev.published, ev.body, dl.Headers))
	if errors.Is(err, destination.ErrRenderStopped) {
		return dl, err
	}
	if err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		r.log.Warn("body template failed on the event (fix the template with 'relay dest update --body-template', then replay its dead letter)", "dest", ev.dest, "event_id", ev.id, "err", msg)
		return dl, errors.New(msg)
	}
	dl.Body, dl.ContentType = body, d.BodyContentType
	return dl, nil
}

// send makes one attempt to deliver ev to d, at the URL of d's pool that
// the pool's state picks, and records in that state what the attempt said
// about the URL.
func (r *Relay) send(ctx context.Context, d destination.Destination, ev Delivery) Result {
	if !d.IsHTTP() {
		return r.publish(ctx, d, ev)
	}
	pool := d.Pool()
	if len(pool) < 2 {
		return r.sender.Send(ctx, d, ev)
	}
	i := r.pools.pick(d, r.cfg.Now())
	to := d
	to.URL = pool[i]
	res := r.sender.Send(ctx, to, ev)
	res.URL, res.Pooled = i, true
	eff := effectOf(res, d)
	if ctx.Err() != nil {
		eff = NoEffect // cut short by a shutdown: it says nothing of the URL
	}
	r.pools.report(d, i, eff, r.cfg.Now())
	return res
}

// input is what relay knows of ev's delivery before anything is asked: the
// ordered partition's mark, the destination and its state. Where the
// destination's circuit is open, it takes the probe if no other worker has
// it (Input.Probing): the caller ends it.
func (r *Relay) input(ctx context.Context, ev event, mark *partitionMark) Input {
	in := Input{
		Ordered:       mark != nil,
		Now:           r.cfg.Now(),
		Attempt:       ev.prior + 1,
		CanPark:       mark == nil && r.cfg.Schedule != nil,
		ParkThreshold: r.cfg.ParkThreshold,
		// The attempt number counts attempts whose outcome was recorded,
		// not JetStream's deliveries: a delivery handed back unattempted,
		// dropped by the client or cut short by a crash uses none up. A
		// first delivery has no log to read, unless it brings the event
		// back from Redis (an operator may have marked it meanwhile) or a
		// crash brought it back (inRetryAtStart), or it was moved to its
		// destination's lane (attempts may have been made before).
		NeedLog: ev.delivered > 1 || ev.prior > 0 || r.inRetryAtStart(ev) || strings.HasPrefix(ev.subject, stream.LanePrefix+"."),
	}
	if mark != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		// A redelivery reads the mark again: another replica may have
		// settled the event and lost its ack.
		settled, err := mark.settled(ctx, ev.seq, ev.delivered > 1)
		cancel()
		if err != nil {
			r.log.Warn("cannot tell whether the head of an ordered key was delivered before; it waits", "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
		}
		in.MarkUnreadable, in.Settled = err != nil, settled
	}
	in.Dest, in.Known = r.dests.Get(ev.dest)
	if in.Known && in.Dest.PauseReason == destination.PauseCircuitOpen && !in.Now.Before(in.Dest.PausedUntil) {
		// The circuit's pause is over: one probe per replica decides.
		in.Probing = r.breakers.tryProbe(in.Dest.Name)
		in.ProbeTaken = !in.Probing
	}
	in.RateLimited = in.Known && in.Dest.RateLimit > 0
	in.TenantLimited = in.Known && r.cfg.Policies.Limits(in.Dest.Tenant()).MaxInFlight > 0
	if in.Known && in.Dest.CompiledFilter() != nil {
		ok, err := in.Dest.CompiledFilter().Match(ctx, destination.FilterEvent{ID: ev.id, Key: ev.key, Dest: ev.dest, Type: ev.typ, Body: ev.body, Headers: eventHeaders(ev.hdr)})
		switch {
		case errors.Is(err, destination.ErrFilterStopped):
			in.Interrupted = true
			return in
		case err != nil:
			r.log.Warn("filter failed on the event (fix the filter with 'relay dest update --filter', then replay its dead letter)", "dest", ev.dest, "event_id", ev.id, "err", err)
			in.FilterErr = err.Error()
		}
		in.Filtered = err == nil && !ok
	}
	return in
}

// readLogInto reads ev's attempt log into in: the attempt number, an
// operator's skip mark, and whether the event was parked or settled before
// (then this message came back only because its ack was lost), or relay
// began to park it from this message and a crash left that in doubt.
func (r *Relay) readLogInto(in *Input, ev *event) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	l, found := r.readLog(ctx, *ev)
	in.LogRead = true
	in.Settled = l.ParkedAlready((*ev).seq, (*ev).origin)
	in.ParkInDoubt = !in.Settled && l.ParkInDoubt((*ev).seq, (*ev).origin)
	if !in.Settled && !in.ParkInDoubt && r.cfg.Schedule != nil && (!found || l.HandedOn() != 0) {
		// A parked event's done mark is written before the ack of the
		// message that settles it, and its log deleted after (which a
		// crash, or the NATS server gone, can prevent): this message
		// may be that one, its ack lost. One more read for each copy
		// from Redis, none for an event never parked.
		in.Settled = r.doneParked(ctx, *ev)
	}
	in.Attempt, in.Skip = max(l.Made, ev.prior)+1, l.SkipAt((*ev).seq, (*ev).origin)
	ev.parked = l.HandedOn()
}

// findPark finds out, for a message whose park is in doubt
// (Input.ParkInDoubt), whether the event has its copy: parked in Redis, or
// republished from there already. The park was of the attempt before this
// one, so its entry is known. Where Redis does not have it, the promoter
// republished it, or the crash came before Redis stored it: the copy is
// published here under the promoter's dedup id, which JetStream drops if
// the promoter published it within the duplicate window. Either way the
// event then has exactly one copy, and this message is settled.
func (r *Relay) findPark(in *Input, ev event) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	in.ParkLooked = true
	if r.cfg.Schedule == nil {
		in.ParkUnknown = "its park may be in Redis, and this relay runs without one"
		r.log.Warn("an event whose park a crash interrupted may be parked in Redis: it waits until relay runs with --redis-url", "dest", ev.dest, "event_id", ev.id, "seq", ev.seq)
		return
	}
	e, err := r.parkEntry(ev, in.Attempt-1, ev.hdr, r.cfg.Now())
	if err != nil {
		in.ParkUnknown = err.Error()
		return
	}
	parked, err := r.cfg.Schedule.Has(ctx, e)
	if err != nil {
		in.ParkUnknown = "look in Redis: " + err.Error()
		r.log.Warn("cannot tell whether an event whose park a crash interrupted is parked in Redis; it waits", "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
		return
	}
	how := "its park, interrupted by a crash, reached Redis"
	if !parked {
		ack, err := r.cfg.JS.PublishMsg(ctx, e.Envelope().Msg(stream.Promoted, e.Subject, r.seal))
		if err != nil {
			in.ParkUnknown = "republish: " + err.Error()
			r.log.Warn("cannot republish an event whose park a crash interrupted; it waits", "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
			return
		}
		how = "its park, interrupted by a crash, is not in Redis: its copy was republished from there already"
		if !ack.Duplicate {
			how = "its park, interrupted by a crash, is not in Redis: its copy is republished now"
		}
	}
	in.ParkFound = true
	if err := r.markParked(ctx, ev); err != nil {
		r.log.Warn("cannot record a park in the attempt log", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
	r.log.Info(how, "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "attempts", e.Attempts)
}

// execute carries out dec, an outcome of Decide for ev's delivery as in
// describes it, and returns what became of it. ctx carries the attempt's
// span, if any, for the spans of what it leads to; it is not cancelled.
func (r *Relay) execute(ctx context.Context, msg delivered, ev *event, mark *partitionMark, in Input, dec Decision) Outcome {
	out := Outcome{Dest: ev.dest, EventID: ev.id, Seq: ev.seq, Attempt: in.Attempt, Decision: dec, note: in.Skip}
	if in.Sent {
		out.Result = in.Result
	}
	switch dec.Action {
	case Terminate:
		_ = msg.Terminate(dec.Reason)
		return out
	case HandBack:
		if in.Sent {
			r.log.Info("attempt cancelled by shutdown", "dest", ev.dest, "event_id", ev.id, "attempt", in.Attempt)
		}
		delay := dec.Delay
		if dec.Jitter {
			delay = jitter(delay)
		}
		r.handBack(msg, delay)
		return out
	case AckSettled:
		why := "the head of an ordered key settled before its ack was lost (a crash of the NATS server's process)"
		switch {
		case in.ParkFound:
			why = "the event's park was interrupted by a crash; its copy carries on"
		case in.LogRead:
			why = "the event was parked in Redis, or settled, before its ack was lost (a crash of the NATS server's process, or a lost ack); its copy carries on"
		}
		r.ackSettled(msg, *ev, why)
		return out
	case Leave:
		if !in.Sent {
			r.log.Warn("event unheard of for AckWait before its attempt (this process was stopped or paused); leaving it to its redelivery, not sending it", "dest", ev.dest, "event_id", ev.id)
			return out
		}
		r.log.Warn("attempt finished after AckWait; leaving the event to its redelivery", "dest", ev.dest, "event_id", ev.id, "duration", in.Result.Duration, "status", in.Result.Status)
		return out
	}
	// Before act: the breaker counts failures in the order responses came
	// back. After act, a failure's bookkeeping (its history in the attempt
	// log) delays it, and failures held up together by a slow write would
	// arrive back to back, "consecutive".
	r.affect(in.Dest, dec, in.Probing, ev.id, !opevent.Is(ev.typ))
	for {
		again, err := r.act(ctx, msg, *ev, &in, mark, &out)
		out.Err = err
		if !again {
			break
		}
		// Carrying the decision out taught relay what Decide weighs (in
		// says what): it decides again, and that is carried out.
		out.Decision, out.note = Decide(in), in.Skip
	}
	r.logOutcome(out)
	r.recordOutcome(ev, in.Dest, &out, in.Sent)
	r.cfg.Metrics.observe(out, in.Ordered, in.Dest.Shared, ev.published, r.cfg.Now())
	if r.cfg.OnDelivery != nil {
		r.cfg.OnDelivery(out)
	}
	return out
}

// waitRate waits for d's rate limit to allow an attempt, and returns how
// long to hand the event back for when it does not (0: go on). A wait
// longer than half d's timeout (at least 1s) is not made: the event goes
// back to JetStream until the limit allows it, without using an attempt.
// Its AckWait is restarted while the worker waits (see pinged), but a
// worker that waits holds its place among the destination's concurrency
// and the replica's --max-in-flight.
func (r *Relay) waitRate(ctx context.Context, lim *limit, d destination.Destination, ordered bool) time.Duration {
	if lim == nil {
		return 0
	}
	res, delay, ok := lim.reserve(d.LongWait())
	if !ok {
		if ordered {
			// The head of a key: back when the limit allows, give or
			// take a round of the workers, not behind the queue of
			// unordered events.
			round := time.Duration(min(float64(max(d.Concurrency, 1))*float64(lim.every), float64(maxRateWait)))
			return max(min(delay, maxRateWait-round)+rand.N(max(round, time.Millisecond)), time.Nanosecond)
		}
		return max(lim.turn(r.cfg.Now(), delay), time.Nanosecond)
	}
	if delay == 0 {
		return 0
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-ctx.Done():
		res.Cancel()
		return time.Second // shutting down
	}
}

// ackTimeout bounds waiting for JetStream to confirm an ack or a publish.
const ackTimeout = 10 * time.Second

// act carries out out.Decision, Decide's outcome for ev's delivery as in
// describes it. mark is set when ev heads an ordered key: its acks are
// confirmed, after the mark recorded it settled, and its long waits are not
// parked in Redis. ctx carries the attempt's span, if any; act bounds its
// waits itself.
//
// Carrying a decision out may teach what Decide weighs: an operator's skip
// mark found as the failure is recorded (in.Skip), a park that failed
// (in.ParkFailed), a dead letter that cannot be stored (in.DeadLetterFailed).
// act then sets it in in and returns again, the message not settled yet,
// for Decide to decide again; what was done already (the failure recorded,
// the dead letter's failure reported) is not done twice.
func (r *Relay) act(ctx context.Context, msg delivered, ev event, in *Input, mark *partitionMark, out *Outcome) (again bool, err error) {
	ordered := mark != nil
	attempt := in.Attempt
	if (out.Decision.Action == Ack || out.Decision.Action == AckFiltered) && attempt == 1 && !ordered {
		// The hot path. The ack is not confirmed: confirming would cost a
		// round trip per event and change nothing, since a lost ack means
		// the event comes back (a duplicate), confirmed or not.
		return false, msg.Acknowledge()
	}
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	switch out.Decision.Action {
	case Ack, AckFiltered:
		if mark != nil && r.settleOrdered(ctx, mark, ev) {
			// The head of an ordered key: its mark, confirmed, answers
			// for the ack. Should the ack be lost, the event comes back
			// and is acknowledged then without an attempt.
			if attempt > 1 {
				r.forgetHistory(ctx, ev)
			}
			return false, msg.Acknowledge()
		}
		if attempt > 1 {
			// A parked event: its done mark answers for the ack, should a
			// crash of the NATS server's process take the ack back.
			r.markDone(ctx, ev)
		}
		// Confirmed: a retried event's history is deleted only once its
		// ack is certain (else a lost ack would bring it back without one).
		if err := msg.AcknowledgeConfirmed(ctx); err != nil {
			return false, fmt.Errorf("ack not confirmed (the event may be delivered again): %w", err)
		}
		if attempt > 1 {
			r.deleteLog(ctx, ev)
		}
		return false, nil
	case Retry, Park:
		if in.ParkFailed {
			// Decided again after the park failed: the failure is
			// recorded already.
			return false, msg.Redeliver(out.Decision.Delay)
		}
		// Checked before the park is recorded as begun: a copy that could
		// not be republished must not be looked for.
		var perr error
		if out.Decision.Action == Park {
			perr = r.parkable(ev)
		}
		skip, recorded := r.recordFailure(ctx, ev, attempt, out.Result, msg.Reply(), out.Decision.Action == Park && perr == nil)
		if skip != "" {
			// An operator skipped it while this attempt ran (the history
			// has this attempt now).
			in.Skip, out.recorded = skip, true
			return true, nil
		}
		if out.Decision.Action == Retry {
			return false, msg.Redeliver(out.Decision.Delay)
		}
		out.parkTried = true
		switch {
		case perr != nil:
		case !recorded:
			perr = errors.New("the attempt log did not record the park: after a crash the event could not be told from its copy")
		default:
			parked, err := r.park(ctx, msg, ev, attempt, out.Decision.Delay)
			if parked {
				out.Parked = true
				return false, err
			}
			perr = err
			r.unpark(ctx, ev)
		}
		if ok, held := r.parkWarn.Allow(ev.dest, r.cfg.Now()); ok {
			r.log.Warn("cannot park the event in Redis; it waits in JetStream instead", "dest", ev.dest, "event_id", ev.id, "err", perr, "also_since_last_warning", held)
		}
		in.ParkFailed = true
		return true, nil
	}
	return r.deadLetter(ctx, msg, ev, in, mark, out)
}

// deadLetterRetry is how soon an event whose dead letter could not be
// written (NATS did not answer) comes back to be dead-lettered again.
const deadLetterRetry = 5 * time.Second

// deadLetter writes ev's dead letter and then terminates msg, as act does
// (see there for again). mark is set when ev heads an ordered key. A
// decision to give the event up without its letter (its reason
// ReasonDeadLetterFailed, out.Err why) terminates msg only.
func (r *Relay) deadLetter(ctx context.Context, msg delivered, ev event, in *Input, mark *partitionMark, out *Outcome) (again bool, err error) {
	if out.Decision.Reason == ReasonDeadLetterFailed {
		r.settleOrdered(ctx, mark, ev)
		if terr := msg.Terminate(ReasonDeadLetterFailed); terr != nil {
			return false, errors.Join(out.Err, terr)
		}
		r.forgetHistory(ctx, ev)
		return false, out.Err
	}
	if err := r.writeDeadLetter(ctx, ev, in.Attempt, out); err != nil {
		if errors.Is(err, dlq.ErrPermanent) {
			// Reported with the reason it was to be dead-lettered for.
			r.deadLetterFailed(ctx, ev, out.Decision.Reason, err)
			in.DeadLetterFailed = true
			return true, err
		}
		// Keep the event: it comes back and is dead-lettered then.
		_ = msg.Redeliver(deadLetterRetry)
		return false, err
	}
	r.settleOrdered(ctx, mark, ev)
	if err := msg.Terminate(out.Decision.Reason); err != nil {
		return false, fmt.Errorf("dead-lettered, but terminating the original failed (it comes back and is dropped as a duplicate): %w", err)
	}
	r.forgetHistory(ctx, ev)
	return false, nil
}

// writeDeadLetter writes ev's dead letter, with its history, and waits for
// JetStream to confirm it. It does not touch the original. When relay
// traces, the letter carries the context of its span (a child of ctx's, or
// of the event's traceparent), so that a replay continues the trace.
func (r *Relay) writeDeadLetter(ctx context.Context, ev event, attempt int, out *Outcome) (err error) {
	hdr := ev.hdr
	if r.tracer != nil {
		var span trace.Span
		ctx, span = r.startSpan(ctx, ev, spans.DeadLetter, trace.SpanKindProducer, spans.AttrReason.String(out.Decision.Reason), spans.AttrAttempt.Int(max(attempt, 0)))
		defer func() { spans.End(span, err) }()
		hdr = stream.WithTrace(ctx, ev.hdr)
	}
	hist := r.history(ctx, ev)
	made := attempt - 1 // attempts made before this one
	if out.Result.Attempted() {
		if !out.recorded { // else the history has it already
			hist = append(hist, attemptOf(attempt, r.cfg.Now(), out.Result))
		}
		made = attempt
	}
	l := dlq.Letter{
		DeadAt:    r.cfg.Now().UTC(),
		Dest:      ev.dest,
		EventID:   ev.id,
		Key:       ev.key,
		Reason:    out.Decision.Reason,
		Note:      cmp.Or(out.note, out.Decision.Note),
		Attempts:  max(made, 0),
		Subject:   ev.subject,
		StreamSeq: ev.seq,
		History:   hist,
		Headers:   hdr,
		Body:      ev.body,
	}
	if n := len(hist); n > 0 {
		l.First, l.Last = hist[0].At, hist[n-1].At
		l.LastStatus, l.LastError = hist[n-1].Status, hist[n-1].Error
	}
	_, err = r.dlq.Write(ctx, l)
	return err
}

// parkable reports what keeps ev from being parked: it could not come
// back from Redis.
func (r *Relay) parkable(ev event) error {
	if err := r.republishable(ev); err != nil {
		return err
	}
	_, err := stream.ParseSubject(ev.subject)
	return err
}

// parkEntry is the entry that parks ev after attempt number attempt, due
// at due, with the headers hdr.
func (r *Relay) parkEntry(ev event, attempt int, hdr nats.Header, due time.Time) (schedule.Entry, error) {
	p, err := stream.ParseSubject(ev.subject)
	if err != nil {
		return schedule.Entry{}, err
	}
	return schedule.Entry{
		Dest:      ev.dest,
		Subject:   p.InputSubject(ev.key),
		EventID:   ev.id,
		Attempts:  attempt,
		Headers:   hdr,
		Body:      ev.body,
		Due:       due,
		Published: ev.published,
		Origin:    ev.origin,
	}, nil
}

// park moves ev to the Redis schedule and acks it once Redis confirmed.
// It reports whether the event was parked (then it must not also be nak'd).
// The attempt log must say the park began (attemptLog.Parking). When relay
// traces, the parked entry carries the context of the park's span (a child
// of ctx's), so that its promotion continues the trace.
func (r *Relay) park(ctx context.Context, msg delivered, ev event, attempt int, delay time.Duration) (_ bool, err error) {
	hdr := ev.hdr
	if r.tracer != nil {
		var span trace.Span
		ctx, span = r.startSpan(ctx, ev, spans.Park, trace.SpanKindProducer, spans.AttrAttempt.Int(attempt), spans.AttrRetryIn.Int64(delay.Milliseconds()))
		defer func() { spans.End(span, err) }()
		hdr = stream.WithTrace(ctx, ev.hdr)
	}
	e, err := r.parkEntry(ev, attempt, hdr, r.cfg.Now().Add(delay))
	if err != nil {
		return false, err
	}
	pctx, cancel := context.WithTimeout(ctx, parkTimeout)
	defer cancel()
	if err := r.cfg.Schedule.Park(pctx, e); err != nil {
		return false, err
	}
	failpoint.Inject("park-after-redis")
	if err := r.markParked(ctx, ev); err != nil {
		// The log says the park began: should the ack below be lost,
		// the message is looked for in Redis when it comes back.
		r.log.Warn("parked, but cannot record it in the attempt log (if this message comes back, relay looks for its copy first)", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
	if err := msg.AcknowledgeConfirmed(ctx); err != nil {
		// Parked, but JetStream may deliver it again as well: at least once.
		return true, fmt.Errorf("parked, but the ack was not confirmed (the event may be attempted twice): %w", err)
	}
	return true, nil
}

// republishHeaders bounds what the promoter adds to a parked event besides
// two copies of its id (Nats-Msg-Id with the attempt, Relay-Event-Id): the
// attempt, the origin sequence and the publish time, with their names.
const republishHeaders = 256

// republishable reports an event too large to come back from Redis: its
// copy, with the headers the promoter adds, would exceed the events
// stream's or the server's largest message. Such an event is not parked;
// it waits in JetStream.
func (r *Relay) republishable(ev event) error {
	size := len(ev.body) + 2*len(ev.id) + republishHeaders
	if r.tracer != nil {
		size += traceRoom
	}
	for k, vs := range ev.hdr {
		for _, v := range vs {
			size += len(k) + len(v) + 4 // "K: V\r\n"
		}
	}
	if r.maxMsg > 0 && size > r.maxMsg {
		return fmt.Errorf("event of about %d bytes with the headers of its copy: over the largest message of %d bytes, so it cannot be republished from Redis", size, r.maxMsg)
	}
	return nil
}

// parkTimeout bounds a park; Redis being slow must not stall deliveries.
const parkTimeout = 2 * time.Second

// settleOrdered records in mark, when ev heads an ordered key, that ev is
// settled, and reports whether it did. A failure is logged: the event is
// settled all the same, and only a crash of the NATS server's process
// before its ack is written could then bring it back, out of order.
func (r *Relay) settleOrdered(ctx context.Context, mark *partitionMark, ev event) bool {
	if mark == nil {
		return false
	}
	if err := mark.settle(ctx, ev.seq); err != nil {
		r.log.Warn("cannot record the head of an ordered key as settled", "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
		return false
	}
	return true
}

// ackSettled acknowledges, without an attempt, a message whose event was
// settled before: why says how relay knows.
func (r *Relay) ackSettled(msg delivered, ev event, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	err := msg.AcknowledgeConfirmed(ctx)
	r.log.Info("acknowledged without an attempt: "+why, "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
	r.cfg.Metrics.settledAgain(ev.dest)
}

// handBack hands msg back to JetStream without an attempt (attempts are
// counted in the attempt log, so this uses none up).
func (r *Relay) handBack(msg delivered, delay time.Duration) {
	_ = msg.Redeliver(delay)
}

// logOutcome logs what came of a delivery, at a level an operator can run
// production at: a dead letter or a failure to act at WARN; a retry at
// INFO, one per destination every retryLogEvery (the next says how many
// were left out); a delivery, a filtered event, a hand-back at DEBUG, as
// many as the events, which the delivery log and the metrics have, and
// the minute's summary per destination counts (summaries).
func (r *Relay) logOutcome(o Outcome) {
	r.summary.add(o.Dest, o.Decision.Action)
	level := slog.LevelDebug
	var notLogged int
	switch o.Decision.Action {
	case DeadLetter:
		level = slog.LevelWarn
	case Retry, Park:
		if ok, n := r.retryLog.Allow(o.Dest, r.cfg.Now()); ok {
			level, notLogged = slog.LevelInfo, n
		}
	case Leave, Terminate:
		level = slog.LevelInfo
	}
	if o.Err != nil {
		level = slog.LevelWarn
	}
	if !r.log.Enabled(context.Background(), level) {
		return // on the hot path: build nothing that is not logged
	}
	attrs := []any{"dest", o.Dest, "event_id", o.EventID, "seq", o.Seq, "attempt", o.Attempt,
		"outcome", o.Decision.Action.String()}
	if notLogged > 0 {
		attrs = append(attrs, "retries_not_logged", notLogged)
	}
	if o.Result.Pooled {
		attrs = append(attrs, "url", o.Result.URL)
	}
	if o.Result.Status != 0 {
		attrs = append(attrs, "status", o.Result.Status)
	}
	if o.Result.Err != nil {
		attrs = append(attrs, "error", o.Result.Err.Error())
		if f, ok := errors.AsType[*egress.DNSFailure](o.Result.Err); ok {
			attrs = append(attrs, "dns_error", f.Detail())
		}
	}
	attrs = append(attrs, "duration", o.Result.Duration.Round(time.Microsecond))
	switch o.Decision.Action {
	case Retry, Park:
		attrs = append(attrs, "retry_in", o.Decision.Delay.Round(time.Millisecond))
		if o.Parked {
			attrs = append(attrs, "parked", true)
		}
	case DeadLetter:
		attrs = append(attrs, "reason", o.Decision.Reason)
	}
	if o.Err != nil {
		attrs = append(attrs, "act_error", o.Err.Error())
	}
	r.log.Log(context.Background(), level, "attempt", attrs...)
}

// late reports whether JetStream may have handed msg to another worker
// while this attempt ran: it heard nothing of the event for AckWait (the
// process was stopped, or paused as long). An event relay pings knows how
// long that was; for another, the attempt's duration stands in.
func late(msg delivered, res Result, ackWait time.Duration) bool {
	if p, ok := msg.(interface{ unheard(time.Time) time.Duration }); ok {
		return p.unheard(time.Now()) > ackWait-time.Second
	}
	return res.Duration > ackWait-time.Second
}

// event is a stored event taken apart.
type event struct {
	id      string
	dest    string
	key     string // the producer's order key, empty if the event carries none
	seq     uint64
	subject string
	prior   int // attempts made before this stream message
	// origin is the sequence of the message the event first came in as:
	// seq, or for one republished from Redis its Relay-Origin-Seq.
	origin uint64
	// delivered counts JetStream's deliveries of this stream message;
	// stored is when JetStream stored it.
	delivered uint64
	stored    time.Time
	// published is when the producer published the event (a republished
	// copy carries the original's time in a header).
	published time.Time
	// typ is the event's type (stream.Envelope.Type), empty for an event
	// published for one destination.
	typ string
	// body and hdr are the event's own, as stored.
	body []byte
	hdr  nats.Header
	// parked is the last sequence of this event relay parked in Redis, as
	// its attempt log said (0: not parked, or not read).
	parked uint64
}

// eventOf takes apart a delivered message. Relay's headers on a message
// without relay's seal (a producer's) are dropped, and said so in a
// warning a minute per destination at most.
func (r *Relay) eventOf(msg message) (event, error) {
	info, ok := parseAckReply(msg.Reply())
	if !ok {
		meta, err := msg.Metadata()
		if err != nil {
			return event{}, fmt.Errorf("message without JetStream metadata: %w", err)
		}
		info = ackInfo{streamSeq: meta.Sequence.Stream, delivered: meta.NumDelivered, stored: meta.Timestamp}
	}
	ev, unsealed, err := newEvent(msg.Subject(), info, msg.Data(), msg.Headers(), r.seal)
	if unsealed != nil && err == nil {
		if ok, held := r.unsealedWarn.Allow(ev.dest, r.cfg.Now()); ok {
			r.log.Warn("relay's headers on an event relay did not publish were dropped: a producer may not set them (see docs/security.md#producers-and-relays-headers)",
				"dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "headers", unsealed, "held_back", held)
		}
	}
	return ev, err
}

// rawEvent is eventOf for a message read from the stream by sequence (as if
// delivered once), seal its seal (see stream.Decode).
func rawEvent(msg *jetstream.RawStreamMsg, seal *stream.Seal) (event, error) {
	ev, _, err := newEvent(msg.Subject, ackInfo{streamSeq: msg.Sequence, delivered: 1, stored: msg.Time}, msg.Data, msg.Header, seal)
	return ev, err
}

// newEvent takes apart an event stored on subject, and names the headers
// of relay's it dropped for want of seal's seal (see stream.Decode).
func newEvent(subject string, info ackInfo, body []byte, h nats.Header, seal *stream.Seal) (event, []string, error) {
	e, err := stream.Decode(subject, info.streamSeq, info.stored, h, body, seal)
	if err != nil {
		return event{}, nil, err
	}
	return event{
		id: e.ID, dest: e.Dest, key: e.Key, typ: e.Type, seq: e.Seq, subject: subject, prior: e.Attempt, origin: e.Origin,
		delivered: info.delivered, stored: e.Stored, published: e.Published, body: body, hdr: e.Headers,
	}, e.Unsealed, nil
}

// eventHeaders returns the event's own headers to pass on, nil if none.
func eventHeaders(h nats.Header) http.Header {
	return stream.Envelope{Headers: h}.HTTPHeader()
}

// ackInfo is what relay needs of a JetStream message's metadata.
type ackInfo struct {
	streamSeq uint64
	delivered uint64
	stored    time.Time
	pending   uint64 // what the consumer had left to deliver after this one
	consSeq   uint64 // the consumer's sequence of this delivery
}

// parseAckReply reads ackInfo from a JetStream ack subject without
// allocating (stream.ParseAck), and reports false for anything else.
func parseAckReply(reply string) (ackInfo, bool) {
	md, ok := stream.ParseAck(reply)
	if !ok {
		return ackInfo{}, false
	}
	return ackInfo{
		streamSeq: md.Sequence.Stream,
		delivered: md.NumDelivered,
		stored:    md.Timestamp,
		pending:   md.NumPending,
		consSeq:   md.Sequence.Consumer,
	}, true
}
