package relay

import (
	"time"

	"github.com/relaydev/relay/stream"
)

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
