package relay

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Fan-out to shared destinations.
//
// The router does not copy a typed event for each shared destination
// subscribed to it: it publishes one fan-out message (stream.Fanned, on
// stream.FanSubject) naming up to stream.FanChunk of them, and the shared
// consumer hands it to a replica like any event. The shared loop then
// queues one delivery per destination named (fanDelivery), each attempted
// as the destination's own event would be, and acks the fan-out message
// once every one is done: delivered, filtered out, parked in Redis or
// dead-lettered. A share that cannot end there is split off: published to
// its destination as a copy of its own (stream.Split, with the Routed
// copy's dedup id, the attempts made so far and, for a retry, the time
// before which it is not attempted), after which it is done too. That is
// the case when the destination is paused, behind (its lane is open or its
// queue full), unknown to this replica or not shared, when an attempt
// failed and must wait, and for every share of a fan-out message delivered
// again (a replica died holding it: the shares it had delivered are
// delivered once more, with the same webhook-id).
//
// A fan-out message to S destinations costs JetStream one stored message,
// a delivery and an ack, where copies cost S of each and S publishes.

// fanParent is a fan-out message and its shares not done yet.
type fanParent struct {
	msg delivered
	ev  stream.Envelope
	js  jetstream.JetStream
	r   *Relay
	// splits counts the shares being split off, for a stop to wait for.
	splits *sync.WaitGroup

	mu     sync.Mutex
	left   int
	failed bool // a share could not be split off: the message comes back
}

// shareDone records one share done; the last acks the message, or hands
// it back when a share could not be split off.
func (p *fanParent) shareDone(ok bool) {
	p.mu.Lock()
	p.left--
	p.failed = p.failed || !ok
	last, failed := p.left == 0, p.failed
	p.mu.Unlock()
	if last {
		settleAdmitted(p.msg, DecideAdmit(AdmitInput{Fan: true, SharesDone: true, SplitFailed: failed}))
	}
}

// split publishes dest's share as a copy of its own (see stream.Split),
// attempt being the attempts made and notBefore when it may be attempted
// (zero: at once), and reports it done once stored.
func (p *fanParent) split(dest string, attempt int, notBefore time.Time) {
	c := p.ev
	c.Dest, c.Attempt, c.NotBefore = dest, attempt, notBefore
	f, err := p.js.PublishMsgAsync(c.Msg(stream.Split, stream.InSubject(dest, p.ev.Key), p.r.seal))
	if err != nil {
		p.r.log.Warn("cannot split a fan-out share off to its destination; the fan-out message comes back", "dest", dest, "event_id", p.ev.ID, "err", err)
		p.shareDone(false)
		return
	}
	p.splits.Add(1)
	go func() {
		defer p.splits.Done()
		select {
		case <-f.Ok():
			p.shareDone(true)
		case err := <-f.Err():
			p.r.log.Warn("cannot split a fan-out share off to its destination; the fan-out message comes back", "dest", dest, "event_id", p.ev.ID, "err", err)
			p.shareDone(false)
		}
	}()
}

// fanDelivery is one destination's share of a fan-out message, handled as
// an event of the destination: its subject is the destination's, its
// reply, headers and body the fan-out message's. It is read as a message
// and settled as one (settler): acking or terminating it ends the share,
// redelivering or handing it back splits it off.
type fanDelivery struct {
	parent  *fanParent
	dest    string
	subject string
	once    sync.Once
}

func (f *fanDelivery) Metadata() (*jetstream.MsgMetadata, error) { return f.parent.msg.Metadata() }
func (f *fanDelivery) Data() []byte                              { return f.parent.msg.Data() }
func (f *fanDelivery) Headers() nats.Header                      { return f.parent.msg.Headers() }
func (f *fanDelivery) Subject() string                           { return f.subject }
func (f *fanDelivery) Reply() string                             { return f.parent.msg.Reply() }
func (f *fanDelivery) InProgress() error                         { return f.parent.msg.InProgress() }

func (f *fanDelivery) done() error {
	f.once.Do(func() { f.parent.shareDone(true) })
	return nil
}

func (f *fanDelivery) Acknowledge() error                         { return f.done() }
func (f *fanDelivery) AcknowledgeConfirmed(context.Context) error { return f.done() }
func (f *fanDelivery) Terminate(string) error                     { return f.done() }
func (f *fanDelivery) Redeliver(delay time.Duration) error        { return f.splitOff(delay) }

// HandBack is a stop handing back a share still queued, never attempted
// here: split off as it came, without reading its attempt log.
func (f *fanDelivery) HandBack(bool) error {
	f.once.Do(func() { f.parent.split(f.dest, 0, time.Time{}) })
	return nil
}

// splitOff splits the share off, to be attempted after delay, with the
// attempts its attempt log counts.
func (f *fanDelivery) splitOff(delay time.Duration) error {
	f.once.Do(func() {
		p := f.parent
		attempt := 0
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		if l, found := p.r.readLog(ctx, event{id: p.ev.ID, dest: f.dest}); found {
			attempt = l.Made
		}
		cancel()
		var nb time.Time
		if delay > 0 {
			nb = p.r.cfg.Now().Add(delay)
		}
		p.split(f.dest, attempt, nb)
	})
	return nil
}

// admitFan sorts out a fan-out message: a share queued for each shared
// destination named that can take it, the others split off. It returns
// the destinations named.
func (s *sharedLoop) admitFan(msg delivered, meta jetstream.MsgMetadata, now time.Time) int {
	ev, err := stream.Decode(stream.FanSubject, meta.Sequence.Stream, meta.Timestamp, msg.Headers(), msg.Data(), s.r.seal)
	dests := ev.Dests
	if err != nil || len(dests) == 0 || dests[0] == "" {
		s.r.log.Error("fan-out message without destinations (or without relay's seal: not relay's); terminating it", "seq", meta.Sequence.Stream)
		settleAdmitted(msg, DecideAdmit(AdmitInput{Fan: true, Unreadable: true}))
		return 1
	}
	p := &fanParent{msg: msg, ev: ev, js: s.pub, r: s.r, left: len(dests), splits: &s.splits}
	for _, name := range dests {
		in := AdmitInput{Share: true, Redelivered: meta.NumDelivered > 1, Now: now}
		in.Dest, in.Known = s.r.dests.Get(name)
		var q *destQueue
	decide:
		for {
			switch DecideAdmit(in).Action {
			case ReadQueue:
				q = s.queue(name, now)
				s.readQueue(&in, q, now)
			case OpenLane:
				in.LaneAsked, in.LaneOpen = true, s.openLane(in.Dest, q)
			case Queue:
				fd := &fanDelivery{parent: p, dest: name, subject: stream.InSubject(name, "")}
				s.enqueue(name, &held{pinged: pinged{delivered: fd, last: now}, dest: name, size: len(msg.Data())})
				break decide
			default: // Split: to its lane, or to wait in the shared consumer
				p.split(name, 0, time.Time{})
				break decide
			}
		}
	}
	return len(dests)
}
