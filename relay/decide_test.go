package relay

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/stretchr/testify/require"
)

// Every outcome of a delivery is a row here; docs/architecture.md has the
// same table in words.
func TestDecideOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	policy := destination.RetryPolicy{Base: destination.Duration(time.Second), Max: destination.Duration(time.Minute), NoJitter: true, MaxAttempts: 3}.WithDefaults()
	dest := destination.Destination{Name: "d", Retry: policy}.WithDefaults()
	// ready is a delivery with nothing against an attempt: the log read.
	ready := func() Input {
		return Input{Known: true, Dest: dest, Now: now, Attempt: 1, NeedLog: true, LogRead: true, ParkThreshold: 30 * time.Second}
	}
	with := func(f func(*Input)) Input {
		in := ready()
		f(&in)
		return in
	}
	result := func(r Result) func(*Input) { return func(in *Input) { in.Sent, in.Result = true, r } }
	invalid := &InvalidEventError{Header: "Content-Type", Err: errors.New("control characters")}

	tests := []struct {
		name string
		in   Input
		want Decision
	}{
		// Before the attempt.
		{"the loop stops before a worker took it", Input{Stopping: true}, Decision{Action: HandBack}},
		{"the loop stops, whatever else is known", with(func(in *Input) { in.Stopping, in.Settled = true, true }), Decision{Action: HandBack}},
		{"unreadable message", Input{Unreadable: true}, Decision{Action: Terminate, Reason: "unreadable"}},
		{"ordered mark unreadable", with(func(in *Input) { in.Ordered, in.MarkUnreadable = true, true }), Decision{Action: HandBack, Delay: time.Second}},
		{"settled before (ordered mark, or parked)", with(func(in *Input) { in.Settled = true }), Decision{Action: AckSettled}},
		{"settled before, destination paused", with(func(in *Input) { in.Settled, in.Dest.PausedUntil = true, now.Add(time.Hour) }), Decision{Action: AckSettled}},
		{"filter or template cut short by a shutdown", with(func(in *Input) { in.Interrupted = true }), Decision{Action: HandBack}},
		{"template cut short by a shutdown, head of a blocked key", with(func(in *Input) {
			in.Interrupted, in.Ordered, in.Dest.OnFailure = true, true, destination.OnFailureBlock
		}), Decision{Action: HandBack}},
		{"park in doubt: look for its copy", with(func(in *Input) { in.ParkInDoubt = true }), Decision{Action: FindPark}},
		{"park in doubt, destination paused: look first", with(func(in *Input) { in.ParkInDoubt, in.Dest.PausedUntil = true, destination.Forever }), Decision{Action: FindPark}},
		{"park in doubt, its copy exists", with(func(in *Input) { in.ParkInDoubt, in.ParkLooked, in.ParkFound = true, true, true }), Decision{Action: AckSettled}},
		{"park in doubt, its copy exists, filtered out", with(func(in *Input) { in.ParkInDoubt, in.ParkLooked, in.ParkFound, in.Filtered = true, true, true, true }), Decision{Action: AckSettled}},
		{"park in doubt, look failed: waits", with(func(in *Input) { in.ParkInDoubt, in.ParkLooked, in.ParkUnknown = true, true, "refused" }), Decision{Action: HandBack, Delay: time.Second}},
		{"park in doubt, no copy: attempted", with(func(in *Input) { in.ParkInDoubt, in.ParkLooked = true, true }), Decision{Action: Send}},
		{"filtered out", with(func(in *Input) { in.Filtered = true }), Decision{Action: AckFiltered}},
		{"filtered out, destination paused", with(func(in *Input) { in.Filtered, in.Dest.PausedUntil = true, destination.Forever }), Decision{Action: AckFiltered}},
		{"filtered out, rate limited", with(func(in *Input) { in.Filtered, in.RateLimited = true, true }), Decision{Action: AckFiltered}},
		{"filtered out, settled before", with(func(in *Input) { in.Filtered, in.Settled = true, true }), Decision{Action: AckSettled}},
		{"filtered out, log to read", with(func(in *Input) { in.Filtered, in.LogRead = true, false }), Decision{Action: ReadLog}},
		{"filter failed", with(func(in *Input) { in.FilterErr = "invalid operation: string > int (1:13)" }), Decision{Action: DeadLetter, Reason: ReasonFilterError, Note: "invalid operation: string > int (1:13)"}},
		{"filter failed, head of a blocked key", with(func(in *Input) { in.FilterErr, in.Ordered, in.Dest.OnFailure = "x", true, destination.OnFailureBlock }), Decision{Action: HandBack, Delay: 30 * time.Second}},
		{"filter failed, head of a skipping key", with(func(in *Input) { in.FilterErr, in.Ordered, in.Dest.OnFailure = "x", true, destination.OnFailureSkip }), Decision{Action: DeadLetter, Reason: ReasonFilterError, Note: "x"}},
		{"paused", with(func(in *Input) { in.Dest.PausedUntil = now.Add(3 * time.Second) }), Decision{Action: HandBack, Delay: 3 * time.Second}},
		{"paused long: back within 5s (a resume seen late)", with(func(in *Input) { in.Dest.PausedUntil = destination.Forever }), Decision{Action: HandBack, Delay: 5 * time.Second}},
		{"paused 10s: back within 5s", with(func(in *Input) { in.Dest.PausedUntil = now.Add(10 * time.Second) }), Decision{Action: HandBack, Delay: 5 * time.Second}},
		{"circuit probe taken", with(func(in *Input) { in.ProbeTaken = true }), Decision{Action: HandBack, Delay: time.Second}},
		{"rate limit not asked", with(func(in *Input) { in.RateLimited = true }), Decision{Action: WaitRate}},
		{"rate limit says wait", with(func(in *Input) { in.RateLimited, in.RateAsked, in.RateWait = true, true, 7*time.Second }), Decision{Action: HandBack, Delay: 7 * time.Second}},
		{"rate limit allows", with(func(in *Input) { in.RateLimited, in.RateAsked = true, true }), Decision{Action: Send}},
		{"tenant's in-flight slots not asked", with(func(in *Input) { in.TenantLimited = true }), Decision{Action: WaitTenant}},
		{"rate limit first, then the tenant's slots", with(func(in *Input) { in.RateLimited, in.TenantLimited = true, true }), Decision{Action: WaitRate}},
		{"tenant's slots all taken", with(func(in *Input) { in.TenantLimited, in.TenantAsked, in.TenantWait = true, true, 2*time.Second }), Decision{Action: HandBack, Delay: 2 * time.Second}},
		{"tenant's slot taken", with(func(in *Input) { in.TenantLimited, in.TenantAsked = true, true }), Decision{Action: Send}},
		{"filtered out, tenant limited", with(func(in *Input) { in.Filtered, in.TenantLimited = true, true }), Decision{Action: AckFiltered}},
		{"log to read", with(func(in *Input) { in.LogRead = false }), Decision{Action: ReadLog}},
		{"first delivery: no log", with(func(in *Input) { in.NeedLog, in.LogRead = false, false }), Decision{Action: Send}},
		{"skipped by an operator", with(func(in *Input) { in.Skip = "wrong payload" }), Decision{Action: DeadLetter, Reason: ReasonSkipped}},
		{"unknown destination", Input{Now: now, Attempt: 1}, Decision{Action: DeadLetter, Reason: ReasonUnknownDestination}},
		{"attempts used up before", with(func(in *Input) { in.Attempt = 4 }), Decision{Action: DeadLetter, Reason: ReasonMaxAttempts}},
		{"blocked ordered key: attempts never run out", with(func(in *Input) { in.Attempt, in.Ordered, in.Dest.OnFailure = 4, true, destination.OnFailureBlock }), Decision{Action: Send}},
		{"body template failed", with(func(in *Input) { in.TemplateErr = `map has no entry for key "reason"` }), Decision{Action: DeadLetter, Reason: ReasonTemplateError, Note: `map has no entry for key "reason"`}},
		{"body template failed, head of a blocked key", with(func(in *Input) { in.TemplateErr, in.Ordered, in.Dest.OnFailure = "x", true, destination.OnFailureBlock }), Decision{Action: HandBack, Delay: 30 * time.Second}},
		{"body template failed, head of a skipping key", with(func(in *Input) { in.TemplateErr, in.Ordered, in.Dest.OnFailure = "x", true, destination.OnFailureSkip }), Decision{Action: DeadLetter, Reason: ReasonTemplateError, Note: "x"}},
		{"body template failed, skipped by an operator", with(func(in *Input) { in.TemplateErr, in.Skip = "x", "wrong payload" }), Decision{Action: DeadLetter, Reason: ReasonSkipped}},
		{"ready", ready(), Decision{Action: Send}},
		{"egress proxy failed: no attempt used", with(func(in *Input) { in.ProxyFailed = "egress proxy 10.0.0.9:3128: connection refused" }), Decision{Action: HandBack, Delay: 5 * time.Second, Jitter: true}},
		{"egress proxy failed at the last attempt", with(func(in *Input) { in.ProxyFailed, in.Attempt = "407", 3 }), Decision{Action: HandBack, Delay: 5 * time.Second, Jitter: true}},
		{"egress proxy failed, head of a blocked key", with(func(in *Input) {
			in.ProxyFailed, in.Ordered, in.Dest.OnFailure = "refused", true, destination.OnFailureBlock
		}), Decision{Action: HandBack, Delay: 5 * time.Second, Jitter: true}},
		{"egress proxy failed, the circuit's probe", with(func(in *Input) { in.ProxyFailed, in.Probing = "refused", true }), Decision{Action: HandBack, Delay: 5 * time.Second, Jitter: true}},

		// After the attempt.
		{"2xx", with(result(Result{Status: 204})), Decision{Action: Ack, Effect: Healthy}},
		{"5xx", with(result(Result{Status: 503})), Decision{Action: Retry, Delay: time.Second, Effect: Failing}},
		{"transport error", with(result(Result{Err: errors.New("connection refused")})), Decision{Action: Retry, Delay: time.Second, Effect: Failing}},
		{"5xx at the last attempt", with(func(in *Input) { in.Attempt = 3; in.Sent, in.Result = true, Result{Status: 500} }), Decision{Action: DeadLetter, Reason: ReasonMaxAttempts, Effect: Failing}},
		{"Retry-After: the destination is paused", with(result(Result{Status: 429, RetryAfter: 5 * time.Second, HasRetryAfter: true})), Decision{Action: Retry, Delay: 5 * time.Second, Effect: PauseRequested, Pause: 5 * time.Second}},
		{"Retry-After capped by the policy", with(result(Result{Status: 503, RetryAfter: time.Hour, HasRetryAfter: true})), Decision{Action: Retry, Delay: time.Minute, Effect: PauseRequested, Pause: time.Minute}},
		{"410, disable", with(result(Result{Status: http.StatusGone})), Decision{Action: Retry, Delay: time.Minute, Effect: Disabled}},
		{"410, dead-letter", with(func(in *Input) {
			in.Dest.OnGone = destination.OnGoneDeadLetter
			in.Sent, in.Result = true, Result{Status: http.StatusGone}
		}), Decision{Action: DeadLetter, Reason: ReasonPermanentStatus}},
		{"4xx", with(result(Result{Status: 400})), Decision{Action: DeadLetter, Reason: ReasonPermanentStatus}},
		{"redirect", with(result(Result{Status: 302})), Decision{Action: DeadLetter, Reason: ReasonRedirect}},
		{"blocked address", with(result(Result{Blocked: true, Err: errors.New("blocked")})), Decision{Action: DeadLetter, Reason: ReasonBlockedAddress}},
		{"blocked address, head of a blocked key", with(func(in *Input) {
			in.Ordered, in.Dest.OnFailure = true, destination.OnFailureBlock
			in.Sent, in.Result = true, Result{Blocked: true, Err: errors.New("blocked")}
		}), Decision{Action: Retry, Delay: time.Second}},
		{"blocked address, head of a skipping key", with(func(in *Input) {
			in.Ordered, in.Dest.OnFailure = true, destination.OnFailureSkip
			in.Sent, in.Result = true, Result{Blocked: true, Err: errors.New("blocked")}
		}), Decision{Action: DeadLetter, Reason: ReasonBlockedAddress}},
		{"invalid event", with(result(Result{Err: invalid})), Decision{Action: DeadLetter, Reason: ReasonInvalidEvent, Note: invalid.Error()}},

		// A destination of another kind than HTTP: no status.
		{"kind: confirmed", with(result(Result{Delivered: true})), Decision{Action: Ack, Effect: Healthy}},
		{"kind: may pass", with(result(Result{Err: errors.New("kafka: NOT_LEADER_FOR_PARTITION"), Code: "NOT_LEADER_FOR_PARTITION"})), Decision{Action: Retry, Delay: time.Second, Effect: Failing}},
		{"kind: may pass, at the last attempt", with(func(in *Input) { in.Attempt = 3; in.Sent, in.Result = true, Result{Err: errors.New("down")} }), Decision{Action: DeadLetter, Reason: ReasonMaxAttempts, Effect: Failing}},
		{"kind: permanent", with(result(Result{Err: errors.New("kafka: UNKNOWN_TOPIC_OR_PARTITION"), Permanent: true})), Decision{Action: DeadLetter, Reason: ReasonPermanentError}},
		{"kind: permanent, head of a blocked key", with(func(in *Input) {
			in.Ordered, in.Dest.OnFailure = true, destination.OnFailureBlock
			in.Sent, in.Result = true, Result{Err: errors.New("too large"), Permanent: true}
		}), Decision{Action: DeadLetter, Reason: ReasonPermanentError}},
		{"kind: throttled, with when", with(result(Result{Err: errors.New("ThrottlingException"), RetryAfter: 3 * time.Second, HasRetryAfter: true})), Decision{Action: Retry, Delay: 3 * time.Second, Effect: PauseRequested, Pause: 3 * time.Second}},
		{"kind: throttled briefly: no pause", with(result(Result{Err: errors.New("slow down"), RetryAfter: 500 * time.Millisecond, HasRetryAfter: true})), Decision{Action: Retry, Delay: 500 * time.Millisecond, Effect: Failing}},
		{"kind: confirmed as relay stopped", with(func(in *Input) { in.Cancelled = true; in.Sent, in.Result = true, Result{Delivered: true} }), Decision{Action: Ack, Effect: Healthy}},
		{"kind: cut short by a shutdown", with(func(in *Input) {
			in.Cancelled = true
			in.Sent, in.Result = true, Result{Err: errors.New("context canceled")}
		}), Decision{Action: HandBack}},
		{"kind: confirmed after AckWait, unordered", with(func(in *Input) { in.Late = true; in.Sent, in.Result = true, Result{Delivered: true} }), Decision{Action: Ack, Effect: Healthy}},
		{"kind: failed after AckWait", with(func(in *Input) { in.Late = true; in.Sent, in.Result = true, Result{Err: errors.New("down")} }), Decision{Action: Leave}},
		{"long wait, Redis there: park", with(func(in *Input) {
			in.CanPark, in.Attempt = true, 2
			in.Sent, in.Result = true, Result{Status: 503, RetryAfter: time.Minute, HasRetryAfter: true}
		}), Decision{Action: Park, Delay: time.Minute, Effect: PauseRequested, Pause: time.Minute}},
		{"short wait, Redis there: JetStream", with(func(in *Input) { in.CanPark = true; in.Sent, in.Result = true, Result{Status: 503} }), Decision{Action: Retry, Delay: time.Second, Effect: Failing}},
		{"cut short by a shutdown", with(func(in *Input) {
			in.Cancelled = true
			in.Sent, in.Result = true, Result{Err: errors.New("context canceled")}
		}), Decision{Action: HandBack}},
		{"answered, then shut down", with(func(in *Input) { in.Cancelled = true; in.Sent, in.Result = true, Result{Status: 200} }), Decision{Action: Ack, Effect: Healthy}},
		{"failed after AckWait", with(func(in *Input) { in.Late = true; in.Sent, in.Result = true, Result{Status: 503} }), Decision{Action: Leave}},
		{"delivered after AckWait", with(func(in *Input) { in.Late = true; in.Sent, in.Result = true, Result{Status: 200} }), Decision{Action: Ack, Effect: Healthy}},
		{"head of a key delivered after AckWait", with(func(in *Input) { in.Late, in.Ordered = true, true; in.Sent, in.Result = true, Result{Status: 200} }), Decision{Action: Leave}},
		{"unheard of for AckWait before its attempt", with(func(in *Input) { in.Late = true }), Decision{Action: Leave}},
		{"head of a key unheard of for AckWait before its attempt", with(func(in *Input) { in.Late, in.Ordered, in.Dest.OnFailure = true, true, destination.OnFailureBlock }), Decision{Action: Leave}},

		// Decided again on what carrying a decision out taught.
		{"failed, skipped by an operator meanwhile", with(func(in *Input) { in.Skip = "ops"; in.Sent, in.Result = true, Result{Status: 503} }), Decision{Action: DeadLetter, Reason: ReasonSkipped}},
		{"failed, a long wait, skipped meanwhile: not parked", with(func(in *Input) {
			in.CanPark, in.Skip = true, "ops"
			in.Sent, in.Result = true, Result{Status: 503, RetryAfter: time.Minute, HasRetryAfter: true}
		}), Decision{Action: DeadLetter, Reason: ReasonSkipped}},
		{"410, disable, skipped meanwhile", with(func(in *Input) { in.Skip = "ops"; in.Sent, in.Result = true, Result{Status: http.StatusGone} }), Decision{Action: DeadLetter, Reason: ReasonSkipped}},
		{"head of a blocked key failed, skipped meanwhile", with(func(in *Input) {
			in.Ordered, in.Dest.OnFailure, in.Attempt, in.Skip = true, destination.OnFailureBlock, 9, "ops"
			in.Sent, in.Result = true, Result{Status: 503}
		}), Decision{Action: DeadLetter, Reason: ReasonSkipped}},
		{"delivered, skipped meanwhile", with(func(in *Input) { in.Skip = "ops"; in.Sent, in.Result = true, Result{Status: 200} }), Decision{Action: Ack, Effect: Healthy}},
		{"failed for good, skipped meanwhile", with(func(in *Input) { in.Skip = "ops"; in.Sent, in.Result = true, Result{Status: 400} }), Decision{Action: DeadLetter, Reason: ReasonPermanentStatus}},
		{"long wait, the park failed: JetStream", with(func(in *Input) {
			in.CanPark, in.ParkFailed, in.Attempt = true, true, 2
			in.Sent, in.Result = true, Result{Status: 503, RetryAfter: time.Minute, HasRetryAfter: true}
		}), Decision{Action: Retry, Delay: time.Minute, Effect: PauseRequested, Pause: time.Minute}},
		{"dead letter cannot be stored", with(func(in *Input) { in.DeadLetterFailed = true; in.Sent, in.Result = true, Result{Status: 400} }), Decision{Action: DeadLetter, Reason: ReasonDeadLetterFailed}},
		{"dead letter cannot be stored, the last attempt", with(func(in *Input) {
			in.Attempt, in.DeadLetterFailed = 3, true
			in.Sent, in.Result = true, Result{Status: 500}
		}), Decision{Action: DeadLetter, Reason: ReasonDeadLetterFailed, Effect: Failing}},
		{"dead letter cannot be stored, invalid event: no note", with(func(in *Input) { in.DeadLetterFailed = true; in.Sent, in.Result = true, Result{Err: invalid} }), Decision{Action: DeadLetter, Reason: ReasonDeadLetterFailed}},
		{"dead letter cannot be stored, skipped meanwhile", with(func(in *Input) {
			in.Skip, in.DeadLetterFailed = "ops", true
			in.Sent, in.Result = true, Result{Status: 503}
		}), Decision{Action: DeadLetter, Reason: ReasonDeadLetterFailed}},
		{"dead letter cannot be stored, skipped before the attempt", with(func(in *Input) { in.Skip, in.DeadLetterFailed = "ops", true }), Decision{Action: DeadLetter, Reason: ReasonDeadLetterFailed}},
		{"dead letter cannot be stored, unknown destination", Input{Now: now, Attempt: 1, DeadLetterFailed: true}, Decision{Action: DeadLetter, Reason: ReasonDeadLetterFailed}},
	}
	outcomes := map[Action]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.in.Rand = rand.New(rand.NewPCG(1, 2))
			require.Equal(t, tc.want, Decide(tc.in))
		})
		outcomes[tc.want.Action] = true
	}
	for _, a := range []Action{Ack, Retry, DeadLetter, Park, HandBack, AckSettled, Leave, Terminate, AckFiltered, WaitRate, WaitTenant, ReadLog, FindPark, Send} {
		require.True(t, outcomes[a], "no row decides %s", a)
	}
}

// A park that failed is decided on again, and the event waits in JetStream
// as long as the park was for: the same draws of the jitter.
func TestDecideAfterAFailedParkKeepsItsWait(t *testing.T) {
	t.Parallel()
	policy := destination.RetryPolicy{Base: destination.Duration(time.Minute), Max: destination.Duration(time.Hour), Jitter: 0.5, MaxAttempts: 10}.WithDefaults()
	for _, seed := range [][2]uint64{{1, 2}, {3, 4}, {5, 6}} {
		in := Input{Known: true, Dest: destination.Destination{Name: "d", Retry: policy}.WithDefaults(), Attempt: 3, CanPark: true, ParkThreshold: time.Second,
			Sent: true, Result: Result{Status: 503}, seed: seed}
		park := Decide(in)
		require.Equal(t, Park, park.Action)
		in.ParkFailed = true
		retry := Decide(in)
		require.Equal(t, Retry, retry.Action)
		require.Equal(t, park.Delay, retry.Delay, "seed %v", seed)
	}
}

// Every outcome of the shared consumer's admission is a row here;
// docs/architecture.md has the same table in words.
func TestDecideAdmitOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dest := destination.Destination{Name: "d", Shared: true, StartSeq: 10}.WithDefaults()
	// event is an event of a known shared destination, its queue read:
	// room for it, its lane closed.
	event := func(f func(*AdmitInput)) AdmitInput {
		in := AdmitInput{Known: true, Dest: dest, Seq: 20, Now: now, QueueRead: true, Held: 3, Room: 10}
		f(&in)
		return in
	}
	share := func(f func(*AdmitInput)) AdmitInput {
		return event(func(in *AdmitInput) { in.Share, in.Seq = true, 0; f(in) })
	}
	back := func(d time.Duration) Decision { return Decision{Action: HandBack, Delay: d, Jitter: true} }
	full := func(in *AdmitInput) { in.Held = 10 }
	slow := func(in *AdmitInput) { full(in); in.Slow = true }
	paused := func(in *AdmitInput) { in.Dest.PausedUntil = now.Add(10 * time.Second) }

	tests := []struct {
		name string
		in   AdmitInput
		want Decision
	}{
		// An event.
		{"unreadable: a worker terminates it", AdmitInput{Unreadable: true}, Decision{Action: Queue}},
		{"unknown: look it up", AdmitInput{Seq: 20, Now: now}, Decision{Action: LookUp}},
		{"unknown, lookups at their bound: back", AdmitInput{LookupsFull: true}, back(2 * time.Second)},
		{"unknown, in the store (not applied here yet): back", AdmitInput{LookedUp: true, InStore: true}, back(2 * time.Second)},
		{"unknown, not in the store: passed on to the unknown-destination check", AdmitInput{LookedUp: true}, Decision{Action: Pass}},
		{"not shared: its own consumer has it", event(func(in *AdmitInput) { in.Dest.Shared = false }), Decision{Action: Pass}},
		{"older than its destination", event(func(in *AdmitInput) { in.Seq = 9 }), Decision{Action: Pass}},
		{"Relay-Not-Before to come: back until then", event(func(in *AdmitInput) { in.NotBefore = now.Add(5 * time.Second) }), Decision{Action: HandBack, Delay: 5 * time.Second}},
		{"Relay-Not-Before passed", event(func(in *AdmitInput) { in.NotBefore = now.Add(-time.Second) }), Decision{Action: Queue}},
		{"Relay-Not-Before to come, not shared", event(func(in *AdmitInput) { in.Dest.Shared, in.NotBefore = false, now.Add(time.Hour) }), Decision{Action: Pass}},
		{"queue not read yet", event(func(in *AdmitInput) { in.QueueRead = false }), Decision{Action: ReadQueue}},
		{"room in its queue", event(func(*AdmitInput) {}), Decision{Action: Queue}},
		{"queue full, keeping up: back", event(full), back(time.Second)},
		{"queue full, slow: open its lane", event(slow), Decision{Action: OpenLane}},
		{"queue full, slow, lane opened: to its lane", event(func(in *AdmitInput) { slow(in); in.LaneAsked, in.LaneOpen = true, true }), Decision{Action: ToLane}},
		{"queue full, slow, lane cannot open: back", event(func(in *AdmitInput) { slow(in); in.LaneAsked = true }), back(time.Second)},
		{"queue full, slow, lane opened, moves at their bound: back", event(func(in *AdmitInput) { slow(in); in.LaneAsked, in.LaneOpen, in.MovesFull = true, true, true }), back(time.Second)},
		{"lane open: to its lane", event(func(in *AdmitInput) { in.LaneOpen = true }), Decision{Action: ToLane}},
		{"lane open, moves at their bound: back", event(func(in *AdmitInput) { in.LaneOpen, in.MovesFull = true, true }), back(time.Second)},
		{"lane open, older than its destination", event(func(in *AdmitInput) { in.LaneOpen, in.Seq = true, 9 }), Decision{Action: Pass}},
		{"lane open, Relay-Not-Before to come: back until then", event(func(in *AdmitInput) { in.LaneOpen, in.NotBefore = true, now.Add(5*time.Second) }), Decision{Action: HandBack, Delay: 5 * time.Second}},
		{"queue full, Relay-Not-Before to come: back until then", event(func(in *AdmitInput) { slow(in); in.NotBefore = now.Add(5 * time.Second) }), Decision{Action: HandBack, Delay: 5 * time.Second}},
		{"Relay-Not-Before to come: back before its queue is read", event(func(in *AdmitInput) { in.QueueRead, in.NotBefore = false, now.Add(5*time.Second) }), Decision{Action: HandBack, Delay: 5 * time.Second}},
		{"paused: open its lane", event(paused), Decision{Action: OpenLane}},
		{"paused, lane open: to its lane", event(func(in *AdmitInput) { paused(in); in.LaneOpen = true }), Decision{Action: ToLane}},
		{"paused, lane open, moves at their bound: back", event(func(in *AdmitInput) { paused(in); in.LaneOpen, in.MovesFull = true, true }), back(time.Second)},
		{"paused, Relay-Not-Before to come: back until then", event(func(in *AdmitInput) { paused(in); in.NotBefore = now.Add(5 * time.Second) }), Decision{Action: HandBack, Delay: 5 * time.Second}},
		{"paused, queue full: its lane, not back", event(func(in *AdmitInput) { paused(in); slow(in); in.LaneAsked, in.LaneOpen = true, true }), Decision{Action: ToLane}},
		{"paused, older than its destination", event(func(in *AdmitInput) { paused(in); in.Seq = 9 }), Decision{Action: Pass}},
		{"paused, lane cannot open: back until the pause ends", event(func(in *AdmitInput) { paused(in); in.LaneAsked = true }), back(10 * time.Second)},
		{"paused long, lane cannot open: back within a minute", event(func(in *AdmitInput) { in.Dest.PausedUntil, in.LaneAsked = destination.Forever, true }), back(time.Minute)},
		{"moved to its lane: acked", event(func(in *AdmitInput) { in.LaneOpen, in.Moved = true, true }), Decision{Action: AckMoved}},
		{"move failed: back", event(func(in *AdmitInput) { in.LaneOpen, in.MoveFailed = true, true }), back(time.Second)},
		// A fan-out message, and its shares.
		{"fan-out message without destinations", AdmitInput{Fan: true, Unreadable: true}, Decision{Action: Terminate}},
		{"fan-out message, its shares done", AdmitInput{Fan: true, SharesDone: true}, Decision{Action: AckMoved}},
		{"fan-out message, a share not split off: back", AdmitInput{Fan: true, SharesDone: true, SplitFailed: true}, back(time.Second)},
		{"share: room in its queue", share(func(*AdmitInput) {}), Decision{Action: Queue}},
		{"share, queue not read yet", share(func(in *AdmitInput) { in.QueueRead = false }), Decision{Action: ReadQueue}},
		{"share of a message delivered again: split off", share(func(in *AdmitInput) { in.Redelivered = true }), Decision{Action: Split}},
		{"share of an unknown destination: split off", AdmitInput{Share: true, Now: now}, Decision{Action: Split}},
		{"share of a destination not shared: split off", share(func(in *AdmitInput) { in.Dest.Shared = false }), Decision{Action: Split}},
		{"share, destination paused: split off", share(paused), Decision{Action: Split}},
		{"share, lane open: split off", share(func(in *AdmitInput) { in.LaneOpen = true }), Decision{Action: Split}},
		{"share, queue full, keeping up: queued", share(full), Decision{Action: Queue}},
		{"share, queue full, slow: open its lane", share(slow), Decision{Action: OpenLane}},
		{"share, queue full, slow, lane opened: split off", share(func(in *AdmitInput) { slow(in); in.LaneAsked, in.LaneOpen = true, true }), Decision{Action: Split}},
		{"share, queue full, slow, lane cannot open: queued", share(func(in *AdmitInput) { slow(in); in.LaneAsked = true }), Decision{Action: Queue}},
		{"share, twice its room: split off", share(func(in *AdmitInput) { in.Held = 20 }), Decision{Action: Split}},
		{"share, twice its room, slow, lane cannot open: split off", share(func(in *AdmitInput) { slow(in); in.Held, in.LaneAsked = 20, true }), Decision{Action: Split}},
		{"share of a message delivered again, its lane open: split off", share(func(in *AdmitInput) { in.Redelivered, in.LaneOpen = true, true }), Decision{Action: Split}},
	}
	outcomes := map[Action]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, DecideAdmit(tc.in))
		})
		outcomes[tc.want.Action] = true
	}
	for _, a := range []Action{Queue, Pass, ToLane, AckMoved, Split, HandBack, Terminate, LookUp, ReadQueue, OpenLane} {
		require.True(t, outcomes[a], "no row decides %s", a)
	}
}
