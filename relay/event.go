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
	// body and hdr are the event's own, as stored.
	body []byte
	hdr  nats.Header
	// parked is the last sequence of this event relay parked in Redis, as
	// its attempt log said (0: not parked, or not read).
	parked uint64
}

func eventOf(msg message) (event, error) {
	info, ok := parseAckReply(msg.Reply())
	if !ok {
		meta, err := msg.Metadata()
		if err != nil {
			return event{}, fmt.Errorf("message without JetStream metadata: %w", err)
		}
		info = ackInfo{streamSeq: meta.Sequence.Stream, delivered: meta.NumDelivered, stored: meta.Timestamp}
	}
	return newEvent(msg.Subject(), info, msg.Data(), msg.Headers())
}

// rawEvent is eventOf for a message read from the stream by sequence (as if
// delivered once).
func rawEvent(msg *jetstream.RawStreamMsg) (event, error) {
	return newEvent(msg.Subject, ackInfo{streamSeq: msg.Sequence, delivered: 1, stored: msg.Time}, msg.Data, msg.Header)
}

// newEvent takes apart an event stored on subject.
func newEvent(subject string, info ackInfo, body []byte, h nats.Header) (event, error) {
	e, err := stream.Decode(subject, info.streamSeq, info.stored, h, body)
	if err != nil {
		return event{}, err
	}
	return event{
		id: e.ID, dest: e.Dest, key: e.Key, seq: e.Seq, subject: subject, prior: e.Attempt, origin: e.Origin,
		delivered: info.delivered, stored: e.Stored, published: e.Published, body: body, hdr: h,
	}, nil
}

// eventHeaders returns the event's own headers to pass on, nil if none.
func eventHeaders(h nats.Header) http.Header {
	return stream.Envelope{Headers: h}.HTTPHeader()
}
