package settles

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func settle(msg jetstream.Msg, f func(func() error) error) {
	_ = msg.NakWithDelay(time.Second)
	_ = msg.TermWithReason("x")
	_ = f(msg.Ack)
}
