package destination

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/stream"
)

// SharedConsumer is the durable consumer of the events stream that serves
// every shared destination. Destination names have no upper-case letters:
// it never collides with a destination's consumer.
const SharedConsumer = "relay_Shared"

// LaneConsumerName is the durable consumer of shared destination dest's
// lane.
func LaneConsumerName(dest string) string { return "relay_" + dest + "_L" }

// sharedMaxAckPending bounds the shared consumer's events handed out
// and not acknowledged: held by the replicas, and waiting in JetStream
// for a retry (a destination's queue bounds what it holds, and its lane
// takes what it cannot take in time).
const sharedMaxAckPending = 100_000

// sharedConsumerConfig is the shared consumer's configuration, starting
// at stream sequence start when it is created.
func sharedConsumerConfig(start uint64, ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        SharedConsumer,
		Description:    "relay deliveries to the shared destinations",
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    max(start, 1),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxDeliver:     -1,
		MaxAckPending:  sharedMaxAckPending,
		FilterSubjects: stream.SharedFilters(),
	}
}

// ensureShared creates the shared consumer, starting at stream sequence
// start, unless it exists. A replica gives its AckWait, which an existing
// consumer takes on; 0 (relay dest add) keeps an existing consumer's, and
// creates one with DefaultAckWait.
func EnsureShared(ctx context.Context, js jetstream.JetStream, start uint64, ackWait time.Duration) error {
	if c, err := js.Consumer(ctx, stream.EventsStream, SharedConsumer); err == nil {
		// One made by an earlier relay may filter fewer subjects (it
		// had no fan-out messages): it takes them on from now.
		cfg := c.CachedInfo().Config
		want := stream.SharedFilters()
		if !slices.Equal(cfg.FilterSubjects, want) || ackWait != 0 && cfg.AckWait != ackWait {
			cfg.FilterSubjects, cfg.FilterSubject = want, ""
			if ackWait != 0 {
				cfg.AckWait = ackWait
			}
			if _, err := js.UpdateConsumer(ctx, stream.EventsStream, cfg); err != nil {
				return fmt.Errorf("update consumer %s: %w", SharedConsumer, err)
			}
		}
		return nil
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %s: %w", SharedConsumer, err)
	}
	if ackWait == 0 {
		ackWait = DefaultAckWait
	}
	_, err := js.CreateConsumer(ctx, stream.EventsStream, sharedConsumerConfig(start, ackWait))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("create consumer %s: %w", SharedConsumer, err)
	}
	return nil
}

// ConsumerName is the durable consumer of destination dest.
func ConsumerName(dest string) string { return "relay_" + dest }

// CountAfter counts the events of the events stream on filters stored
// after sequence after: an ephemeral consumer's count of what it has to
// deliver is exact (the server walks the subjects' index for it).
func CountAfter(ctx context.Context, js jetstream.JetStream, filters []string, after uint64) (uint64, error) {
	cfg := jetstream.ConsumerConfig{Description: "relay count", FilterSubjects: filters, AckPolicy: jetstream.AckNonePolicy,
		MemoryStorage: true, InactiveThreshold: 10 * time.Second, Replicas: 1}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	c, err := js.CreateConsumer(ctx, stream.EventsStream, cfg)
	if err != nil {
		return 0, fmt.Errorf("count events of %s: %w", stream.EventsStream, err)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	defer func() { _ = js.DeleteConsumer(dctx, stream.EventsStream, c.CachedInfo().Name) }()
	return c.CachedInfo().NumPending, nil
}

// DefaultAckWait is Config.AckWait's default: the AckWait of relay's
// consumers. A replica restarts it (an in-progress ack) every third of it
// for every event it holds, queued or being attempted, so that an attempt
// of any timeout, and a wait for the destination's rate limit, fit in it;
// and an event held by a replica that died or stopped (kill -9, SIGSTOP, a
// network cut) goes to another within AckWait, whatever the destination's
// timeout. A third leaves room for a ping late by a few seconds (a busy
// machine, a reconnect).
//
// 15 s (NATS's default, and relay's until issue 44, is 30 s): when a
// cluster node that leads a consumer dies, the acks on their way to it
// are lost and those events come back after AckWait; relay-bench (r)
// measured its copies 30.0 s after the kill with 30 s, and a target of
// under 30 s. The cost is an in-progress ack every 5 s for an event
// held that long, and a replica paused over 15 s hands its events on.
const DefaultAckWait = 15 * time.Second
