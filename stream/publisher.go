package stream

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// AsyncPublisher is js with room for maxPending asynchronous publishes not
// yet acknowledged, each failed after 30s without its acknowledgement, in
// js's domain or API prefix.
func AsyncPublisher(js jetstream.JetStream, maxPending int) (jetstream.JetStream, error) {
	opts := []jetstream.JetStreamOpt{jetstream.WithPublishAsyncMaxPending(maxPending), jetstream.WithPublishAsyncTimeout(30 * time.Second)}
	if o := js.Options(); o.Domain != "" {
		return jetstream.NewWithDomain(js.Conn(), o.Domain, opts...)
	}
	return jetstream.NewWithAPIPrefix(js.Conn(), APIPrefix(js), opts...)
}
