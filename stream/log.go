package stream

// The delivery log: records of attempts (and of events a destination's
// filter turned down or that were dead-lettered without an attempt), in the
// stream LogStream. A message holds a batch of records, one JSON object a
// line, of one destination and status class, on
//
//	relay.log.<dest>.<class>
//
// where class is the attempts' status class (LogClass); a destination's
// records, or those of one class, are a filter on a literal subject. One
// event's records are found through the index: a message on
//
//	relay.logidx.<bucket>
//
// lists, one JSON object a line, the event ids of the records batched
// then, with the sequence of the message that holds each, where bucket is
// one of LogIndexBuckets buckets of event ids (EventBucket). An event's
// lookup reads its bucket of the index, 1/LogIndexBuckets of it, then the
// messages it names. Records are batched (a message per destination and
// class, and per bucket, for what a writer gathered in a moment) because a
// message costs the NATS server about as much as a small record's whole
// delivery; and ids are bucketed, not kept whole in subjects, because the
// server keeps an index entry of about 250 bytes for every distinct
// subject (measured). A typed event's routing is recorded on
// relay.log._route.none (no destination name starts with '_').
const (
	LogStream = "RELAY_LOG"
	LogPrefix = "relay.log"
	// LogIndexPrefix is the index's subjects' prefix.
	LogIndexPrefix = "relay.logidx"
	// LogRoute is the destination token of typed events' routing records.
	LogRoute = "_route"
	// LogBatchMax is the most records a message of the log holds: a
	// record's place in the log (its Seq) is the message's sequence times
	// 256 plus its index in the message.
	LogBatchMax = 255
)

// The status classes of the delivery log's subjects.
const (
	Class2xx   = "2xx"
	Class3xx   = "3xx"
	Class4xx   = "4xx"
	Class5xx   = "5xx"
	ClassError = "error" // no response: a transport error, a timeout, a refused address
	ClassNone  = "none"  // no attempt: filtered out, or dead-lettered without one
)

// LogClasses are the status classes, in the order they are listed.
var LogClasses = []string{Class2xx, Class3xx, Class4xx, Class5xx, ClassError, ClassNone}

// LogClass is the status class of an attempt that came back with status
// (0: no response), or ClassNone when no attempt was made.
func LogClass(attempted bool, status int) string {
	switch {
	case !attempted:
		return ClassNone
	case status >= 200 && status < 300:
		return Class2xx
	case status >= 300 && status < 400:
		return Class3xx
	case status >= 400 && status < 500:
		return Class4xx
	case status >= 500 && status < 600:
		return Class5xx
	}
	return ClassError
}

// LogIndexBuckets is the number of buckets of event ids in the index's
// subjects. It is part of the stored subject and must not change for an
// existing log.
const LogIndexBuckets = 32

// EventBucket is the bucket of an event id in the index's subjects:
// FNV-1a of the id mod LogIndexBuckets, in two hex digits. (A fast hash:
// the writer computes one per record.)
func EventBucket(id string) string {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return indexBucketTokens[h%LogIndexBuckets]
}

// indexBucketTokens are the buckets' tokens, "00" to "1f".
var indexBucketTokens = func() (t [LogIndexBuckets]string) {
	const hexDigits = "0123456789abcdef"
	for i := range t {
		t[i] = string([]byte{hexDigits[i>>4], hexDigits[i&0xf]})
	}
	return t
}()

// LogSubject is the subject of a batch of records of dest and class.
// Empty dest or class stand for every one ("*"), making a filter.
func LogSubject(dest, class string) string {
	return LogPrefix + "." + orAll(dest) + "." + orAll(class)
}

// LogIndexSubject is the index's subject for the ids of bucket.
func LogIndexSubject(bucket string) string { return LogIndexPrefix + "." + bucket }

func orAll(tok string) string {
	if tok == "" {
		return "*"
	}
	return tok
}
