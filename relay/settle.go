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
