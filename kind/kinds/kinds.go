// Package kinds registers every destination kind relay delivers to besides
// HTTP (package kind's registry): import it, for its effect, where
// destinations are delivered to, validated or described (the relay
// binary, tests).
package kinds

import (
	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/eventbridge"
	"github.com/relaydev/relay/kind/kafka"
	"github.com/relaydev/relay/kind/natskind"
	"github.com/relaydev/relay/kind/pubsub"
	"github.com/relaydev/relay/kind/rabbitmq"
	"github.com/relaydev/relay/kind/sqs"
)

func init() {
	for _, k := range []kind.Kind{natskind.New(), kafka.New(), rabbitmq.New(), pubsub.New(), sqs.New(), eventbridge.New()} {
		kind.Register(k)
	}
}
