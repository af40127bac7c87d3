package relay

import (
	"cmp"
	"context"
	"github.com/relaydev/relay/destination"
	"sync"
	"time"
)

// ackWaitNow is the AckWait held events go by: this replica's, or a
// shorter one of a live replica, which may have set it on the consumers
// (replicas should all run with the same; see runRegistry).
func (r *Relay) ackWaitNow() time.Duration {
	if d := time.Duration(r.ackWait.Load()); d > 0 {
		return d
	}
	return cmp.Or(r.cfg.AckWait, destination.DefaultAckWait) // a Relay not made by New
}

// pinged is an event a replica holds, queued or being attempted. The pull
// loop that took it restarts its AckWait (ping) until the worker settles
// it: its settlements go through pinged, which then stops the pings (one
// after a nak would turn the nak's delay into AckWait).
type pinged struct {
	delivered

	mu   sync.Mutex
	done bool
	// last is when it came or was last pinged; only the pull loop writes
	// it (under mu).
	last time.Time
	// gap is the longest time it went without a ping, between two pings
	// (or its arrival and the first).
	gap time.Duration
}

func (p *pinged) settle(f func() error) error {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	// A ping that took the lock before is on its way before this.
	return f()
}

func (p *pinged) Acknowledge() error { return p.settle(p.delivered.Acknowledge) }
func (p *pinged) AcknowledgeConfirmed(ctx context.Context) error {
	return p.settle(func() error { return p.delivered.AcknowledgeConfirmed(ctx) })
}
func (p *pinged) Redeliver(d time.Duration) error {
	return p.settle(func() error { return p.delivered.Redeliver(d) })
}
func (p *pinged) Terminate(reason string) error {
	return p.settle(func() error { return p.delivered.Terminate(reason) })
}
func (p *pinged) HandBack(confirm bool) error {
	return p.settle(func() error { return p.delivered.HandBack(confirm) })
}

// ping restarts the event's AckWait at now, unless a worker acted on it.
// While the connection is down (connected false) the server cannot hear
// it: nothing is sent (the client would only buffer it), and the silence
// goes on.
func (p *pinged) ping(now time.Time, connected bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || !connected {
		return
	}
	if p.delivered.InProgress() != nil {
		return // not sent: the silence goes on
	}
	p.gap = max(p.gap, now.Sub(p.last))
	p.last = now
}

// unheard is the longest the server went without hearing of the event
// while this replica held it, until now: when that reaches AckWait, the
// server may have handed it to another worker (the process was stopped,
// or paused as long).
func (p *pinged) unheard(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.gap, now.Sub(p.last))
}
