package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// worker pulls and delivers the events of one destination.
type worker struct {
	dest   destination.Destination
	cancel context.CancelFunc
	done   chan struct{} // all its pull loops ended
	broken chan struct{} // one of its pull loops ended
}

func (w *worker) exited() bool {
	select {
	case <-w.broken:
		return true
	default:
		return false
	}
}

func (w *worker) stop() {
	w.cancel()
	<-w.done
}

// consumerSpec is one JetStream consumer of a destination and how it is
// worked.
type consumerSpec struct {
	cfg         jetstream.ConsumerConfig
	concurrency int
	// ordered: one event at a time, in order; its waits never leave
	// JetStream (parking would let the next event of the key overtake).
	ordered bool
	// partition is the ordered partition's index.
	partition int
	// slots, when set, are taken by each attempt, and shared with other
	// consumers of the destination (see destSlots).
	slots chan struct{}
}

// specs lays out d's consumers: one for all its events, or, for an ordered
// destination, one for its events without an order key and one per partition
// with a single event in flight.
func (r *Relay) specs(d destination.Destination) []consumerSpec {
	base := jetstream.ConsumerConfig{
		PauseUntil:    pauseUntil(d, r.cfg.Now()),
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   d.StartSeq,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: r.cfg.MaxAckPending,
	}
	main := base
	main.Durable = destination.ConsumerName(d.Name)
	main.Description = "relay deliveries to " + d.Name
	main.FilterSubjects = stream.DestFilters(d.Name)
	if !d.Ordered {
		return []consumerSpec{{cfg: main, concurrency: d.Concurrency}}
	}
	main.Description = "relay deliveries to " + d.Name + " (events without an order key)"
	main.FilterSubjects = stream.UnkeyedFilters(d.Name)
	out := []consumerSpec{{cfg: main, concurrency: d.Concurrency}}
	for i := range d.Partitions {
		c := base
		c.Durable = destination.PartitionConsumerName(d.Name, i)
		c.Description = fmt.Sprintf("relay ordered deliveries to %s, partition %d of %d", d.Name, i, d.Partitions)
		c.FilterSubjects = d.PartitionFilters(i)
		c.MaxAckPending = 1
		out = append(out, consumerSpec{cfg: c, concurrency: 1, ordered: true, partition: i})
	}
	return out
}

func pauseUntil(d destination.Destination, now time.Time) *time.Time {
	if now.Before(d.PausedUntil) {
		t := d.PausedUntil
		return &t
	}
	return nil
}

func (r *Relay) startWorker(parent context.Context, d destination.Destination) (*worker, error) {
	specs := r.specs(d)
	conss := make([]jetstream.Consumer, len(specs))
	for i, sp := range specs {
		c, err := r.cfg.JS.CreateOrUpdateConsumer(parent, stream.EventsStream, sp.cfg)
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", sp.cfg.Durable, err)
		}
		conss[i] = c
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	wk := &worker{dest: d, cancel: cancel, done: make(chan struct{}), broken: make(chan struct{})}
	// Stop when either Run's context or stop() ends.
	stopped := make(chan struct{})
	go func() {
		select {
		case <-parent.Done():
		case <-ctx.Done():
		}
		close(stopped)
	}()
	var wg sync.WaitGroup
	var once sync.Once
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consume(conss[i], d, specs[i], stopped)
			once.Do(func() { close(wk.broken) })
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(wk.done)
	}()
	return wk, nil
}

// pullHeartbeat is the longest idle heartbeat relay asks of a pull request.
const pullHeartbeat = 2 * time.Second

// pullRounds is how many rounds of attempts (the concurrency) of events an
// unordered destination's consumer holds: those being attempted and the
// queue behind them. A burst larger than the concurrency then arrives at
// once, where asking for one round at a time would keep its last events
// waiting for the next request (docs/performance.md).
const pullRounds = 4

// queueBytes bounds the queue beyond one round of attempts by the events'
// size: it holds about this many bytes of event bodies (by their moving
// average), so large events are not held four rounds deep. Three queued
// rounds of 64 1 KiB events take 192 KiB.
const queueBytes = 8 << 20

// consume runs one destination's pull loop until stopped is closed.
func (r *Relay) consume(cons jetstream.Consumer, d destination.Destination, sp consumerSpec, stopped <-chan struct{}) {
	// Pull requests expire well within AckWait: a process that stops
	// (SIGSTOP) must not hold an open pull that would swallow the
	// redelivery meant for another replica.
	expiry := max(time.Second, min(30*time.Second, sp.cfg.AckWait/2))
	// Heartbeats at most every 2s: relay asks again once two are missed
	// (a server restart, a reconnect, a lost request).
	hb := min(pullHeartbeat, expiry/2)
	// Each request brings at most queueBytes (or two maximum payloads):
	// requests asked for while events were small cannot bring rounds of
	// large ones.
	p, err := stream.NewPuller(r.cfg.JS, stream.EventsStream, sp.cfg.Durable, expiry, hb, queueBytes)
	if err != nil {
		r.log.Error("cannot pull", "dest", d.Name, "err", err)
		return
	}
	// Deliveries get their own context: cancelled only once the grace period
	// after stop has run out.
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

	// A fixed pool of workers takes events from the queue: no goroutine
	// (and no stack growth) per event.
	work := make(chan *pinged)
	done := make(chan *pinged, sp.concurrency)
	var wg sync.WaitGroup
	var mark *partitionMark
	if sp.ordered {
		mark = newPartitionMark(r.ordered, r.cfg.JS.Conn(), d.Name, sp.partition)
		r.ackSettledHead(cons, mark)
	}
	for range sp.concurrency {
		wg.Go(func() {
			for p := range work {
				if sp.slots != nil {
					sp.slots <- struct{}{}
				}
				r.inFlight <- struct{}{}
				r.handle(dctx, p, mark)
				<-r.inFlight
				if sp.slots != nil {
					<-sp.slots
				}
				done <- p
			}
		})
	}

	// hold is how many events this consumer asks to have: being
	// attempted, queued, and asked for. An ordered partition has one at a
	// time anyway. Beyond a round, the queue holds about queueBytes of
	// events, by the average size of those that came; until one has come,
	// a round.
	var avgSize float64
	if !sp.ordered {
		r.queues.Add(1)
		defer r.queues.Add(-1)
	}
	hold := func() int {
		if sp.ordered || avgSize == 0 {
			return sp.concurrency
		}
		// The queues of all destinations together hold at most
		// pullRounds-1 rounds of the replica's MaxInFlight beyond their
		// first round, each an equal share.
		share := (pullRounds - 1) * r.cfg.MaxInFlight / int(max(r.queues.Load(), 1))
		return sp.concurrency + min((pullRounds-1)*sp.concurrency, int(queueBytes/avgSize), share)
	}
	nc := r.cfg.JS.Conn()
	tick := time.NewTicker(max(hb/2, 100*time.Millisecond))
	defer tick.Stop()
	var (
		queue []*pinged
		// busy are the events the workers have: their AckWait is
		// restarted as the queue's is, until each is done.
		busy = make(map[*pinged]struct{}, sp.concurrency)
		buf  []*nats.Msg
	)
	gone := false
loop:
	for {
		if err := p.Fill(hold(), len(queue)+len(busy), time.Now()); err != nil {
			r.log.Debug("cannot ask for events; asking again shortly", "dest", d.Name, "err", err)
		}
		var out chan *pinged
		var head *pinged
		if len(queue) > 0 {
			out, head = work, queue[0]
		}
		select {
		case out <- head:
			queue[0] = nil
			queue = queue[1:]
			busy[head] = struct{}{}
		case h := <-done:
			delete(busy, h)
		case <-p.Signal():
			now := time.Now()
			got := p.Take(buf)
			for _, m := range got {
				st, err := p.Status(m, now)
				switch st {
				case stream.PullEvent:
					queue = append(queue, &pinged{delivered: pulledMsg(stream.NewPulledMsg(m, nc)), last: now})
					size := float64(max(len(m.Data), 1))
					if avgSize == 0 {
						avgSize = size
					} else {
						avgSize += (size - avgSize) / 16
					}
				case stream.PullBeat, stream.PullReleased:
				case stream.PullLost:
					r.log.Debug("pull requests lost; asking again", "dest", d.Name, "err", err)
				case stream.PullRefused:
					r.log.Warn("pull request refused; asking again shortly", "dest", d.Name, "err", err)
				case stream.PullUnanswered:
					r.log.Debug("pull request unanswered; asking again shortly", "dest", d.Name, "err", err)
					gone = gone || r.consumerGone(cons)
				case stream.PullGone:
					gone = true
				}
			}
			clear(got)
			buf = got
			if gone {
				r.log.Warn("consumer gone; it is recreated if the destination still exists", "dest", d.Name)
				break loop
			}
		case now := <-tick.C:
			if p.Silent(now) {
				r.log.Debug("no heartbeat from the pull requests; asking again", "dest", d.Name)
			}
			every := r.ackWaitNow() / 3 // how often a held event's AckWait is restarted
			up := nc.IsConnected()
			for _, h := range queue {
				if now.Sub(h.last) >= every {
					h.ping(now, up)
				}
			}
			for h := range busy {
				if now.Sub(h.last) >= every {
					h.ping(now, up)
				}
			}
		case <-stopped:
			break loop
		}
	}
	// Workers still finishing an attempt report it, and until then their
	// events' AckWait is restarted (a stop's grace, a slow destination), so
	// that no other replica is handed them meanwhile.
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		for {
			select {
			case h, ok := <-done:
				if !ok {
					return
				}
				delete(busy, h)
			case now := <-tick.C:
				up := nc.IsConnected()
				for h := range busy {
					if now.Sub(h.last) >= r.ackWaitNow()/3 {
						h.ping(now, up)
					}
				}
			}
		}
	}()
	// Hand back what is queued and what was on its way: another replica,
	// or this one once started again, has it at once instead of after
	// AckWait. First stop asking (and let what was on its way arrive), so
	// that what is handed back is not handed to this replica again.
	drained := p.Stop(5 * time.Second)
	back := make([]settler, 0, len(queue)+len(drained))
	for _, q := range queue {
		back = append(back, q)
	}
	for _, m := range drained {
		if st, _ := p.Status(m, time.Now()); st == stream.PullEvent {
			back = append(back, pulledMsg(stream.NewPulledMsg(m, nc)))
		}
	}
	err = settleAtStop(back, func() {
		close(work)
		wg.Wait()
		close(done)
		<-pinging
	})
	if err != nil {
		r.log.Debug("handing back events not confirmed; they come back after AckWait at the latest", "dest", d.Name, "err", err)
	}
	// Make sure every ack and nak has left the client.
	_ = nc.Flush()
}

// consumerGone reports whether cons no longer exists on the server. It
// holds up the pull loop (and its pings) for at most a sixth of AckWait,
// 2s at most; an answer too late counts as "not gone" (asked again later).
func (r *Relay) consumerGone(cons jetstream.Consumer) bool {
	ctx, cancel := context.WithTimeout(context.Background(), min(2*time.Second, r.ackWaitNow()/6))
	defer cancel()
	_, err := cons.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)
}
