package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream"
)

// keysBodySize is the body of scenario (k)'s events: small, so that the
// server's memory per event (and per subject) is what shows.
const keysBodySize = 256

// scenarioK: order keys. -keys-n events to one ordered destination,
// published while it is paused, first all with one key, then each with a
// key of its own, each on a new server. It measures the NATS server's
// memory once they are stored: the bench process's RSS after a GC (the
// embedded server; the publisher is idle by then), against the same before
// publishing. Then it resumes the destination and starts relay, and
// records relay's peak RSS until -keys-drain events are delivered (one key
// is delivered one event at a time, so not all of them).
func (b *bench) scenarioK(ctx context.Context) ([]*result, error) {
	var out []*result
	for i, distinct := range []bool{false, true} {
		if i > 0 {
			logf("new embedded NATS server for (k) with distinct keys")
			if err := b.restartNATS(ctx); err != nil {
				return nil, err
			}
		}
		r, err := b.keysRun(ctx, distinct)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (b *bench) keysRun(ctx context.Context, distinct bool) (*result, error) {
	n, drain := b.opts.keysN, min(b.opts.keysDrain, b.opts.keysN)
	r := &result{Scenario: "k", Title: "order keys", System: "relay, one key", Events: drain, LatencyKind: "queue"}
	dest := "k1"
	if distinct {
		r.System, dest = "relay, a key per event", "kn"
	}
	if err := b.addDest(ctx, destination.Destination{Name: dest, Ordered: true, PausedUntil: destination.Forever, PauseReason: destination.PauseOperator}); err != nil {
		return nil, err
	}
	if err := b.settleUnrouted(ctx); err != nil {
		return nil, err
	}
	base := selfRSSAfterGC()
	logf("  publishing %d events with %s (async, windows of %d)", n, map[bool]string{false: "one key", true: "a key each"}[distinct], b.opts.window)
	start := time.Now()
	for i := range n {
		key := "customer-1"
		if distinct {
			key = "customer-" + strconv.Itoa(i)
		}
		if err := b.pub.publishKeyed(dest, key, dest+"-"+strconv.Itoa(i)); err != nil {
			return nil, err
		}
		if (i+1)%b.opts.window == 0 {
			if err := b.pub.wait(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := b.pub.wait(ctx); err != nil {
		return nil, err
	}
	pd := time.Since(start)
	r.PublishSecs, r.PublishRate = pd.Seconds(), float64(n)/pd.Seconds()
	r.NATSBaseMB = base
	r.NATSRSSMB = selfRSSAfterGC()
	st, err := b.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return nil, err
	}
	subjects := st.CachedInfo().State.NumSubjects
	logf("  published in %.1fs (%.0f/s); bench process (NATS server) RSS %.0f MB -> %.0f MB; %d subjects", pd.Seconds(), r.PublishRate, base, r.NATSRSSMB, subjects)
	r.Notes = append(r.Notes, fmt.Sprintf("%d events of %d bytes, %d subjects in the events stream; NATS server (bench process) RSS after GC %.0f MB before publishing, %.0f MB after (%+.0f MB)",
		n, keysBodySize, subjects, base, r.NATSRSSMB, r.NATSRSSMB-base))

	if _, err := b.store.Update(ctx, dest, func(d *destination.Destination) error {
		d.PausedUntil, d.PauseReason = time.Time{}, ""
		return nil
	}); err != nil {
		return nil, fmt.Errorf("resume %s: %w", dest, err)
	}
	if err := b.sinkReset(ctx); err != nil {
		return nil, err
	}
	logf("  starting relay; waiting for %d deliveries", drain)
	m := b.mark()
	start = time.Now()
	p, err := b.startRelay("k-" + dest)
	if err != nil {
		return nil, err
	}
	defer p.stop(20 * time.Second)
	first, err := b.waitDelivered(ctx, int64(drain), p, limitFor(drain))
	if err != nil {
		return nil, err
	}
	el := time.Since(start)
	r.procFigures(p, 0)
	if err := b.finish(ctx, r, m, start, first, el); err != nil {
		return nil, err
	}
	r.Notes = append(r.Notes, b.relayNotes(ctx, p)...)
	if err := p.stop(20 * time.Second); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	logf("  relay: %d delivered in %.1fs = %.0f/s, peak RSS %.1f MB", r.Delivered, r.Seconds, r.PerSecond, r.ProcRSSMB)
	return r, nil
}

// selfRSSAfterGC is this process's resident set in MB after a garbage
// collection that returns freed memory to the system.
func selfRSSAfterGC() float64 {
	runtime.GC()
	debug.FreeOSMemory()
	kb, err := procStatusKB(os.Getpid(), "VmRSS:")
	if err != nil {
		return 0
	}
	return float64(kb) / 1024
}

// publishKeyed publishes event id for dest with order key key, as relay's
// producer does: to relay.in.<dest>.<key token>, with Relay-Order-Key.
func (p *publisher) publishKeyed(dest, key, id string) error {
	body := makeBody(time.Now().UnixNano(), id)
	body = append(body[:keysBodySize-2:keysBodySize-2], `"}`...)
	m := stream.Envelope{ID: id, Key: key, Body: body}.Msg(stream.Produced, stream.InSubject(dest, key), nil)
	if _, err := p.js.PublishMsgAsync(m); err != nil {
		return fmt.Errorf("publish %s: %w", id, err)
	}
	return nil
}
