package relay

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
)

// Result is what one delivery attempt came back with.
type Result struct {
	// Status is the HTTP status, 0 when no response arrived (and for a
	// destination of another kind).
	Status int
	// Delivered says a destination of a non-HTTP kind confirmed it has the
	// event (its kind.Answer had no error); Permanent says its failure
	// cannot pass by retrying (the event is dead-lettered with
	// ReasonPermanentError), and Code is the target's code for it.
	Delivered bool
	Permanent bool
	Code      string
	// Err is the transport error (connection refused, DNS, timeout...) when
	// no response arrived.
	Err error
	// RetryAfter is the destination's Retry-After, when it sent a valid one.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Blocked says the address guard refused the destination's address.
	Blocked bool
	// ProxyFailed says the egress proxy failed (egress.ProxyError): the
	// request never reached the destination.
	ProxyFailed bool
	// Snippet is the start of the response body, for the failure history.
	Snippet string
	// Body is the start of the response body and Headers the response
	// headers (name, value, name, value...) that the delivery log keeps
	// (Sender.KeepBody, Sender.KeepHeaders).
	Body    []byte
	Headers []string
	// Duration is how long the attempt took.
	Duration time.Duration
	// URL is the index, in the destination's pool, of the URL attempted;
	// Pooled says the destination has a pool of more than one URL.
	URL    int
	Pooled bool
}

// Action is what happens to a delivered event: the outcomes, each ending
// the delivery, and the steps Decide asks for before it can choose one.
type Action int

// The outcomes.
const (
	// Ack: delivered; acknowledge the event.
	Ack Action = iota
	// Retry: try again after Decision.Delay, waiting in JetStream (a nak
	// with that delay).
	Retry
	// DeadLetter: give up; move the event to the dead-letter stream with
	// Decision.Reason, then terminate it.
	DeadLetter
	// Park: try again after Decision.Delay, waiting in Redis (acknowledged
	// in JetStream once Redis confirmed it; where it cannot be parked, it
	// waits in JetStream instead, as Retry).
	Park
	// HandBack: back to JetStream after Decision.Delay without an attempt
	// (paused, the circuit's probe taken, the rate limit, a shutdown): no
	// attempt is used up.
	HandBack
	// AckSettled: the event was settled before and came back only because
	// its ack was lost: acknowledge it without an attempt.
	AckSettled
	// Leave: do nothing; the attempt outlived AckWait and JetStream has
	// handed the event to another worker.
	Leave
	// Terminate: the message is no event relay can read; terminate it.
	Terminate
	// AckFiltered: the destination's filter turned the event down:
	// acknowledge it without an attempt.
	AckFiltered

	// The shared consumer's admission's outcomes (DecideAdmit).

	// Queue: queue the event (or the fan-out share) for a worker of this
	// replica, whose Decide then decides on it.
	Queue
	// Pass: not the shared consumer's to deliver (its destination has
	// consumers of its own, or is unknown, or the event is older than it):
	// acknowledge it; its own consumer, or the unknown-destination check,
	// has it.
	Pass
	// ToLane: move the event to its destination's lane (republish it
	// there); the move's end is decided on next.
	ToLane
	// AckMoved: the event is stored elsewhere (its lane), or a fan-out
	// message's shares are all done or split off: acknowledge the message.
	AckMoved
	// Split: split a fan-out share off, as a copy of its own
	// (stream.Split).
	Split
)

// The steps Decide asks for before it can choose an outcome.
const (
	// WaitRate: ask the destination's rate limit (it may wait a little).
	WaitRate Action = iota + 100
	// ReadLog: read the event's attempt log.
	ReadLog
	// Send: make the attempt.
	Send
	// FindPark: find out whether the event whose park a crash left in
	// doubt has its copy (Relay.findPark).
	FindPark
	// WaitTenant: take one of the in-flight slots of the destination's
	// tenant (it may wait a little).
	WaitTenant

	// The steps of the shared consumer's admission (DecideAdmit).

	// LookUp: ask the store whether it has a destination this replica
	// does not know.
	LookUp
	// ReadQueue: look at the destination's queue here and its lane.
	ReadQueue
	// OpenLane: open the destination's lane on this replica.
	OpenLane
)

func (a Action) String() string {
	switch a {
	case Ack:
		return deliverylog.OutcomeDelivered
	case Retry, Park:
		return deliverylog.OutcomeRetry
	case DeadLetter:
		return deliverylog.OutcomeDeadLetter
	case HandBack:
		return deliverylog.OutcomeHandedBack
	case AckSettled:
		return "settled_before"
	case Leave:
		return deliverylog.OutcomeLeft
	case Terminate:
		return "terminated"
	case AckFiltered:
		return deliverylog.OutcomeFiltered
	case WaitRate:
		return "wait_rate"
	case ReadLog:
		return "read_log"
	case Send:
		return "send"
	case FindPark:
		return "find_park"
	case WaitTenant:
		return "wait_tenant"
	case Queue:
		return "queued"
	case Pass:
		return "passed"
	case ToLane:
		return "to_lane"
	case AckMoved:
		return "moved"
	case Split:
		return "split"
	case LookUp:
		return "look_up"
	case ReadQueue:
		return "read_queue"
	case OpenLane:
		return "open_lane"
	}
	return "unknown"
}

// Reasons an event is dead-lettered.
const (
	ReasonMaxAttempts     = "max_attempts"
	ReasonPermanentStatus = "permanent_status"
	// ReasonPermanentError: a destination of a non-HTTP kind answered with
	// an error its kind says cannot pass by retrying (no such topic,
	// credentials refused, a message too large); the attempt's error,
	// which names the target's code, says which.
	ReasonPermanentError     = "permanent_error"
	ReasonRedirect           = "redirect"
	ReasonUnknownDestination = "unknown_destination"
	ReasonBlockedAddress     = "blocked_address"
	// ReasonSkipped: an operator gave up on the event ('relay dest
	// skip-head'), typically the head of an ordered key that blocks it.
	ReasonSkipped = "skipped"
	// ReasonInvalidEvent: relay cannot turn the event into a valid HTTP
	// request (an id or a header it would send has control characters,
	// say); the letter's note names the header.
	ReasonInvalidEvent = "invalid_event"
	// ReasonCorruptParkedEntry: an entry parked in Redis that relay could
	// not read, or would not republish (not relay's event subject for its
	// destination); the letter's body is the entry as stored.
	ReasonCorruptParkedEntry = dlq.ReasonCorruptParkedEntry
	// ReasonFilterError: the destination's filter failed on the event (a
	// type error, its memory budget used up); the letter's note is why.
	// Fix the filter and replay the letter.
	ReasonFilterError = "filter_error"
	// ReasonTemplateError: the destination's body template failed on the
	// event (a missing key, a value of the wrong type, a limit); the
	// letter's note is why. Fix the template and replay the letter.
	ReasonTemplateError = "template_error"
	// ReasonSchemaMismatch: a typed event published over NATS does not
	// satisfy its type's schema in the catalog; the letter's note says
	// where. Fix the schema or the producer, and replay the letter.
	ReasonSchemaMismatch = "schema_mismatch"
)

// Reasons returns all the reasons an event is dead-lettered for.
func Reasons() []string {
	return []string{ReasonMaxAttempts, ReasonPermanentStatus, ReasonPermanentError, ReasonRedirect, ReasonUnknownDestination, ReasonBlockedAddress, ReasonSkipped, ReasonInvalidEvent, ReasonCorruptParkedEntry, ReasonFilterError, ReasonTemplateError, ReasonSchemaMismatch}
}

// Decision is what Decide chose for a delivery.
type Decision struct {
	Action Action
	Delay  time.Duration // with Retry, Park and HandBack
	// Jitter: lengthen Delay by up to a tenth at random, so that events
	// handed back together do not all come back at once (DecideAdmit).
	Jitter bool
	Reason string // with DeadLetter and Terminate
	// Note explains Reason where the reason alone does not (which header
	// made the event invalid); it becomes the dead letter's note.
	Note string
	// Effect is what the attempt says about the destination; Pause is how
	// long it asked to be paused, with PauseRequested.
	Effect Effect
	Pause  time.Duration
}

// Retryable reports whether an attempt with this result may succeed later:
// transport errors (connection refused, DNS, timeouts) and the statuses 408,
// 425, 429 and 5xx. An invalid event never is.
func (r Result) Retryable() bool {
	if r.Status == 0 {
		return r.invalid() == nil && !r.Permanent && !r.Delivered
	}
	switch {
	case r.Status == http.StatusRequestTimeout, r.Status == http.StatusTooEarly, r.Status == http.StatusTooManyRequests:
		return true
	case r.Status >= 500 && r.Status <= 599:
		return true
	}
	return false
}

// invalid returns the reason the event could not become a request, if that
// is why the attempt failed.
func (r Result) invalid() *InvalidEventError {
	if r.Status == 0 && r.Err != nil {
		if ie, ok := errors.AsType[*InvalidEventError](r.Err); ok {
			return ie
		}
	}
	return nil
}

// Attempted reports whether a request was made (whether or not a response
// came back): not for an event that could not become a request, nor for
// one the egress proxy failed to carry.
func (r Result) Attempted() bool {
	return r.Status != 0 || r.Delivered || r.Err != nil && r.invalid() == nil && !r.ProxyFailed
}

// OK reports whether the destination confirmed the attempt: a 2xx, or a
// non-HTTP kind's confirmation.
func (r Result) OK() bool { return r.Delivered || r.Status >= 200 && r.Status <= 299 }

// classStatus is the status the delivery log classes r by: 200 for a
// non-HTTP kind's confirmation (the class "2xx" is every kind's success).
func (r Result) classStatus() int {
	if r.Delivered {
		return http.StatusOK
	}
	return r.Status
}

// retryAfterHonoured reports whether r's Retry-After is the destination
// asking for a wait: with a 429 or a 503, or a non-HTTP kind's throttling.
func (r Result) retryAfterHonoured() bool {
	return r.HasRetryAfter && (r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable || r.Status == 0 && r.Err != nil)
}

// classify turns the result of attempt number attempt (1-based) under
// policy p into Ack, Retry or DeadLetter: the part of Decide that looks at
// the result alone.
func classify(res Result, attempt int, p destination.RetryPolicy, rnd *rand.Rand) Decision {
	if ie := res.invalid(); ie != nil {
		return Decision{Action: DeadLetter, Reason: ReasonInvalidEvent, Note: ie.Error()}
	}
	switch {
	case res.Blocked:
		return Decision{Action: DeadLetter, Reason: ReasonBlockedAddress}
	case res.OK():
		return Decision{Action: Ack}
	case res.Permanent:
		return Decision{Action: DeadLetter, Reason: ReasonPermanentError}
	case res.Status >= 300 && res.Status <= 399:
		return Decision{Action: DeadLetter, Reason: ReasonRedirect}
	case !res.Retryable():
		return Decision{Action: DeadLetter, Reason: ReasonPermanentStatus}
	case attempt >= p.MaxAttempts:
		return Decision{Action: DeadLetter, Reason: ReasonMaxAttempts}
	}
	if res.retryAfterHonoured() {
		return Decision{Action: Retry, Delay: min(res.RetryAfter, time.Duration(p.Max))}
	}
	return Decision{Action: Retry, Delay: p.Delay(attempt, rnd)}
}

// maxRetryAfter bounds what ParseRetryAfter returns, before the policy's cap.
const maxRetryAfter = 30 * 24 * time.Hour

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
// A date in the past means 0. Negative, fractional or garbage values are
// invalid (ok false); huge ones are clamped to 30 days.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			if ne, isNum := err.(*strconv.NumError); isNum && ne.Err == strconv.ErrRange {
				return maxRetryAfter, true
			}
			return 0, false
		}
		if n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now)
	if d < 0 {
		d = 0
	}
	return min(d, maxRetryAfter), true
}
