package relay

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// settler is what can be done to a message relay was handed: its
// settlement. The engine settles messages only through it, and only as
// Decide (or DecideAdmit, for the shared consumer's admission) chose, so
// that a JetStream message (jsMsg) and a destination's share of a fan-out
// message (fanDelivery) go through the same door. A test
// (TestOnlyTheJetStreamSideSettles) fails if other code of the package
// calls JetStream's ack methods itself.
type settler interface {
	// Acknowledge acks the message, without waiting for the server.
	Acknowledge() error
	// AcknowledgeConfirmed acks it and waits for the server to confirm.
	AcknowledgeConfirmed(ctx context.Context) error
	// Redeliver hands it back to be delivered again after delay (a nak
	// with that delay; 0: at once).
	Redeliver(delay time.Duration) error
	// Terminate gives it up for good (reason may be empty).
	Terminate(reason string) error
	// HandBack returns it, unattempted, to be delivered again at once, in
	// a way a restart of the server keeps; with confirm, it waits for the
	// server to confirm it and every settlement sent before it.
	HandBack(confirm bool) error
}

// settleAtStop settles the messages of back, which a stopping pull loop
// holds and no worker started on, as Decide says (Input.Stopping): all but
// the last at once, then, once between returned (the workers finished),
// the last, confirmed, so that the server has stored every hand-back and
// every ack of the workers before a server that stops next (the embedded
// one, with relay) could drop them. It returns the confirmation's error.
func settleAtStop[S settler](back []S, between func()) error {
	dec := Decide(Input{Stopping: true})
	settle := func(m S, confirm bool) error {
		if dec.Action != HandBack {
			panic("relay: Decide chose " + dec.Action.String() + " for a message no worker started")
		}
		return m.HandBack(confirm)
	}
	for i, m := range back {
		if i < len(back)-1 {
			_ = settle(m, false)
		}
	}
	between()
	if len(back) == 0 {
		return nil
	}
	return settle(back[len(back)-1], true)
}

// message is what relay reads of a delivered message.
type message interface {
	Subject() string
	Reply() string
	Headers() nats.Header
	Data() []byte
	Metadata() (*jetstream.MsgMetadata, error)
}

// delivered is a message a pull loop holds: what relay reads of it, its
// in-progress ack (which restarts its AckWait), and its settlement.
type delivered interface {
	message
	InProgress() error
	settler
}
