package stream

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RepullCheck is how long NextMsg waits before it lets the iterator look
// again whether to ask the server for more.
const RepullCheck = 100 * time.Millisecond

// NextMsg is iter.Next with a workaround for a lost wake-up in the nats.go
// pull iterator (v1.55.0). The iterator asks the server for more only from
// inside Next, and skips that while its previous pull request is still
// being sent. If the server serves that request and Next drains it before
// the sending goroutine clears its flag, every check is skipped and Next
// waits with nothing requested until two heartbeats are missed (see
// BENCHMARKS.md, "The pull stall, found"). A short first wait re-enters
// Next, which checks again; the plain Next after it keeps the missed-
// heartbeat detection, which runs only within a call.
func NextMsg(iter jetstream.MessagesContext) (jetstream.Msg, error) {
	msg, err := iter.Next(jetstream.NextMaxWait(RepullCheck))
	if errors.Is(err, nats.ErrTimeout) {
		return iter.Next()
	}
	return msg, err
}
