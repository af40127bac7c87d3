package stream

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ParseAck reads the metadata in a JetStream ack subject (the reply subject
// of a message a consumer delivered), in either layout (ADR-15):
//
//	v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	v2: $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...]
//
// as nats.go's Metadata does (tokens after the ninth of v2 are ignored: they
// may change), but without allocating: relay reads it for every event. It
// reports false for anything else.
func ParseAck(reply string) (jetstream.MsgMetadata, bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return jetstream.MsgMetadata{}, false
	}
	var tok [9]string
	k, more := 0, true
	for more && k < len(tok) {
		tok[k], rest, more = strings.Cut(rest, ".")
		k++
	}
	var md jetstream.MsgMetadata
	var t []string // stream, consumer, delivered, stream seq, consumer seq, time, pending
	switch {
	case k == 7 && !more:
		t = tok[:7]
	case k == 9:
		if md.Domain = tok[0]; md.Domain == "_" {
			md.Domain = ""
		}
		t = tok[2:]
	default:
		return jetstream.MsgMetadata{}, false
	}
	var n [5]uint64
	for i := range n {
		if n[i], ok = digits(t[2+i]); !ok {
			return jetstream.MsgMetadata{}, false
		}
	}
	if n[3] > math.MaxInt64 {
		return jetstream.MsgMetadata{}, false
	}
	md.Stream, md.Consumer = t[0], t[1]
	md.NumDelivered = n[0]
	md.Sequence = jetstream.SequencePair{Stream: n[1], Consumer: n[2]}
	md.Timestamp = time.Unix(0, int64(n[3]))
	md.NumPending = n[4]
	return md, true
}

// AckMetadata is ParseAck for jetstream.Msg.Metadata.
func AckMetadata(reply string) (*jetstream.MsgMetadata, error) {
	md, ok := ParseAck(reply)
	if !ok {
		return nil, jetstream.ErrNotJSMessage
	}
	return &md, nil
}

// digits parses a non-empty decimal number of ASCII digits only (no sign),
// refusing one that overflows.
func digits(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		next := n*10 + uint64(c-'0')
		if n > math.MaxUint64/10 || next < n*10 {
			return 0, false
		}
		n = next
	}
	return n, true
}

// AckSubject is the ack subject (v1 layout) of the message at stream
// sequence sseq that consumer of stream handed out as its delivery cseq.
// An ack sent to it acknowledges that message while the consumer still
// waits for it, whoever it was handed to: for a message known to be settled
// whose ack was lost, it saves waiting out AckWait.
func AckSubject(stream, consumer string, sseq, cseq uint64) string {
	return "$JS.ACK." + stream + "." + consumer + ".1." + strconv.FormatUint(sseq, 10) + "." + strconv.FormatUint(cseq, 10) + ".0.0"
}
