package relay

import (
	"github.com/relaydev/relay/destination"
	"math"
	"math/rand/v2"
	"net/http"
	"time"
)

// Input is everything Decide needs to know about one delivery of an event:
// what came with the message, the destination's policy and state, and, as
// relay learns them, the rate limit's answer, the event's attempt log and
// the attempt's result. handle fills it in that order and asks Decide after
// each step; a field not filled in yet says nothing against an attempt.
type Input struct {
	// Stopping: the pull loop stops, and no worker started on the message
	// (it was queued, or on its way): nothing is known of it yet.
	Stopping bool
	// Unreadable: the message is not an event relay can read.
	Unreadable bool
	// Ordered: the event heads an ordered key. MarkUnreadable: its
	// partition's mark could not be read, so whether it was settled before
	// is not known.
	Ordered        bool
	MarkUnreadable bool
	// Settled: the event was settled before and came back only because its
	// ack was lost (an ordered partition's mark, or its attempt log says it
	// was parked).
	Settled bool
	// ParkInDoubt: the attempt log says relay began to park the event from
	// this message and never recorded that Redis took it (a crash came
	// between). ParkLooked: relay looked for its park. ParkFound: the
	// event has its copy, parked in Redis or republished from there, and
	// this message must not be attempted. ParkUnknown: looking failed
	// (Redis or NATS did not answer); it says why.
	ParkInDoubt bool
	ParkLooked  bool
	ParkFound   bool
	ParkUnknown string

	// Known: the destination exists; Dest is it, with its defaults.
	Known bool
	Dest  destination.Destination
	// Filtered: the destination's filter turned the event down.
	// FilterErr: evaluating the filter failed; it says why.
	Filtered  bool
	FilterErr string
	// Now is when the delivery is decided.
	Now time.Time
	// ProbeTaken: the destination's circuit is open and another worker of
	// this replica holds its probe. Probing: this delivery is the probe.
	ProbeTaken bool
	Probing    bool

	// RateLimited: the destination has a rate limit, RateAsked that the
	// limit was asked, and RateWait is how long to hand the event back for
	// when the limit did not allow an attempt soon enough (0: it did).
	RateLimited bool
	RateAsked   bool
	RateWait    time.Duration
	// TenantLimited: the destination's tenant bounds its attempts in
	// flight, TenantAsked that a slot was asked for, and TenantWait is how
	// long to hand the event back for when none came free soon enough (0:
	// one did, held until the delivery ends).
	TenantLimited bool
	TenantAsked   bool
	TenantWait    time.Duration

	// NeedLog: the event may have an attempt log (a redelivery, a copy from
	// Redis, an event in retry when relay started). LogRead: it was read.
	NeedLog bool
	LogRead bool
	// Attempt is the number of this attempt: the attempts recorded so far,
	// plus one. Skip is an operator's reason to give the event up, read
	// with the log or, after a failed attempt, found as the failure was
	// recorded (an operator skipped the event while the attempt ran).
	Attempt int
	Skip    string

	// CanPark: Redis takes long waits, and this event may leave JetStream
	// (not the head of an ordered key). ParkThreshold is the shortest wait
	// parked. ParkFailed: relay tried to park the event after this
	// attempt, and could not (Redis did not take it, or the event could
	// not come back from there).
	CanPark       bool
	ParkThreshold time.Duration
	ParkFailed    bool

	// TemplateErr: rendering the destination's body template for the
	// attempt failed; it says why. No request was made.
	TemplateErr string

	// ProxyFailed: the egress proxy failed to carry the attempt (it is
	// down, refused the tunnel...); it says why. The request never reached
	// the destination: no attempt was made.
	ProxyFailed string

	// Interrupted: a shutdown cut the evaluation of the destination's
	// filter or body template short, before any attempt.
	Interrupted bool

	// Sent: the attempt was made, and Result is what it came back with.
	// Cancelled: a shutdown cut it short. Late: JetStream heard nothing of
	// the event from this replica for its AckWait (the process was
	// stopped or paused as long), so it may have handed the event to
	// another worker: before the attempt, or by its end.
	Sent      bool
	Result    Result
	Cancelled bool
	Late      bool

	// DeadLetterFailed: relay tried to dead-letter the event, and its dead
	// letter cannot be stored for a reason retrying does not change
	// (dlq.ErrPermanent).
	DeadLetterFailed bool

	// Rand jitters retry waits. Optional: nil uses the global source, or
	// seed.
	Rand *rand.Rand
	// seed, when not zero and Rand is nil, seeds the draws of each Decide:
	// asked again after a park that failed, Decide gives its Retry the
	// wait the park had. handle sets it after a failed attempt.
	seed [2]uint64
}

// pausedHandBack is the longest an event of a paused destination is
// handed back for: a resume seen late by this replica delays it no more.
const pausedHandBack = 5 * time.Second

// proxyWait is how long an event waits, handed back, when the egress
// proxy failed to carry its attempt.
const proxyWait = 5 * time.Second

// configErrorWait is how long the head of a blocked ordered key waits before
// its filter is evaluated, or its body template rendered, again after it
// failed.
const configErrorWait = 30 * time.Second

// Effect is what an attempt's outcome says about its destination, for the
// circuit breaker and pauses.
type Effect int

// Effects.
const (
	// NoEffect: nothing about the destination (no request was made, or
	// the event was at fault).
	NoEffect Effect = iota
	// Healthy: a 2xx. The breaker's count of failures starts again, and an
	// open circuit closes.
	Healthy
	// Failing: a failure the destination is to blame for. It counts toward
	// the breaker's threshold; a failed probe opens the circuit again.
	Failing
	// PauseRequested: the destination asked for a pause (429 or 503 with a
	// Retry-After of a second or more): it is paused for Decision.Pause.
	PauseRequested
	// Disabled: the destination answered 410 Gone and its policy is to
	// disable it: paused until an operator resumes it.
	Disabled
)

// Decide turns what relay knows of a delivery into what to do with it. It is
// the one place where that is decided, and it is pure: the same input gives
// the same decision (with a seeded Rand).
//
// Before the attempt it returns a decision that ends the delivery without
// one, or one of the steps WaitRate, ReadLog, FindPark and Send, which ask
// for the next thing to learn. Once Sent is set it decides on the result.
// What carrying a decision out may teach (an operator's skip mark found as
// a failure is recorded, a park that failed, a dead letter that cannot be
// stored) is decided on by Decide again: Skip, ParkFailed and
// DeadLetterFailed.
func Decide(in Input) Decision {
	dec := decide(in)
	if dec.Action == DeadLetter && in.DeadLetterFailed {
		// Coming back would not help: attempted again and again, never
		// dead-lettered. The event is given up without its letter, and
		// stays in the event log until its retention ends.
		dec.Reason, dec.Note = ReasonDeadLetterFailed, ""
	}
	return dec
}

// decide is Decide but for a dead letter that cannot be stored.
func decide(in Input) Decision {
	switch {
	case in.Stopping:
		// Back at once: another replica, or this one started again, has
		// it now rather than after AckWait.
		return Decision{Action: HandBack}
	case in.Unreadable:
		return Decision{Action: Terminate, Reason: "unreadable"}
	case in.MarkUnreadable:
		// Whether the head was delivered before is not known: it waits.
		return Decision{Action: HandBack, Delay: time.Second}
	case in.Settled, in.ParkInDoubt && in.ParkFound:
		return Decision{Action: AckSettled}
	case in.Interrupted:
		// A shutdown cut the filter or the template short: the event is
		// not at fault, and nothing was sent.
		return Decision{Action: HandBack}
	case in.ParkInDoubt && in.ParkUnknown != "":
		// Whether its copy exists is not known: it waits, unattempted.
		return Decision{Action: HandBack, Delay: time.Second}
	case in.ParkInDoubt && !in.ParkLooked:
		return Decision{Action: FindPark}
	}
	if in.Known && (in.Filtered || in.FilterErr != "") {
		// Not for this destination, paused or not: no attempt, no rate
		// limit used up.
		switch {
		case in.NeedLog && !in.LogRead:
			// Its log may say it was settled before (parked, and its
			// ack lost), and has the attempts made so far.
			return Decision{Action: ReadLog}
		case in.Filtered:
			return Decision{Action: AckFiltered}
		case in.Ordered && in.Dest.OnFailure == destination.OnFailureBlock:
			// The head of a blocked key waits for the filter to be
			// fixed: nothing overtakes it.
			return Decision{Action: HandBack, Delay: configErrorWait}
		}
		return Decision{Action: DeadLetter, Reason: ReasonFilterError, Note: in.FilterErr}
	}
	if in.Known {
		d := in.Dest
		switch {
		case in.Now.Before(d.PausedUntil):
			// Paused (its consumer is paused too; this event was handed
			// out before, or after a resume this replica has not seen
			// yet): back to JetStream without an attempt, for a short
			// while, so that a resume is not missed by a minute.
			return Decision{Action: HandBack, Delay: min(d.PausedUntil.Sub(in.Now), pausedHandBack)}
		case in.ProbeTaken:
			// The circuit's pause is over and another worker probes.
			return Decision{Action: HandBack, Delay: time.Second}
		case in.RateLimited && !in.RateAsked:
			return Decision{Action: WaitRate}
		case in.RateWait > 0:
			return Decision{Action: HandBack, Delay: in.RateWait}
		case in.TenantLimited && !in.TenantAsked:
			return Decision{Action: WaitTenant}
		case in.TenantWait > 0:
			return Decision{Action: HandBack, Delay: in.TenantWait}
		}
	}
	if in.NeedLog && !in.LogRead {
		return Decision{Action: ReadLog}
	}
	policy := in.Dest.Retry
	if in.Ordered && in.Dest.OnFailure == destination.OnFailureBlock {
		// The head of a blocked key is retried until it is delivered.
		policy.MaxAttempts = math.MaxInt32
	}
	if !in.Sent {
		switch {
		case in.Late:
			// Another worker may have it, and may have settled it and
			// the events after it of its key: sending now would repeat
			// it, perhaps after a later one. JetStream hands it out
			// again if nobody settled it.
			return Decision{Action: Leave}
		case in.ProxyFailed != "":
			// The proxy's failure, not the destination's: no attempt
			// used, nothing for its breaker; it waits for the proxy.
			return Decision{Action: HandBack, Delay: proxyWait, Jitter: true}
		case in.Skip != "":
			return Decision{Action: DeadLetter, Reason: ReasonSkipped}
		case !in.Known:
			return Decision{Action: DeadLetter, Reason: ReasonUnknownDestination}
		case in.Attempt > policy.MaxAttempts:
			// A previous run gave up and crashed before the event was
			// terminated (or the policy changed): do not send again.
			return Decision{Action: DeadLetter, Reason: ReasonMaxAttempts}
		case in.TemplateErr != "" && in.Ordered && in.Dest.OnFailure == destination.OnFailureBlock:
			// As for a failed filter: the key waits for the template to
			// be fixed, nothing overtakes its head.
			return Decision{Action: HandBack, Delay: configErrorWait}
		case in.TemplateErr != "":
			return Decision{Action: DeadLetter, Reason: ReasonTemplateError, Note: in.TemplateErr}
		}
		return Decision{Action: Send}
	}
	res := in.Result
	switch {
	case in.Cancelled && res.Status == 0 && !res.Delivered:
		// Shut down mid-attempt: back without counting it (a kind's
		// confirmation that came as it stopped is a delivery).
		return Decision{Action: HandBack}
	case in.Late && !res.OK():
		// Stopped past AckWait (SIGSTOP, a long pause): JetStream handed
		// the event to another worker; recording or nak'ing now would only
		// disturb it.
		return Decision{Action: Leave}
	case in.Late && in.Ordered:
		// Delivered, but another worker may be sending it too: acking now
		// would let the next event of its key go while that copy is on
		// its way, and perhaps arrives after it. That worker settles it.
		return Decision{Action: Leave}
	}
	rnd := in.Rand
	if rnd == nil && in.seed != [2]uint64{} {
		rnd = rand.New(rand.NewPCG(in.seed[0], in.seed[1]))
	}
	dec := classify(res, in.Attempt, policy, rnd)
	dec.Effect = effectOf(res, in.Dest)
	switch {
	case dec.Effect == Disabled:
		// Gone for good, says the destination: it is disabled, and the
		// event kept for when an operator resumes it.
		dec.Action, dec.Delay, dec.Reason = Retry, time.Minute, ""
	case dec.Effect == PauseRequested:
		dec.Pause = min(res.RetryAfter, time.Duration(in.Dest.Retry.Max))
	case dec.Reason == ReasonBlockedAddress && in.Ordered && in.Dest.OnFailure == destination.OnFailureBlock:
		// The address is the destination's, not the event's: its key
		// waits, as for any failure, until the address (its DNS, or
		// --allow-net) lets the head through. Dead-lettering would drain
		// every key while a name resolves to a refused address.
		dec = Decision{Action: Retry, Delay: policy.Delay(in.Attempt, rnd), Effect: NoEffect}
	}
	switch {
	case dec.Action == Retry && in.Skip != "":
		// An operator skipped the event while this attempt ran (found as
		// its failure was recorded): dead-lettered now rather than after
		// the wait.
		return Decision{Action: DeadLetter, Reason: ReasonSkipped}
	case dec.Action == Retry && in.CanPark && !in.ParkFailed && dec.Delay >= in.ParkThreshold:
		// Parked where it could be; where the park failed, the event waits
		// in JetStream instead, as long.
		dec.Action = Park
	}
	return dec
}

// effectOf is what an attempt's result says about destination d.
func effectOf(res Result, d destination.Destination) Effect {
	switch {
	case !res.Attempted():
		return NoEffect
	case res.OK():
		return Healthy
	case res.Status == http.StatusGone && d.OnGone == destination.OnGoneDisable:
		return Disabled
	case !res.Retryable() || res.Blocked:
		return NoEffect // the destination answered; the event is at fault
	case res.retryAfterHonoured() && res.RetryAfter >= time.Second:
		return PauseRequested
	}
	return Failing
}

// AdmitInput is what the shared consumer's loop knows of a message it was
// handed, for DecideAdmit: the message and its destination and, as the
// loop learns them, the store's answer, the destination's queue and lane
// on this replica, and the end of a move to the lane. A field not filled
// in yet says nothing.
type AdmitInput struct {
	// Unreadable: not an event the shared consumer's filters select (no
	// JetStream metadata, the subject of no event), or a fan-out message
	// without destinations.
	Unreadable bool
	// Fan: the message is a fan-out message, as a whole. SharesDone:
	// every one of its shares is done; SplitFailed: one of them could not
	// be split off.
	Fan         bool
	SharesDone  bool
	SplitFailed bool
	// Share: this is one destination's share of a fan-out message.
	// Redelivered: the fan-out message was delivered before (a replica
	// died holding it).
	Share       bool
	Redelivered bool

	// Known: this replica knows the destination; Dest is it. Seq is the
	// event's stream sequence.
	Known bool
	Dest  destination.Destination
	Seq   uint64
	// LookupsFull: the lookups in the store of destinations this replica
	// does not know are at their bound (unknownChecks). LookedUp: the
	// store was asked; InStore: it has the destination (this replica has
	// not applied it yet), or did not answer.
	LookupsFull bool
	LookedUp    bool
	InStore     bool

	// Now is when it is decided. NotBefore is the time before which the
	// event is not attempted (a retry split off a fan-out message, its
	// Relay-Not-Before header); zero: none.
	Now       time.Time
	NotBefore time.Time

	// QueueRead: the destination's queue on this replica was looked at.
	// Held is what it holds (queued and being attempted), Room how many it
	// may hold; Slow (looked at once Held reaches Room): the destination
	// does not keep up (an attempt, or the head of its queue, older than
	// laneSlow). LaneOpen: this replica works the destination's lane.
	// MovesFull: the events on their way to lanes are at their bound
	// (laneMoving).
	QueueRead bool
	Held      int
	Room      int
	Slow      bool
	LaneOpen  bool
	MovesFull bool
	// LaneAsked: the lane was asked to open; LaneOpen says whether it did.
	LaneAsked bool

	// Moved: the event is stored in its lane. MoveFailed: moving it there
	// failed.
	Moved      bool
	MoveFailed bool
}

// DecideAdmit turns what the shared consumer's loop knows of a message into
// what to do with it, as Decide does for a delivery: it is pure, and the
// one place the shared loop's settlements are decided.
//
// It returns an outcome (Queue, Pass, ToLane, AckMoved, Split, HandBack or
// Terminate) or one of the steps LookUp, ReadQueue and OpenLane, which ask
// for the next thing to learn. A hand-back's Delay is jittered (Jitter),
// but for a Relay-Not-Before's.
func DecideAdmit(in AdmitInput) Decision {
	back := func(d time.Duration) Decision { return Decision{Action: HandBack, Delay: d, Jitter: true} }
	switch {
	case in.Fan && in.Unreadable:
		return Decision{Action: Terminate}
	case in.Fan && in.SharesDone && in.SplitFailed:
		// The message comes back; its shares are delivered again (the
		// same webhook-id).
		return back(time.Second)
	case in.Fan && in.SharesDone:
		return Decision{Action: AckMoved}
	case in.Unreadable:
		// A worker's Decide terminates it as unreadable.
		return Decision{Action: Queue}
	case in.Moved:
		return Decision{Action: AckMoved}
	case in.MoveFailed:
		return back(time.Second)
	}
	paused := in.Known && in.Now.Before(in.Dest.PausedUntil)
	if in.Share {
		switch {
		case in.Redelivered || !in.Known || !in.Dest.Shared || paused:
			return Decision{Action: Split}
		case !in.QueueRead:
			return Decision{Action: ReadQueue}
		case in.LaneOpen:
			return Decision{Action: Split}
		case in.Held >= in.Room && in.Slow && !in.LaneAsked:
			return Decision{Action: OpenLane}
		case in.Held >= 2*in.Room:
			// A share over the destination's room waits in its queue
			// while it keeps up, up to twice the room (a fan-out
			// message may name some destinations more than others).
			return Decision{Action: Split}
		}
		return Decision{Action: Queue}
	}
	switch {
	case !in.Known && (in.LookupsFull || in.InStore):
		return back(2 * time.Second)
	case !in.Known && !in.LookedUp:
		return Decision{Action: LookUp}
	case !in.Known, !in.Dest.Shared, in.Seq < in.Dest.StartSeq:
		// Unknown to the store too (the unknown-destination check
		// dead-letters it, by the same rule), served by consumers of its
		// own, or published before the destination existed.
		return Decision{Action: Pass}
	case in.Now.Before(in.NotBefore):
		// A retry split off a fan-out message: not before its wait.
		return Decision{Action: HandBack, Delay: in.NotBefore.Sub(in.Now)}
	case !in.QueueRead:
		return Decision{Action: ReadQueue}
	}
	toLane := Decision{Action: ToLane}
	if in.MovesFull {
		toLane = back(time.Second)
	}
	switch {
	case paused && !in.LaneOpen && !in.LaneAsked:
		// Its lane's consumer is paused with it: its events wait there,
		// not in the shared consumer.
		return Decision{Action: OpenLane}
	case paused && in.LaneOpen:
		return toLane
	case paused:
		return back(min(in.Dest.PausedUntil.Sub(in.Now), time.Minute))
	case in.LaneOpen:
		// While its lane has events, its new events go there too.
		return toLane
	case in.Held < in.Room:
		return Decision{Action: Queue}
	case in.Slow && !in.LaneAsked:
		return Decision{Action: OpenLane}
	}
	// It keeps up (or its lane cannot open), and a burst filled its
	// queue: back shortly.
	return back(time.Second)
}
