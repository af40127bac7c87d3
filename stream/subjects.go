// Package stream owns everything JetStream: the subject and header contract that
// producers publish to, the stream and bucket definitions, and the pull
// client. The embedded nats-server is in package stream/embedded, the only
// one of relay that imports nats-server.
package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The subject contract. A producer publishes an event for destination D to
//
//	relay.in.D        (no order key)
//	relay.in.D.K      (order key K, a single subject token)
//
// The events stream stores keyed events under relay.ev.D.B, where B is the
// bucket FNV-1a(K) mod Buckets computed by the server's subject transform
// (see Bucket), so consumers can select partitions without reading the key.
// The key token is not kept in the stored subject: every live subject costs
// the server memory (about 400 bytes), and a sender keyed by customer id has
// millions of keys. The key itself travels in the Relay-Order-Key header.
const (
	InPrefix    = "relay.in"
	KeyedPrefix = "relay.ev"
	DLQPrefix   = "relay.dlq"
	// DLQTenantPrefix: a tenant's dead letters (see DLQSubject).
	DLQTenantPrefix = "relay.tdlq"
	// LanePrefix: relay.lane.D holds the events of a shared destination D
	// that relay moved off the shared consumer while D could not keep up
	// (see LaneSubject).
	LanePrefix = "relay.lane"
	// FanSubject holds a typed event's fan-out to shared destinations: one
	// message (a Fanned publish) for up to FanChunk of them, which the
	// shared consumer delivers to each (see Fanned).
	FanSubject = "relay.fan"
	// FanChunk is the most destinations one fan-out message names.
	FanChunk = 100

	// Buckets is the number of hash buckets of order keys. It is part of the
	// stored subject and must not change for an existing stream.
	Buckets = 64
)

// Stream and bucket names.
const (
	EventsStream   = "RELAY_EVENTS"
	DLQStream      = "RELAY_DLQ"
	DestBucket     = "relay_destinations"
	AttemptsBucket = "relay_attempts"
	ReplicasBucket = "relay_replicas"
	StateBucket    = "relay_state"
	OrderedBucket  = "relay_ordered"
	KeysBucket     = "relay_api_keys"
	TenantsBucket  = "relay_tenants"
	// PortalBucket holds the customer portal's sessions (package portal).
	PortalBucket = "relay_portal"
	// EventTypesBucket is the catalog of event types (package eventtype).
	EventTypesBucket = "relay_event_types"
)

var destNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidateDestName reports whether name can name a destination: 1 to 64
// characters of lower-case letters, digits, '-' and '_', starting with a letter
// or digit. Names become subject tokens and consumer names.
func ValidateDestName(name string) error {
	if !destNameRE.MatchString(name) {
		return fmt.Errorf("invalid destination name %q: use 1-64 characters a-z, 0-9, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

var keyTokenRE = regexp.MustCompile(`^[A-Za-z0-9_:=-]{1,64}$`)

// KeyToken maps an arbitrary order key to a single subject token. A key made of
// up to 64 characters from [A-Za-z0-9_:=-] is used as it is, so producers using
// a plain NATS client can publish with such keys directly; any other key is
// replaced by "h-" and the first 32 hex digits of its SHA-256. Two keys that map
// to the same token are ordered together, which is safe.
func KeyToken(key string) string {
	if keyTokenRE.MatchString(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "h-" + hex.EncodeToString(sum[:16])
}

// InSubject is the subject a producer publishes to for destination dest and
// order key key (empty: no key).
func InSubject(dest, key string) string {
	if key == "" {
		return InPrefix + "." + dest
	}
	return InPrefix + "." + dest + "." + KeyToken(key)
}

// DLQSubject is the dead-letter subject of destination dest (a DestRef):
// relay.dlq.D, or for a tenant's T=N, relay.tdlq.T.N (so that a filter
// selects a tenant's).
func DLQSubject(dest string) string {
	if t, n := SplitDestRef(dest); t != "" {
		return DLQTenantPrefix + "." + t + "." + n
	}
	return DLQPrefix + "." + dest
}

// DLQDest is the destination (a DestRef) of dead-letter subject subj, and
// false when subj is not one.
func DLQDest(subj string) (string, bool) {
	if d, ok := strings.CutPrefix(subj, DLQPrefix+"."); ok {
		return d, d != "" && !strings.Contains(d, ".")
	}
	if tn, ok := strings.CutPrefix(subj, DLQTenantPrefix+"."); ok {
		t, n, ok := strings.Cut(tn, ".")
		return t + RefSep + n, ok && t != "" && n != "" && !strings.Contains(n, ".")
	}
	return "", false
}

// DLQFilters are the filter subjects of the dead letters of dest, when
// given; else of tenant's destinations when scoped (tenant "": those of
// no tenant); else of every destination.
func DLQFilters(scoped bool, tenant, dest string) []string {
	switch {
	case dest != "":
		return []string{DLQSubject(dest)}
	case scoped && tenant != "":
		return []string{DLQTenantPrefix + "." + tenant + ".*"}
	case scoped:
		return []string{DLQPrefix + ".*"}
	}
	return []string{DLQPrefix + ".*", DLQTenantPrefix + ".*.*"}
}

// DestFilters are the filter subjects that select every event of dest (a
// DestRef): for a tenant's destination, also those its producers publish
// to (see TenantPrefix).
func DestFilters(dest string) []string {
	f := []string{InPrefix + "." + dest, KeyedPrefix + "." + dest + ".>"}
	if t, n := SplitDestRef(dest); t != "" {
		f = append(f, tenantFilters(t, n)...)
	}
	return f
}

// UnkeyedFilters are the filter subjects of dest's events without an
// order key (of DestFilters).
func UnkeyedFilters(dest string) []string {
	f := []string{InPrefix + "." + dest}
	if t, n := SplitDestRef(dest); t != "" {
		f = append(f, TenantPrefix+"."+t+".in."+n)
	}
	return f
}

// SharedFilters are the filter subjects of the shared consumer: every
// destination's events as stored (not its lane).
func SharedFilters() []string {
	return []string{InPrefix + ".*", KeyedPrefix + ".*.*", TenantPrefix + ".*.in.*", TenantKeyedPrefix + ".*.*.*", FanSubject}
}

// LaneSubject is the lane of shared destination dest: its events that
// relay moved off the shared consumer (a Laned publish) while dest could
// not keep up, delivered from there by a consumer of dest's own.
func LaneSubject(dest string) string { return LanePrefix + "." + dest }

// Bucket is the bucket of key token tok: FNV-1a of the token mod Buckets,
// the hash nats-server's {{partition(Buckets,2)}} computes for the stored
// subject (TestBucketAgreesWithTheServer holds the two together).
func Bucket(tok string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(tok))
	return int(h.Sum32() % Buckets)
}

// bucketTokens[b] is a key token whose bucket is b.
var bucketTokens = func() (toks [Buckets]string) {
	left := Buckets
	for i := 0; left > 0; i++ {
		tok := "relay-bucket-" + strconv.Itoa(i)
		if b := Bucket(tok); toks[b] == "" {
			toks[b] = tok
			left--
		}
	}
	return toks
}()

// Parsed is a stored event subject taken apart.
type Parsed struct {
	Dest string
	// KeyToken is the order key token of an input subject relay.in.D.K;
	// empty for an event without an order key and for a stored keyed
	// event (relay.ev.D.B), whose subject keeps only the bucket.
	KeyToken string
	Bucket   int // the bucket of a stored keyed event, else -1
	// Lane: a shared destination's lane (relay.lane.D).
	Lane bool
}

// ParseSubject takes apart a stored events subject (relay.in.D,
// relay.ev.D.B, a lane, relay.lane.D, or a tenant's relay.t.T.in.N or
// relay.tev.T.N.B, whose Dest is T=N), or an input subject relay.in.D.K or
// relay.t.T.in.N.K.
func ParseSubject(subj string) (Parsed, error) {
	// Split into at most 6 tokens without allocating: this runs per event.
	var tok [6]string
	n, rest := 0, subj
	for more := true; more; n++ {
		if n == len(tok) {
			return Parsed{}, fmt.Errorf("subject %q is not a relay event subject", subj)
		}
		tok[n], rest, more = strings.Cut(rest, ".")
		if t := tok[n]; t == "" || t == "*" || t == ">" {
			return Parsed{}, fmt.Errorf("subject %q is not a relay event subject", subj)
		}
	}
	if tok[0] != "relay" {
		return Parsed{}, fmt.Errorf("subject %q is not a relay event subject", subj)
	}
	bucket := func(t string) (int, error) {
		b, err := strconv.Atoi(t)
		if err != nil || b < 0 || b >= Buckets || strconv.Itoa(b) != t {
			return 0, fmt.Errorf("subject %q: bad bucket token %q", subj, t)
		}
		return b, nil
	}
	switch {
	case n == 3 && tok[1] == "in":
		return Parsed{Dest: tok[2], Bucket: -1}, nil
	case n == 3 && tok[1] == "lane":
		return Parsed{Dest: tok[2], Bucket: -1, Lane: true}, nil
	case n == 4 && tok[1] == "in":
		return Parsed{Dest: tok[2], KeyToken: tok[3], Bucket: -1}, nil
	case n == 4 && tok[1] == "ev":
		b, err := bucket(tok[3])
		if err != nil {
			return Parsed{}, err
		}
		return Parsed{Dest: tok[2], Bucket: b}, nil
	case (n == 5 || n == 6) && tok[1] == "t" && tok[3] == "in" || n == 5 && tok[1] == "tev":
		// A tenant's: neither its id nor the name may hold RefSep.
		tenant, name := tok[2], tok[4]
		if tok[1] == "tev" {
			name = tok[3]
		}
		if strings.Contains(tenant, RefSep) || strings.Contains(name, RefSep) {
			return Parsed{}, fmt.Errorf("subject %q is not a relay event subject", subj)
		}
	}
	switch {
	case n == 5 && tok[1] == "t" && tok[3] == "in":
		return Parsed{Dest: tok[2] + RefSep + tok[4], Bucket: -1}, nil
	case n == 6 && tok[1] == "t" && tok[3] == "in":
		return Parsed{Dest: tok[2] + RefSep + tok[4], KeyToken: tok[5], Bucket: -1}, nil
	case n == 5 && tok[1] == "tev":
		b, err := bucket(tok[4])
		if err != nil {
			return Parsed{}, err
		}
		return Parsed{Dest: tok[2] + RefSep + tok[3], Bucket: b}, nil
	}
	return Parsed{}, fmt.Errorf("subject %q is not a relay event subject", subj)
}

// IsInputSubject reports whether subj is an input subject of destination
// dest (a DestRef): relay.in.<dest>[.<key token>], or for a tenant's,
// relay.t.<tenant>.in.<name>[.<key token>].
func IsInputSubject(subj, dest string) bool {
	p, err := ParseSubject(subj)
	return err == nil && p.Bucket < 0 && !p.Lane && p.Dest == dest && ValidateDestRef(dest) == nil
}

// InputSubject is the subject to republish the event with order key key
// (Relay-Order-Key, "" if it has none) stored on p, so that it goes through
// the same partitioning again and lands in the same bucket. A stored keyed
// event is republished under KeyToken(key) when that token falls in its
// bucket (events published with relay's key tokens), else under a token of
// relay's that does: an event a plain NATS client published without the
// header, or with a token of its own, keeps its bucket and so its order.
func (p Parsed) InputSubject(key string) string {
	switch {
	case p.Bucket >= 0:
		tok := KeyToken(key)
		if key == "" || Bucket(tok) != p.Bucket {
			tok = bucketTokens[p.Bucket]
		}
		return InPrefix + "." + p.Dest + "." + tok
	case p.KeyToken != "":
		return InPrefix + "." + p.Dest + "." + p.KeyToken
	}
	return InPrefix + "." + p.Dest
}

// KeyedSubject is the subject relay stores its own publishes of the events
// of destination dest (a DestRef) with order key key (not empty) under.
func KeyedSubject(dest, key string) string {
	return KeyedPrefix + "." + dest + "." + strconv.Itoa(Bucket(KeyToken(key)))
}

// KeyedSubjects are all the stored subjects of the events of destination dest
// (a DestRef) with order key key (not empty).
func KeyedSubjects(dest, key string) []string {
	b := strconv.Itoa(Bucket(KeyToken(key)))
	s := []string{KeyedPrefix + "." + dest + "." + b}
	if t, n := SplitDestRef(dest); t != "" {
		s = append(s, TenantKeyedPrefix+"."+t+"."+n+"."+b)
	}
	return s
}

// InboxPrefix is the prefix of the reply subjects of relay's own NATS
// connections (pulled events, API and KV replies), apart from the _INBOX.>
// producers use: permissions that let producers subscribe to _INBOX.> do
// not show them relay's traffic, and producers are denied InboxPrefix.>.
const InboxPrefix = "_INBOX_RELAY"

// Headers of the wire contract. Headers a producer sets that start with neither
// "Nats-" nor "Relay-" are passed on to the destination as HTTP headers.
const (
	HdrMsgID     = "Nats-Msg-Id"    // JetStream's dedup id; the event id too, unless Relay-Event-Id is set
	HdrEventID   = "Relay-Event-Id" // the event id, where the dedup id is not it (scoped, or a republish's); wins over Nats-Msg-Id
	HdrAttempt   = "Relay-Attempt"  // attempts already made before this stream message
	HdrKey       = "Relay-Order-Key"
	HdrType      = "Relay-Event-Type" // the event's type, on the copies of a typed event
	HdrPublished = "Relay-Published"  // RFC 3339 time the producer published the event, carried on republish
	HdrOrigin    = "Relay-Origin-Seq" // stream sequence of the message a republished event first came in as
	HdrFanDests  = "Relay-Fan-Dests"  // the shared destinations a fan-out message is for, comma-separated
	HdrNotBefore = "Relay-Not-Before" // RFC 3339 time before which a Split copy is not attempted
	HdrSeal      = "Relay-Seal"       // relay's seal of its republishes' headers (see Seal)

	// Dead-letter headers.
	HdrFirst      = "Relay-First-Attempt" // RFC 3339 time of the first attempt
	HdrReason     = "Relay-Reason"
	HdrDest       = "Relay-Destination"
	HdrLastStatus = "Relay-Last-Status"
	HdrLastError  = "Relay-Last-Error"
	HdrAttempts   = "Relay-Attempts"
	HdrLastAt     = "Relay-Last-Attempt"
	HdrOrigSubj   = "Relay-Subject"
	HdrOrigSeq    = "Relay-Seq"
	HdrHistory    = "Relay-History"
	HdrDeadAt     = "Relay-Dead-At"
	HdrNote       = "Relay-Note" // an operator's reason, on an event they skipped
	// HdrEventOmitted on a dead letter says the event's headers and body
	// are not in it (it would not fit): they are read from the events
	// stream at HdrOrigSeq.
	HdrEventOmitted = "Relay-Event-Omitted"
	// HdrHistoryOmitted on a dead letter is the number of attempts left out
	// of HdrHistory to make it fit (the first and the latest are kept).
	HdrHistoryOmitted = "Relay-History-Omitted"
)

// HdrPending is the header of a pull request's status message that says how
// many messages the request had left.
const HdrPending = "Nats-Pending-Messages"

// IsContractHeader reports whether a header belongs to NATS or relay rather
// than to the event (such headers are not passed on to destinations).
func IsContractHeader(name string) bool {
	return hasPrefixFold(name, "nats-") || hasPrefixFold(name, "relay-")
}

// hasPrefixFold is strings.HasPrefix without regard to case (and without
// allocating: this runs for every header of every delivery).
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

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
	// LogTenantPrefix is the prefix of the records of tenants'
	// destinations (see LogSubject).
	LogTenantPrefix = "relay.tlog"
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

// LogSubject is the subject of a batch of records of dest and class: a
// tenant's destination T=N's are on relay.tlog.T.N.class, so that a filter
// selects a tenant's records. Empty dest or class stand for every one
// ("*"), making a filter (of the destinations of no tenant, for dest).
func LogSubject(dest, class string) string {
	if t, n := SplitDestRef(dest); t != "" {
		return LogTenantPrefix + "." + t + "." + n + "." + orAll(class)
	}
	return LogPrefix + "." + orAll(dest) + "." + orAll(class)
}

// LogFilters are the filter subjects of the records of class ("": every
// one) of dest, when given; else of tenant's destinations when scoped
// (tenant "": those of no tenant); else of every destination.
func LogFilters(scoped bool, tenant, dest, class string) []string {
	switch {
	case dest != "":
		return []string{LogSubject(dest, class)}
	case scoped && tenant != "":
		return []string{LogTenantPrefix + "." + tenant + ".*." + orAll(class)}
	case scoped:
		return []string{LogSubject("", class)}
	}
	return []string{LogSubject("", class), LogTenantPrefix + ".*.*." + orAll(class)}
}

// LogIndexSubject is the index's subject for the ids of bucket.
func LogIndexSubject(bucket string) string { return LogIndexPrefix + "." + bucket }

func orAll(tok string) string {
	if tok == "" {
		return "*"
	}
	return tok
}
