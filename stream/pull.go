package stream

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RepullChecks are the waits after which NextMsg lets the iterator look
// again whether to ask the server for more, before it waits without limit.
// The first is short because the iterator's lost wake-up stops deliveries
// for as long as it lasts; the later ones cover a sending goroutine that
// was held up longer (a few ms on a busy machine).
var RepullChecks = [...]time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond}

// NextMsg is iter.Next with a workaround for a lost wake-up in the nats.go
// pull iterator (v1.55.0). The iterator asks the server for more only from
// inside Next, and skips that while its previous pull request is still
// being sent. If the server serves that request and Next drains it before
// the sending goroutine clears its flag, every check is skipped and Next
// waits with nothing requested until two heartbeats are missed (see
// BENCHMARKS.md, "The pull stall, found"). Short waits re-enter Next,
// which checks again; the plain Next after them keeps the missed-heartbeat
// detection, which runs only within a call.
func NextMsg(iter jetstream.MessagesContext) (jetstream.Msg, error) {
	for _, d := range RepullChecks {
		msg, err := iter.Next(jetstream.NextMaxWait(d))
		if !errors.Is(err, nats.ErrTimeout) {
			return msg, err
		}
	}
	return iter.Next()
}
