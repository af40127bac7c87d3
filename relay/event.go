package relay

import (
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// event is a stored event taken apart.
type event struct {
	id      string
	dest    string
	key     string // the producer's order key, empty if the event carries none
	seq     uint64
	subject string
	prior   int // attempts made before this stream message
	// origin is the sequence of the message the event first came in as:
	// seq, or for one republished from Redis its Relay-Origin-Seq.
	origin uint64
	// delivered counts JetStream's deliveries of this stream message;
	// stored is when JetStream stored it.
	delivered uint64
	stored    time.Time
	// published is when the producer published the event (a republished
	// copy carries the original's time in a header).
	published time.Time
	// typ is the event's type (stream.Envelope.Type), empty for an event
	// published for one destination.
	typ string
	// body and hdr are the event's own, as stored.
	body []byte
	hdr  nats.Header
	// parked is the last sequence of this event relay parked in Redis, as
	// its attempt log said (0: not parked, or not read).
	parked uint64
}

// eventOf takes apart a delivered message. Relay's headers on a message
// without relay's seal (a producer's) are dropped, and said so in a
// warning a minute per destination at most.
func (r *Relay) eventOf(msg message) (event, error) {
	info, ok := parseAckReply(msg.Reply())
	if !ok {
		meta, err := msg.Metadata()
		if err != nil {
			return event{}, fmt.Errorf("message without JetStream metadata: %w", err)
		}
		info = ackInfo{streamSeq: meta.Sequence.Stream, delivered: meta.NumDelivered, stored: meta.Timestamp}
	}
	ev, unsealed, err := newEvent(msg.Subject(), info, msg.Data(), msg.Headers(), r.seal)
	if unsealed != nil && err == nil {
		if ok, held := r.unsealedWarn.Allow(ev.dest, r.cfg.Now()); ok {
			r.log.Warn("relay's headers on an event relay did not publish were dropped: a producer may not set them (see docs/security.md#producers-and-relays-headers)",
				"dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "headers", unsealed, "held_back", held)
		}
	}
	return ev, err
}

// rawEvent is eventOf for a message read from the stream by sequence (as if
// delivered once), seal its seal (see stream.Decode).
func rawEvent(msg *jetstream.RawStreamMsg, seal *stream.Seal) (event, error) {
	ev, _, err := newEvent(msg.Subject, ackInfo{streamSeq: msg.Sequence, delivered: 1, stored: msg.Time}, msg.Data, msg.Header, seal)
	return ev, err
}

// newEvent takes apart an event stored on subject, and names the headers
// of relay's it dropped for want of seal's seal (see stream.Decode).
func newEvent(subject string, info ackInfo, body []byte, h nats.Header, seal *stream.Seal) (event, []string, error) {
	e, err := stream.Decode(subject, info.streamSeq, info.stored, h, body, seal)
	if err != nil {
		return event{}, nil, err
	}
	return event{
		id: e.ID, dest: e.Dest, key: e.Key, typ: e.Type, seq: e.Seq, subject: subject, prior: e.Attempt, origin: e.Origin,
		delivered: info.delivered, stored: e.Stored, published: e.Published, body: body, hdr: e.Headers,
	}, e.Unsealed, nil
}

// eventHeaders returns the event's own headers to pass on, nil if none.
func eventHeaders(h nats.Header) http.Header {
	return stream.Envelope{Headers: h}.HTTPHeader()
}

// ackInfo is what relay needs of a JetStream message's metadata.
type ackInfo struct {
	streamSeq uint64
	delivered uint64
	stored    time.Time
	pending   uint64 // what the consumer had left to deliver after this one
	consSeq   uint64 // the consumer's sequence of this delivery
}

// parseAckReply reads ackInfo from a JetStream ack subject without
// allocating (stream.ParseAck), and reports false for anything else.
func parseAckReply(reply string) (ackInfo, bool) {
	md, ok := stream.ParseAck(reply)
	if !ok {
		return ackInfo{}, false
	}
	return ackInfo{
		streamSeq: md.Sequence.Stream,
		delivered: md.NumDelivered,
		stored:    md.Timestamp,
		pending:   md.NumPending,
		consSeq:   md.Sequence.Consumer,
	}, true
}
