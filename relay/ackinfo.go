package relay

import (
	"math"
	"strings"
	"time"
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
// allocating, as jetstream.Msg.Metadata does on the hot path. It accepts
// both layouts (ADR-15):
//
//	v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	v2: $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...]
//
// and reports false for anything else (the caller then asks Metadata).
func parseAckReply(reply string) (ackInfo, bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return ackInfo{}, false
	}
	// Tokens after "$JS.ACK.": 7 in v1, at least 9 in v2, whose tokens
	// after the ninth are ignored (nats.go does the same: they may change).
	var tok [9]string
	k, more := 0, true
	for more && k < len(tok) {
		tok[k], rest, more = strings.Cut(rest, ".")
		k++
	}
	// Positions of delivered, stream sequence and timestamp.
	var d, s, t int
	switch {
	case k == 7 && !more:
		d, s, t = 2, 3, 5
	case k == 9:
		d, s, t = 4, 5, 7
	default:
		return ackInfo{}, false
	}
	delivered, ok1 := digits(tok[d])
	seq, ok2 := digits(tok[s])
	ns, ok3 := digits(tok[t])
	pending, ok4 := digits(tok[t+1])
	cseq, ok5 := digits(tok[s+1])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || ns > math.MaxInt64 {
		return ackInfo{}, false
	}
	return ackInfo{streamSeq: seq, delivered: delivered, stored: time.Unix(0, int64(ns)), pending: pending, consSeq: cseq}, true
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
