package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// The shared consumer.
//
// A destination added with Shared has no JetStream consumer of its own: one
// durable consumer, SharedConsumer, hands out the events of every
// destination (it filters all of them), and each replica's shared loop
// sorts them out. It acks at once the events of destinations served by
// consumers of their own (ordered ones, unordered ones added without
// Shared) and those that belong to no destination (the unknown-destination
// check dead-letters them); it queues the others per destination, and a
// pool of workers shared by all destinations attempts them, never more at
// once for a destination than its concurrency.
//
// Isolation is kept inside relay. A destination's queue holds at most
// pullRounds rounds of its concurrency. An event that finds its
// destination's queue full is handed back shortly (a nak with a delay)
// while the destination keeps up, and moved to the destination's lane when
// it does not (an attempt or a queued event older than laneSlow) or is
// paused (its lane's consumer is paused with it): the event
// is republished to relay.lane.<dest> (a Laned publish, deduplicated by its
// sequence) and acked once stored. A lane is an ordinary durable consumer of
// the destination's own, worked as an unshared destination's is, with its
// own AckWait, MaxAckPending and retries; while it has events, every new
// event of the destination goes there too, and once it is drained the
// destination is served from the shared consumer again. A destination that
// hangs thus holds at most its queue of the shared consumer's events, and
// costs the others nothing more.

const (

	// laneSlow is how long an attempt may run, or an event wait in its
	// destination's queue, before the destination counts as not keeping
	// up: the events that then find its queue full go to its lane.
	laneSlow = time.Second
	// laneCheckEvery is how often a replica checks whether the lanes it
	// works are drained.
	laneCheckEvery = 5 * time.Second
	// laneResumeEvery is how often a replica looks for lanes with events
	// that no replica may be working (one that stopped while behind).
	laneResumeEvery = 30 * time.Second
	// laneMoving bounds the events on their way to a lane at once.
	laneMoving = 1024
	// unknownChecks bounds the lookups in the store of destinations this
	// replica does not know (yet) at once.
	unknownChecks = 8
)

// laneSpec is the consumer of shared destination d's lane.
func (r *Relay) laneSpec(d destination.Destination) consumerSpec {
	return consumerSpec{
		cfg: jetstream.ConsumerConfig{
			Durable:       destination.LaneConsumerName(d.Name),
			Description:   "relay deliveries to " + d.Name + " that did not keep up (its lane)",
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       r.cfg.AckWait,
			MaxDeliver:    -1,
			MaxAckPending: r.cfg.MaxAckPending,
			FilterSubject: stream.LaneSubject(d.Name),
			PauseUntil:    pauseUntil(d, r.cfg.Now()),
		},
		concurrency: d.Concurrency,
	}
}

// held is an event of the shared consumer held by this replica, queued or
// being attempted (pinged until a worker acts on it).
type held struct {
	pinged
	dest string
	size int
	came time.Time // when it came
	// began is when its attempt began, in Unix nanoseconds: once a
	// worker has it and the replica's MaxInFlight has room (0 before).
	began atomic.Int64
	// slot is the destination's slot its attempt took (see destSlots).
	slot chan struct{}
}

// destQueue is a shared destination's queue in the shared loop.
type destQueue struct {
	queue []*held
	busy  int
	// inFlight are its events being attempted from the shared consumer.
	inFlight map[*held]struct{}
	ready    bool // in the loop's ready ring
	// lane: this replica moves the destination's new events to its lane
	// and works the lane.
	lane *worker
	// moving counts its events on their way to its lane; lastMoved is
	// when one last got there.
	moving    int
	lastMoved time.Time
	// seen is when an event of it last came, to forget idle queues.
	seen time.Time
}

// sharedLoop is one replica's shared consumer loop (see "The shared
// consumer").
type sharedLoop struct {
	r *Relay
	// pub publishes lane moves and fan-out splits, asynchronously.
	pub    jetstream.JetStream
	nc     *nats.Conn
	queues map[string]*destQueue
	ready  []string
	held   map[*held]struct{}
	work   chan *held
	done   chan *held
	// moved reports a lane move's end: the event, and whether it is
	// stored in the lane.
	moving int
	moved  chan *held
	// splits counts fan-out shares being split off (see fanParent).
	splits sync.WaitGroup
	// unknown bounds the store lookups of unknown destinations.
	unknown chan struct{}
	avgSize float64
	// avgShares is the moving average of the deliveries a message brings:
	// 1 for an event, the destinations named for a fan-out message.
	avgShares float64
	// queued and busy count the events queued and being attempted, over
	// all destinations; holding is what hold last counted.
	queued, busy, holding int
	// laneCtx ends the lane workers' pull loops.
	laneCtx context.Context
	// drained reports lanes found drained by a check begun at the time
	// given (the empty name: the check is over).
	drained chan laneDrained
	checks  bool // a drain check is running
}

// startShared starts the shared loop on the shared consumer, creating it if
// it is missing (then from the first event of a shared destination that
// may not have been delivered: some may be delivered again).
func (r *Relay) startShared(parent context.Context, start uint64) (*worker, error) {
	if err := destination.EnsureShared(parent, r.cfg.JS, start, r.cfg.AckWait); err != nil {
		return nil, err
	}
	cons, err := r.cfg.JS.Consumer(parent, stream.EventsStream, destination.SharedConsumer)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", destination.SharedConsumer, err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	wk := &worker{cancel: cancel, done: make(chan struct{}), broken: make(chan struct{})}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-parent.Done():
		case <-ctx.Done():
		}
		close(stopped)
	}()
	go func() {
		r.consumeShared(cons, stopped)
		close(wk.broken)
		cancel()
		close(wk.done)
	}()
	return wk, nil
}

// consumeShared runs the shared loop until stopped is closed.
func (r *Relay) consumeShared(cons jetstream.Consumer, stopped <-chan struct{}) {
	expiry := r.cfg.AckWait / 2
	// The server refuses a pull request whose heartbeat is over half its
	// expiry (at an AckWait under 8s).
	hb := min(pullHeartbeat, expiry/2)
	p, err := stream.NewPuller(r.cfg.JS, stream.EventsStream, destination.SharedConsumer, expiry, hb, queueBytes)
	if err != nil {
		r.log.Error("cannot pull the shared consumer", "err", err)
		return
	}
	dctx, dcancel := context.WithCancel(context.Background())
	defer dcancel()
	go func() {
		<-stopped
		t := time.NewTimer(r.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			dcancel()
		case <-dctx.Done():
		}
	}()
	pub, err := stream.AsyncPublisher(r.cfg.JS, sharedMaxPending)
	if err != nil {
		r.log.Error("cannot publish for the shared consumer", "err", err)
		return
	}
	laneCtx, laneCancel := context.WithCancel(context.Background())
	s := &sharedLoop{
		r:       r,
		pub:     pub,
		nc:      r.cfg.JS.Conn(),
		queues:  map[string]*destQueue{},
		held:    map[*held]struct{}{},
		work:    make(chan *held),
		done:    make(chan *held, r.cfg.MaxInFlight),
		moved:   make(chan *held, laneMoving),
		unknown: make(chan struct{}, unknownChecks),
		laneCtx: laneCtx,
		drained: make(chan laneDrained, 16),
	}
	var wg sync.WaitGroup
	for range r.cfg.MaxInFlight {
		wg.Go(func() {
			for h := range s.work {
				r.inFlight <- struct{}{}
				h.began.Store(time.Now().UnixNano())
				r.handle(dctx, h, nil)
				<-r.inFlight
				if fd, ok := h.delivered.(*fanDelivery); ok {
					// Left without an outcome (Decide's Leave): JetStream
					// would hand the whole fan-out message out again. Through
					// settle: no ping of the parent may follow its nak.
					_ = h.settle(func() error { return fd.splitOff(0) })
				}
				<-h.slot
				s.done <- h
			}
		})
	}
	s.resumeLanes()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastCheck, lastResume := time.Now(), time.Now()
	var buf []*nats.Msg
	gone := false
	s.holding = s.hold()
loop:
	for {
		// hold and what is held count deliveries; the puller asks for
		// messages.
		per := max(s.avgShares, 1)
		if err := p.Fill(max(int(float64(s.holding)/per), 1), int(float64(s.queued+s.busy+s.moving)/per), time.Now()); err != nil {
			r.log.Debug("cannot ask the shared consumer for events; asking again shortly", "err", err)
		}
		var out chan *held
		var next *held
		var slot chan struct{}
		for len(s.ready) > 0 && out == nil {
			name := s.ready[0]
			slot = s.r.slots.of(name)
			select {
			case slot <- struct{}{}:
				out, next = s.work, s.queues[name].queue[0]
				next.slot = slot
			default:
				// Its lane's attempts take its concurrency now: it is
				// ready again when one of its own ends, or at the tick.
				s.ready[0] = ""
				s.ready = s.ready[1:]
				s.queues[name].ready = false
			}
		}
		sent := false
		select {
		case out <- next:
			sent = true
			s.dispatched()
		case h := <-s.done:
			s.finished(h)
		case h := <-s.moved:
			s.moving--
			if q := s.queues[h.dest]; q != nil {
				q.moving--
				q.lastMoved = time.Now()
			}
		case d := <-s.drained:
			if d.name == "" {
				s.checks = false // the check is over
			} else {
				s.closeLane(d)
			}
		case <-p.Signal():
			now := time.Now()
			got := p.Take(buf)
			for _, m := range got {
				st, err := p.Status(m, now)
				switch st {
				case stream.PullEvent:
					s.admit(m, now)
				case stream.PullBeat, stream.PullReleased:
				case stream.PullLost:
					r.log.Debug("shared pull requests lost; asking again", "err", err)
				case stream.PullRefused:
					r.log.Warn("shared pull request refused; asking again shortly", "err", err)
				case stream.PullUnanswered:
					gone = gone || r.consumerGone(cons)
				case stream.PullGone:
					gone = true
				}
			}
			clear(got)
			buf = got
			if gone {
				r.log.Warn("the shared consumer is gone; it is created again")
				if out != nil {
					<-slot
				}
				break loop
			}
		case now := <-tick.C:
			if p.Silent(now) {
				r.log.Debug("no heartbeat from the shared pull requests; asking again")
			}
			s.pings(now)
			s.holding = s.hold()
			for name, q := range s.queues {
				s.markReady(name, q) // a lane's attempt may have ended
			}
			if now.Sub(lastCheck) >= laneCheckEvery {
				lastCheck = now
				s.checkLanes(now)
			}
			if now.Sub(lastResume) >= laneResumeEvery {
				lastResume = now
				s.resumeLanes() // those another replica left with events
			}
		case <-stopped:
			if out != nil {
				<-slot
			}
			break loop
		}
		if out != nil && !sent {
			<-slot
		}
	}
	// Attempts still running (a stop's grace, a slow destination) keep
	// their AckWait restarted until they end, so that no other replica is
	// handed their events meanwhile.
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		for {
			select {
			case h, ok := <-s.done:
				if !ok {
					return
				}
				delete(s.held, h)
			case now := <-tick.C:
				up := s.nc.IsConnected()
				for h := range s.held {
					if now.Sub(h.last) >= s.r.ackWaitNow()/3 {
						h.ping(now, up)
					}
				}
			}
		}
	}()
	drained := p.Stop(5 * time.Second)
	var back []*held
	for _, q := range s.queues {
		back = append(back, q.queue...)
		s.queued -= len(q.queue)
		q.queue = nil
	}
	for _, m := range drained {
		if st, _ := p.Status(m, time.Now()); st == stream.PullEvent {
			back = append(back, &held{pinged: pinged{delivered: pulledMsg(stream.NewPulledMsg(m, s.nc))}})
		}
	}
	err = settleAtStop(back, func() {
		close(s.work)
		wg.Wait()
		close(s.done)
		<-pinging
		// The lanes' workers stop as unshared destinations' do.
		laneCancel()
		for _, q := range s.queues {
			if q.lane != nil {
				<-q.lane.done
			}
		}
	})
	if err != nil {
		r.log.Debug("handing back events not confirmed; they come back after AckWait at the latest", "err", err)
	}
	// Fan-out shares split off are confirmed, and their messages acked.
	split := make(chan struct{})
	go func() {
		s.splits.Wait()
		close(split)
	}()
	select {
	case <-split:
	case <-time.After(5 * time.Second):
		r.log.Warn("fan-out shares not confirmed split off within 5s; their fan-out messages come back, and the shares delivered already are delivered again")
	}
	_ = s.nc.Flush()
}

// hold is how many events the loop asks to hold: a queue's worth of every
// destination it has seen lately, at least a round of workers' worth of a
// destination, at most pullRounds rounds of all the workers. It goes over
// every queue: the loop counts it once a second.
func (s *sharedLoop) hold() int {
	n := 0
	for name, q := range s.queues {
		if q.lane != nil {
			continue
		}
		if d, ok := s.r.dests.Get(name); ok {
			n += s.room(d)
		}
	}
	return min(max(n, destination.DefaultConcurrency*pullRounds), s.r.cfg.MaxInFlight*pullRounds)
}

// room is how many events destination d may hold here, queued and being
// attempted: pullRounds rounds of its concurrency, the queue beyond one
// round bounded by queueBytes of events by their average size.
func (s *sharedLoop) room(d destination.Destination) int {
	if s.avgSize == 0 {
		return d.Concurrency * pullRounds
	}
	return d.Concurrency + min((pullRounds-1)*d.Concurrency, int(queueBytes/s.avgSize))
}

// admit sorts out an event the shared consumer handed out.
func (s *sharedLoop) admit(m *nats.Msg, now time.Time) {
	r := s.r
	msg := pulledMsg(stream.NewPulledMsg(m, s.nc))
	size := float64(max(len(m.Data), 1))
	if s.avgSize == 0 {
		s.avgSize = size
	} else {
		s.avgSize += (size - s.avgSize) / 16
	}
	meta, ok := stream.ParseAck(m.Reply)
	fan := ok && m.Subject == stream.FanSubject
	shares := 1
	if fan {
		shares = s.admitFan(msg, meta, now)
	}
	if s.avgShares == 0 {
		s.avgShares = float64(shares)
	} else {
		s.avgShares += (float64(shares) - s.avgShares) / 16
	}
	if fan {
		return
	}
	p, err := stream.ParseSubject(m.Subject)
	in := AdmitInput{Unreadable: !ok || err != nil, Now: now, Seq: meta.Sequence.Stream}
	if !in.Unreadable {
		in.Dest, in.Known = r.dests.Get(p.Dest)
		in.LookupsFull = len(s.unknown) == cap(s.unknown)
		// A producer's Relay-Not-Before is not relay's: ignored.
		in.NotBefore = stream.NotBefore(m.Header, r.seal)
	}
	var q *destQueue
	for {
		dec := DecideAdmit(in)
		switch dec.Action {
		case LookUp:
			s.lookUp(msg, p.Dest, in)
		case ReadQueue:
			q = s.queue(in.Dest.Name, now)
			s.readQueue(&in, q, now)
			continue
		case OpenLane:
			in.LaneAsked, in.LaneOpen = true, s.openLane(in.Dest, q)
			continue
		case Queue:
			if in.Unreadable {
				// The worker terminates it as unreadable.
				s.enqueue("", &held{pinged: pinged{delivered: msg, last: now}})
			} else {
				s.enqueue(in.Dest.Name, &held{pinged: pinged{delivered: msg, last: now}, dest: in.Dest.Name, size: len(m.Data)})
			}
		case ToLane:
			s.toLane(msg, in.Dest, in)
		default:
			settleAdmitted(msg, dec)
		}
		return
	}
}

// readQueue fills in what in says of q, its destination's queue on this
// replica, at now.
func (s *sharedLoop) readQueue(in *AdmitInput, q *destQueue, now time.Time) {
	in.QueueRead = true
	in.Held, in.Room = len(q.queue)+q.busy, s.room(in.Dest)
	in.Slow = in.Held >= in.Room && s.slow(q, now)
	in.LaneOpen = q.lane != nil
	in.MovesFull = s.moving >= laneMoving
}

// settleAdmitted carries out dec, a settlement DecideAdmit chose for msg (Pass,
// AckMoved, HandBack or Terminate).
func settleAdmitted(msg settler, dec Decision) {
	switch dec.Action {
	case Pass, AckMoved:
		_ = msg.Acknowledge()
	case HandBack:
		delay := dec.Delay
		if dec.Jitter {
			delay = jitter(delay)
		}
		_ = msg.Redeliver(delay)
	case Terminate:
		_ = msg.Terminate(dec.Reason)
	}
}

func (s *sharedLoop) queue(name string, now time.Time) *destQueue {
	q := s.queues[name]
	if q == nil {
		q = &destQueue{}
		s.queues[name] = q
	}
	q.seen = now
	return q
}

// slow reports whether q's destination does not keep up: an attempt, or
// the event at the head of its queue, older than laneSlow.
func (s *sharedLoop) slow(q *destQueue, now time.Time) bool {
	if len(q.queue) > 0 && now.Sub(q.queue[0].came) > laneSlow {
		return true
	}
	for h := range q.inFlight {
		// Waiting for room among the replica's attempts is not the
		// destination's slowness.
		if b := h.began.Load(); b != 0 && now.Sub(time.Unix(0, b)) > laneSlow {
			return true
		}
	}
	return false
}

func (s *sharedLoop) enqueue(name string, h *held) {
	h.came = h.last
	q := s.queue(name, h.last)
	q.queue = append(q.queue, h)
	s.queued++
	s.held[h] = struct{}{}
	s.markReady(name, q)
}

// markReady puts q in the ready ring if it has an event and room for an
// attempt.
func (s *sharedLoop) markReady(name string, q *destQueue) {
	if q.ready || len(q.queue) == 0 {
		return
	}
	if sl := s.r.slots.of(name); len(sl) >= cap(sl) {
		return
	}
	q.ready = true
	s.ready = append(s.ready, name)
}

// dispatched: the head of the first ready queue went to a worker.
func (s *sharedLoop) dispatched() {
	name := s.ready[0]
	s.ready[0] = ""
	s.ready = s.ready[1:]
	q := s.queues[name]
	h := q.queue[0]
	q.queue[0] = nil
	q.queue = q.queue[1:]
	q.busy++
	if q.inFlight == nil {
		q.inFlight = map[*held]struct{}{}
	}
	q.inFlight[h] = struct{}{}
	s.queued--
	s.busy++
	q.ready = false
	s.markReady(name, q) // to the back of the ring: destinations take turns
}

// finished: a worker is done with h.
func (s *sharedLoop) finished(h *held) {
	delete(s.held, h)
	s.busy--
	q := s.queues[h.dest]
	if q == nil {
		return
	}
	delete(q.inFlight, h)
	q.busy--
	s.markReady(h.dest, q)
}

// pings restarts the AckWait of every event held for a third of it.
func (s *sharedLoop) pings(now time.Time) {
	up := s.nc.IsConnected()
	for h := range s.held {
		if now.Sub(h.last) >= s.r.ackWaitNow()/3 {
			h.ping(now, up)
		}
	}
	// Forget queues idle for a while (not those with a lane).
	for name, q := range s.queues {
		if len(q.queue) == 0 && q.busy == 0 && q.lane == nil && now.Sub(q.seen) > time.Minute {
			delete(s.queues, name)
		}
	}
}

// lookUp settles an event of a destination this replica does not know
// (in): it waits if the store has the destination (this replica has not
// applied it yet), and is acked if not (the unknown-destination check
// dead-letters it, by the same rule).
func (s *sharedLoop) lookUp(msg delivered, dest string, in AdmitInput) {
	s.unknown <- struct{}{} // room: DecideAdmit saw no LookupsFull
	go func() {
		defer func() { <-s.unknown }()
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		defer cancel()
		ok, err := s.r.Exists(ctx, dest, in.Seq)
		in.LookedUp, in.InStore = true, err != nil || ok
		settleAdmitted(msg, DecideAdmit(in))
	}()
}

// toLane moves msg to d's lane: republished, then settled as DecideAdmit
// decides on the move's end (in): acked once stored.
func (s *sharedLoop) toLane(msg delivered, d destination.Destination, in AdmitInput) {
	meta, _ := stream.ParseAck(msg.Reply())
	e, err := stream.Decode(msg.Subject(), meta.Sequence.Stream, meta.Timestamp, msg.Headers(), msg.Data(), s.r.seal)
	if err != nil {
		in.MoveFailed = true
		settleAdmitted(msg, DecideAdmit(in))
		return
	}
	s.moving++
	s.queue(d.Name, time.Now()).moving++
	h := &held{pinged: pinged{delivered: msg}, dest: d.Name}
	f, err := s.pub.PublishMsgAsync(e.Msg(stream.Laned, stream.LaneSubject(d.Name), s.r.seal), jetstream.WithExpectStream(stream.EventsStream))
	if err != nil {
		in.MoveFailed = true
		settleAdmitted(msg, DecideAdmit(in))
		s.moved <- h
		return
	}
	go func() {
		select {
		case <-f.Ok():
			in.Moved = true
		case err := <-f.Err():
			s.r.log.Debug("cannot move an event to its destination's lane; it comes back", "dest", d.Name, "err", err)
			in.MoveFailed = true
		}
		settleAdmitted(msg, DecideAdmit(in))
		s.moved <- h
	}()
}

// openLane starts working d's lane on this replica, and reports whether it
// is worked.
func (s *sharedLoop) openLane(d destination.Destination, q *destQueue) bool {
	if q.lane != nil {
		return true
	}
	wk, err := s.r.startLane(s.laneCtx, d)
	if err != nil {
		if ok, _ := s.r.laneWarn.Allow(d.Name, time.Now()); ok {
			s.r.log.Warn("cannot open the destination's lane; its events wait in the shared consumer", "dest", d.Name, "err", err)
		}
		return false
	}
	s.r.log.Info("destination paused or not keeping up: its new events go to its lane until it is drained", "dest", d.Name)
	q.lane = wk
	return true
}

// laneDrained: a check begun at since found name's lane drained.
type laneDrained struct {
	name  string
	since time.Time
}

// closeLane stops working a lane found drained, unless events were moved
// there since the check began (it may not have counted them), or the
// destination is paused or still behind. The lane's pull loop stops on
// its own: an event another replica moved there meanwhile is handed back,
// to that replica's.
func (s *sharedLoop) closeLane(ld laneDrained) {
	q := s.queues[ld.name]
	if q == nil || q.lane == nil || q.moving > 0 || !q.lastMoved.Before(ld.since) {
		return
	}
	if d, ok := s.r.dests.Get(ld.name); s.slow(q, time.Now()) || ok && time.Now().Before(d.PausedUntil) {
		return
	}
	go q.lane.stop()
	q.lane = nil
	s.r.log.Info("destination keeps up again: served from the shared consumer", "dest", ld.name)
}

// checkLanes looks, off the loop, for lanes drained: nothing pending or
// in flight in the lane's consumer.
func (s *sharedLoop) checkLanes(now time.Time) {
	if s.checks {
		return
	}
	var names []string
	for name, q := range s.queues {
		if q.lane != nil && q.moving == 0 && !s.slow(q, now) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	s.checks = true
	since := time.Now()
	report := func(d laneDrained) {
		select {
		case s.drained <- d:
		case <-s.laneCtx.Done():
		}
	}
	go func() {
		defer report(laneDrained{})
		for _, name := range names {
			ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
			c, err := s.r.cfg.JS.Consumer(ctx, stream.EventsStream, destination.LaneConsumerName(name))
			cancel()
			if err != nil {
				continue
			}
			if info := c.CachedInfo(); info.NumPending == 0 && info.NumAckPending == 0 {
				report(laneDrained{name: name, since: since})
			}
		}
	}()
}

// resumeLanes works the lanes left with events by an earlier run.
func (s *sharedLoop) resumeLanes() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lister := s.r.events.ListConsumers(ctx)
	var names []string
	for info := range lister.Info() {
		name, ok := strings.CutSuffix(info.Name, "_L")
		name, ok2 := strings.CutPrefix(name, "relay_")
		if ok && ok2 && (info.NumPending > 0 || info.NumAckPending > 0) {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil {
		s.r.log.Warn("cannot list the lanes left by an earlier run; they are worked once their destination falls behind again", "err", err)
	}
	now := time.Now()
	for _, name := range names {
		if d, ok := s.r.dests.Get(name); ok && d.Shared {
			if q := s.queue(name, now); q.lane == nil {
				s.openLane(d, q)
			}
		}
	}
}

// destSlots hold a slot per attempt in flight to a shared destination,
// whether it came from the shared consumer or its lane: together they stay
// within its concurrency.
type destSlots struct {
	r  *Relay
	mu sync.Mutex
	m  map[string]chan struct{}
}

// of is dest's slots: a channel with room for its concurrency.
func (ds *destSlots) of(dest string) chan struct{} {
	n := destination.DefaultConcurrency
	if d, ok := ds.r.dests.Get(dest); ok {
		n = d.Concurrency
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	sl := ds.m[dest]
	if sl == nil || cap(sl) != n {
		// A new concurrency: attempts in flight give back their slot
		// to the old channel.
		sl = make(chan struct{}, n)
		ds.m[dest] = sl
	}
	return sl
}

// startLane starts the pull loop of d's lane.
func (r *Relay) startLane(parent context.Context, d destination.Destination) (*worker, error) {
	sp := r.laneSpec(d)
	sp.slots = r.slots.of(d.Name)
	c, err := r.cfg.JS.CreateOrUpdateConsumer(parent, stream.EventsStream, sp.cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", sp.cfg.Durable, err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	wk := &worker{dest: d, cancel: cancel, done: make(chan struct{}), broken: make(chan struct{})}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-parent.Done():
		case <-ctx.Done():
		}
		close(stopped)
	}()
	go func() {
		r.consume(c, d, sp, stopped)
		close(wk.broken)
		cancel()
		close(wk.done)
	}()
	return wk, nil
}

// jitter is d plus up to a tenth of it, at random: events handed back
// together do not all come back at once.
func jitter(d time.Duration) time.Duration {
	return d + rand.N(d/10+1)
}

// sharedMaxPending bounds the shared loop's publishes (lanes, fan-out
// shares) not yet acknowledged.
const sharedMaxPending = 16384
