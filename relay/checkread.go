package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// readFrom checks every event stored after sequence checked, in order,
// reading their headers, until ctx ends, and stores in done the sequence up
// to which it has. When it has caught up with the stream and the check can
// list its subjects again, it returns nil.
//
// It reads through an ephemeral consumer without acks, with pull requests
// of its own (stream.Puller: nats.go's consumers take an event with an
// empty body and a Status header for a status of the pull protocol, and
// never get past it). When the consumer skips an event, goes silent or is
// gone, it makes a new one after the last event checked, up to
// readRestarts times in a row without progress.
func (r *Relay) readFrom(ctx context.Context, checked uint64, done *atomic.Uint64, relistAfter time.Duration) error {
	rd := &reading{relisted: time.Now(), relistAfter: relistAfter}
	for restarts := 0; ; {
		before := done.Load()
		err := r.readWith(ctx, checked, done, rd)
		if !errors.Is(err, errReadGap) {
			return err
		}
		if done.Load() > before {
			restarts = 0
		}
		if restarts++; restarts > readRestarts {
			return fmt.Errorf("read stream %s: %w, %d times in a row at sequence %d", stream.EventsStream, err, readRestarts, done.Load())
		}
		r.log.Debug("the unknown-destination check reads again", "after", done.Load(), "err", err)
		checked = done.Load()
	}
}

// readRestarts is how often in a row readFrom makes a new consumer without
// getting further before it gives up (and the check starts again).
const readRestarts = 5

// errReadGap: the check's consumer skipped an event, went silent or is gone.
var errReadGap = errors.New("the consumer lost its place")

// reading is readFrom's count of what it read since it last asked whether
// listing would cost less.
type reading struct {
	relisted    time.Time
	read        uint64
	relistAfter time.Duration
}

// readHold is how many events the check asks for ahead.
const readHold = 1000

// readWith is readFrom through one consumer, from after checked.
func (r *Relay) readWith(ctx context.Context, checked uint64, done *atomic.Uint64, rd *reading) error {
	cfg := jetstream.ConsumerConfig{
		Description:   "relay unknown-destination check",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckNonePolicy,
		// It needs only the subject and sequence: no bodies on this path.
		HeadersOnly: true,
		// A consumer left behind by a replica that died goes soon.
		InactiveThreshold: 30 * time.Second,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if checked > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, checked+1
	}
	cons, err := r.cfg.JS.CreateConsumer(ctx, stream.EventsStream, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("read stream %s: %w", stream.EventsStream, err)
	}
	name := cons.CachedInfo().Name
	// Reading may stop and start again soon: do not leave it until its
	// InactiveThreshold.
	defer r.deleteConsumer(name)
	p, err := stream.NewPuller(r.cfg.JS, name, 30*time.Second, pullHeartbeat, 0)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream.EventsStream, err)
	}
	defer p.Stop(time.Second)
	nc := r.cfg.JS.Conn()
	tick := time.NewTicker(pullHeartbeat / 2)
	defer tick.Stop()
	var (
		cseq uint64 // the consumer sequence of the last event read
		buf  []*nats.Msg
	)
	for {
		_ = p.Fill(readHold, 0, time.Now()) // a failed ask is tried again in a second

		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			if p.Silent(now) {
				return fmt.Errorf("%w: no heartbeat", errReadGap)
			}
			continue
		case <-p.Signal():
		}
		got := p.Take(buf)
		for _, m := range got {
			st, err := p.Status(m, time.Now())
			switch st {
			case stream.PullBeat, stream.PullReleased:
				continue
			case stream.PullLost:
				continue // asked again above
			case stream.PullRefused:
				r.log.Warn("pull request of the unknown-destination check refused; asking again shortly", "err", err)
				continue
			case stream.PullUnanswered, stream.PullGone:
				return fmt.Errorf("%w: %w", errReadGap, err)
			}
			info, ok := parseAckReply(m.Reply)
			if !ok || info.consSeq != cseq+1 {
				return fmt.Errorf("%w: delivery %q after consumer sequence %d", errReadGap, m.Reply, cseq)
			}
			cseq = info.consSeq
			msg := stream.NewPulledMsg(m, nc)
			seq := info.streamSeq
			// What cannot be decided now is tried again, in place: the check
			// moves past an event only once it is settled.
			for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
				err := r.checkRouted(ctx, msg, seq)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.log.Warn("cannot check or dead-letter an event for an unknown destination (retrying)", "subject", m.Subject, "seq", seq, "retry_in", wait, "err", err)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
				}
			}
			r.cfg.Metrics.checkedRead()
			done.Store(seq)
			rd.read++
			if info.pending == 0 && r.tune.listPerEvent > 0 && time.Since(rd.relisted) >= rd.relistAfter {
				// Caught up: would listing every listWait cost less now?
				perWait := rd.read * uint64(r.tune.listWait) / uint64(max(time.Since(rd.relisted), 1))
				if si, err := r.events.Info(ctx); err == nil && r.listable(si) && r.listWorth(si, perWait, r.tune.pollIdle) {
					return nil
				}
				rd.relisted, rd.read = time.Now(), 0
			}
		}
		clear(got)
		buf = got
	}
}
