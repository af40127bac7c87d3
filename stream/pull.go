package stream

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// repullChecks are the waits after which NextMsg lets the iterator look
// again whether to ask the server for more, before it waits without limit.
// The first is short because the iterator's lost wake-up stops deliveries
// for as long as it lasts; the later ones cover a sending goroutine that
// was held up longer (a few ms on a busy machine).
var repullChecks = [...]time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond}

// NextMsg is iter.Next with a workaround for a lost wake-up in the nats.go
// pull iterator (v1.55.0). The iterator asks the server for more only from
// inside Next, and skips that while its previous pull request is still
// being sent. If the server serves that request and Next drains it before
// the sending goroutine clears its flag, every check is skipped and Next
// waits with nothing requested until two heartbeats are missed (see
// docs/performance.md). Short waits re-enter Next,
// which checks again; the plain Next after them keeps the missed-heartbeat
// detection, which runs only within a call.
//
// nc is iter's connection. While it is down, NextMsg keeps to short waits:
// nats.go stops only the heartbeat timer of the call that sees the
// disconnect, so a plain Next started after that would report a missed
// heartbeat every two heartbeats, and each report queues one more pull
// request for the reconnect (more than the client has room for).
//
// The last wait ends when ctx does (context.Background(): only when iter is
// stopped or a message comes), returning ctx's error.
func NextMsg(ctx context.Context, iter jetstream.MessagesContext, nc *nats.Conn) (jetstream.Msg, error) {
	for _, d := range repullChecks {
		msg, err := iter.Next(jetstream.NextMaxWait(d))
		if !errors.Is(err, nats.ErrTimeout) {
			return msg, err
		}
	}
	for !nc.IsConnected() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		msg, err := iter.Next(jetstream.NextMaxWait(repullChecks[len(repullChecks)-1]))
		if !errors.Is(err, nats.ErrTimeout) {
			return msg, err
		}
	}
	if ctx.Done() == nil {
		return iter.Next() // nothing to end it but iter.Stop()
	}
	return iter.Next(jetstream.NextContext(ctx))
}
