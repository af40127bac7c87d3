package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Destination is where the events published for it are delivered.
type Destination struct {
	// Name identifies the destination in subjects and commands. Required.
	Name string `json:"name"`
	// URL receives one POST per attempt. Required: http or https, no
	// credentials in it.
	URL string `json:"url"`
	// Secret signs deliveries (Standard Webhooks, "whsec_" + base64).
	// Optional: without it deliveries are not signed.
	Secret string `json:"secret,omitempty"`
	// PrevSecret, until PrevSecretUntil, also signs deliveries: after a
	// rotation, receivers that still have the old secret keep verifying.
	PrevSecret      string    `json:"prev_secret,omitempty"`
	PrevSecretUntil time.Time `json:"prev_secret_until,omitzero"`
	// Headers are added to every request. Optional.
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout bounds one attempt, connect to last body byte. Optional,
	// default 30s.
	Timeout Duration `json:"timeout,omitempty"`
	// Retry is the retry policy. Optional, defaults as in RetryPolicy.
	Retry RetryPolicy `json:"retry"`
	// Concurrency is the number of deliveries in flight per relay replica.
	// Optional, default 16.
	Concurrency int `json:"concurrency,omitempty"`
	// Ordered delivers the events of each order key one at a time, in
	// publish order. Optional, default false. Fixed once the destination
	// exists.
	Ordered bool `json:"ordered,omitempty"`
	// Partitions is how many order keys of an ordered destination are
	// delivered in parallel (keys are hashed into 64 buckets; partition i
	// takes the buckets b with b mod Partitions == i). Optional, default 8,
	// at most 64. Fixed once the destination exists.
	Partitions int `json:"partitions,omitempty"`
	// OnFailure is what an ordered key does while its head fails: "block"
	// (default) retries the head until it is delivered, so later events of
	// the key never overtake it; "skip" dead-letters the head after
	// MaxAttempts and lets the key continue.
	OnFailure string `json:"on_failure,omitempty"`
	// RateLimit caps requests per second to the destination across all
	// relay replicas (each takes an equal share). Optional, 0: no limit.
	RateLimit float64 `json:"rate_limit,omitempty"`
	// BreakerThreshold opens the circuit after this many consecutive failed
	// attempts in one replica: the destination is paused as a whole instead
	// of every event burning its attempts. Optional, default 20; -1: never.
	BreakerThreshold int `json:"breaker_threshold,omitempty"`
	// BreakerPause is the first pause when the circuit opens; it doubles
	// while the probe after each pause fails, up to Retry.Max. Optional,
	// default 30s.
	BreakerPause Duration `json:"breaker_pause,omitempty"`
	// OnGone is what a 410 Gone does: "disable" (default: pause the
	// destination until an operator resumes it; the event is kept) or
	// "dead-letter" (like any other 4xx).
	OnGone string `json:"on_gone,omitempty"`
	// PausedUntil pauses deliveries while it is in the future; PauseReason
	// says why: operator, circuit_open, retry_after or gone. Set by
	// 'relay dest pause', the circuit breaker, Retry-After and 410 Gone.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	PauseReason string    `json:"pause_reason,omitempty"`
	// BreakerTrips counts the circuit's consecutive openings (the pause
	// doubles with each); a successful probe resets it.
	BreakerTrips int `json:"breaker_trips,omitempty"`
	// StartSeq is the first event-stream sequence that belongs to this
	// destination: events published for its name before it existed are dead
	// letters (unknown_destination). Set by the store.
	StartSeq uint64 `json:"start_seq"`
	// Created and Updated are set by the store.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Destination defaults.
const (
	DefaultTimeout     = 30 * time.Second
	DefaultConcurrency = 16
	MaxConcurrency     = 1024
	DefaultPartitions  = 8

	DefaultBreakerThreshold = 20
	DefaultBreakerPause     = 30 * time.Second
)

// What a 410 Gone does.
const (
	OnGoneDisable    = "disable"
	OnGoneDeadLetter = "dead-letter"
)

// Why a destination is paused, and its states in 'relay stats'.
const (
	PauseOperator    = "operator"
	PauseCircuitOpen = "circuit_open"
	PauseRetryAfter  = "retry_after"
	PauseGone        = "gone"

	StateActive  = "active"
	StateProbing = "probing" // the circuit's pause ended; one probe decides
)

// Forever is the pause of a disabled destination or an operator pause with
// no end: until it is resumed.
var Forever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// State is what 'relay stats' shows: active, probing, or the pause reason.
func (d Destination) State(now time.Time) string {
	switch {
	case now.Before(d.PausedUntil):
		if d.PauseReason == "" {
			return PauseOperator
		}
		return d.PauseReason
	case d.PauseReason == PauseCircuitOpen:
		return StateProbing
	}
	return StateActive
}

// Failure policies of ordered destinations.
const (
	OnFailureBlock = "block"
	OnFailureSkip  = "skip"
)

// WithDefaults returns d with zero fields set to their defaults.
func (d Destination) WithDefaults() Destination {
	if d.Timeout == 0 {
		d.Timeout = Duration(DefaultTimeout)
	}
	if d.Concurrency == 0 {
		d.Concurrency = DefaultConcurrency
	}
	if d.BreakerThreshold == 0 {
		d.BreakerThreshold = DefaultBreakerThreshold
	}
	if d.BreakerPause == 0 {
		d.BreakerPause = Duration(DefaultBreakerPause)
	}
	if d.OnGone == "" {
		d.OnGone = OnGoneDisable
	}
	if d.Ordered && d.Partitions == 0 {
		d.Partitions = DefaultPartitions
	}
	if d.Ordered && d.OnFailure == "" {
		d.OnFailure = OnFailureBlock
	}
	d.Retry = d.Retry.WithDefaults()
	return d
}

// reservedHeaders are set by relay and may not be configured.
var reservedHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"content-type": true, "user-agent": true, "te": true, "upgrade": true, "trailer": true,
}

// ValidateHeader reports a header that cannot be sent: an invalid name, a name
// relay sets itself, or a value with control characters.
func ValidateHeader(name, value string) error {
	if err := validHeaderName(name); err != nil {
		return err
	}
	if relaySets(name) {
		if stream.IsContractHeader(name) {
			return fmt.Errorf("header %q uses a prefix reserved for NATS and relay (Nats-, Relay-)", name)
		}
		return fmt.Errorf("header %q is set by relay and cannot be overridden", name)
	}
	return validHeaderValue(name, value)
}

// ValidateEventHeader is ValidateHeader for the headers of an event, which may
// also set Content-Type.
func ValidateEventHeader(name, value string) error {
	if strings.EqualFold(name, "Content-Type") {
		if err := validHeaderName(name); err != nil {
			return err
		}
		return validHeaderValue(name, value)
	}
	return ValidateHeader(name, value)
}

// validHeaderName reports a name that is not an HTTP token.
func validHeaderName(name string) error {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r)
	}) {
		return fmt.Errorf("header name %q is not a valid HTTP header name", name)
	}
	return nil
}

// relaySets reports a header that relay sets (or that belongs to NATS and
// relay): a destination may not configure it, and an event's is not passed
// on. Content-Type is among them; an event's own is sent.
func relaySets(name string) bool {
	l := strings.ToLower(name)
	return reservedHeaders[l] || strings.HasPrefix(l, "webhook-") || stream.IsContractHeader(name)
}

// validHeaderValue reports a value HTTP cannot carry: control characters
// other than tab. The value itself is not repeated (it may be a secret).
func validHeaderValue(name, value string) error {
	if strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		return fmt.Errorf("header %q: value contains control characters (CR, LF, ...)", name)
	}
	return nil
}

// ValidateURL reports why u cannot be a destination URL. Its errors quote u
// as typed (not re-encoded), and only once it is known to hold no
// user:password@.
func ValidateURL(u string) error {
	if len(u) > 2048 {
		return fmt.Errorf("URL is %d characters long; the limit is 2048", len(u))
	}
	p, err := url.Parse(u)
	if err != nil {
		// url.Error quotes the whole URL, password included: keep only why.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("URL does not parse: %v", err)
	}
	if p.User != nil {
		return fmt.Errorf("URL must not contain credentials (user:password@); use --header Authorization=... instead")
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return fmt.Errorf("URL %q: scheme must be http or https, not %q", u, p.Scheme)
	}
	if p.Host == "" || p.Hostname() == "" {
		return fmt.Errorf("URL %q has no host", u)
	}
	if p.Fragment != "" {
		return fmt.Errorf("URL %q has a fragment (#...), which is never sent to a server", u)
	}
	return nil
}

// RedactURL returns u fit to print: its userinfo and the value of each of
// its query parameters replaced by "xxxxx" (credentials travel there:
// "?token=..."). A URL that does not parse is not shown at all.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(URL that does not parse)"
	}
	if p.User != nil {
		p.User = url.User("xxxxx")
	}
	if p.RawQuery != "" {
		parts := strings.Split(p.RawQuery, "&")
		for i, q := range parts {
			if k, _, ok := strings.Cut(q, "="); ok {
				parts[i] = k + "=xxxxx"
			} else if q != "" {
				parts[i] = "xxxxx" // a bare value may be a credential too
			}
		}
		p.RawQuery = strings.Join(parts, "&")
	}
	return p.String()
}

// Validate reports the first thing wrong with d (after WithDefaults).
func (d Destination) Validate() error {
	if err := stream.ValidateDestName(d.Name); err != nil {
		return err
	}
	if err := ValidateURL(d.URL); err != nil {
		return err
	}
	for _, sec := range []string{d.Secret, d.PrevSecret} {
		if isSealed(sec) {
			return ErrSealed
		}
		if sec != "" {
			if _, err := decodeSecret(sec); err != nil {
				return err
			}
		}
	}
	for k, v := range d.Headers {
		if isSealed(v) {
			return fmt.Errorf("header %s: %w", k, ErrSealed)
		}
		if err := ValidateHeader(k, v); err != nil {
			return err
		}
	}
	if d.Timeout < Duration(100*time.Millisecond) || d.Timeout > Duration(10*time.Minute) {
		return fmt.Errorf("timeout %s must be between 100ms and 10m", time.Duration(d.Timeout))
	}
	if d.Concurrency < 1 || d.Concurrency > MaxConcurrency {
		return fmt.Errorf("concurrency %d must be between 1 and %d", d.Concurrency, MaxConcurrency)
	}
	if !d.Ordered && (d.Partitions != 0 || d.OnFailure != "") {
		return errors.New("partitions and on-failure apply to ordered destinations only (add --ordered)")
	}
	if d.RateLimit < 0 || d.RateLimit > 1e6 {
		return fmt.Errorf("rate limit %g must be between 0 (none) and 1000000 per second", d.RateLimit)
	}
	if d.BreakerThreshold < -1 || d.BreakerThreshold > 1_000_000 {
		return fmt.Errorf("breaker threshold %d must be -1 (never) or a count of consecutive failures", d.BreakerThreshold)
	}
	if d.BreakerPause < Duration(time.Second) {
		return fmt.Errorf("breaker pause %s must be at least 1s", time.Duration(d.BreakerPause))
	}
	if d.OnGone != OnGoneDisable && d.OnGone != OnGoneDeadLetter {
		return fmt.Errorf("on-gone %q: use %q or %q", d.OnGone, OnGoneDisable, OnGoneDeadLetter)
	}
	if d.Ordered && (d.Partitions < 1 || d.Partitions > stream.Buckets) {
		return fmt.Errorf("partitions %d must be between 1 and %d", d.Partitions, stream.Buckets)
	}
	if d.Ordered && d.OnFailure != OnFailureBlock && d.OnFailure != OnFailureSkip {
		return fmt.Errorf("on-failure %q: use %q or %q", d.OnFailure, OnFailureBlock, OnFailureSkip)
	}
	return d.Retry.Validate()
}

// AckWait is how long JetStream waits for this destination's ack before it
// hands the event to another worker: longer than an attempt can take plus
// the waits before it that relay does not restart AckWait for (longWait).
func (d Destination) AckWait() time.Duration {
	return 2*time.Duration(d.Timeout) + 5*time.Second
}

// longWait is the longest an event waits in relay, before its attempt,
// without its AckWait restarted: half a timeout, at least 1s. Two such
// waits (in the prefetch buffer, for the rate limit) and the attempt fit in
// AckWait.
func (d Destination) longWait() time.Duration {
	return max(time.Second, time.Duration(d.Timeout)/2)
}

// Redacted returns d fit to print: its secrets and the values of its
// configured headers replaced by a marker (any header may carry a
// credential: Cookie, X-Webhook-Secret...), and its URL by RedactURL's.
func (d Destination) Redacted() Destination {
	if d.Secret != "" {
		d.Secret = "(set)"
	}
	if d.PrevSecret != "" {
		d.PrevSecret = "(set)"
	}
	if len(d.Headers) > 0 {
		h := make(map[string]string, len(d.Headers))
		for k := range d.Headers {
			h[k] = "(set)"
		}
		d.Headers = h
	}
	d.URL = RedactURL(d.URL)
	return d
}

// PartitionConsumerName is the durable consumer of partition i of an ordered
// destination. Destination names have no upper-case letters, so these never
// collide with another destination's consumer.
func PartitionConsumerName(dest string, i int) string { return fmt.Sprintf("relay_%s_P%d", dest, i) }

// consumerNames are all of d's consumers: the one for events without an order
// key (all events, when d is not ordered), and one per partition.
func (d Destination) consumerNames() []string {
	names := []string{ConsumerName(d.Name)}
	if d.Ordered {
		for i := range d.Partitions {
			names = append(names, PartitionConsumerName(d.Name, i))
		}
	}
	return names
}

// partitionFilters are the subjects of partition i of ordered d.
func (d Destination) partitionFilters(i int) []string {
	var f []string
	for b := i; b < stream.Buckets; b += d.Partitions {
		f = append(f, fmt.Sprintf("%s.%s.%d.*", stream.KeyedPrefix, d.Name, b))
	}
	return f
}

// Duration is a time.Duration that reads and writes as "1m30s" in JSON.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration must be a string like \"30s\": %w", err)
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ErrNotFound is returned for a destination that does not exist.
var ErrNotFound = errors.New("destination not found")

// ErrLayoutFixed is returned when an update would change a destination's
// ordering or partition count: moving keys between partitions while events
// are in flight could deliver them out of order.
var ErrLayoutFixed = errors.New("cannot change the partition layout in place")

// ErrExists is returned when adding a destination whose name is taken.
var ErrExists = errors.New("destination already exists")

// Store keeps destinations in a JetStream key-value bucket, so every replica
// sees the same set. With a secret key, signing secrets and configured header
// values are stored encrypted.
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	sealer *sealer
	// allowClear: Add may store secrets unencrypted beside encrypted ones.
	allowClear bool
}

// StoreOption configures a Store.
type StoreOption func(*Store) error

// WithSecretKey encrypts signing secrets at rest (AES-256-GCM with a key
// derived from material, at least MinKeyLen bytes). Secrets sealed with a
// previous key open too, during a key rotation (see Rekey); they are sealed
// with material when next written.
func WithSecretKey(material []byte, previous ...[]byte) StoreOption {
	return func(s *Store) error {
		if len(material) == 0 {
			if len(previous) > 0 {
				return errors.New("a previous secret key is for a rotation to a new one: give the new key too")
			}
			return nil
		}
		sl, err := newSealer(material, previous...)
		s.sealer = sl
		return err
	}
}

// NewStore opens the destination bucket (stream.Ensure creates it).
func NewStore(ctx context.Context, js jetstream.JetStream, opts ...StoreOption) (*Store, error) {
	kv, err := js.KeyValue(ctx, stream.DestBucket)
	if err != nil {
		return nil, fmt.Errorf("open destination bucket %s (has relay set up the streams? run 'relay run' once): %w", stream.DestBucket, err)
	}
	s := &Store{js: js, kv: kv}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Encrypts reports whether the store encrypts secrets.
func (s *Store) Encrypts() bool { return s.sealer != nil }

// encode marshals d with its secrets sealed: the signing secrets and the
// values of its configured headers (an Authorization header, say).
func (s *Store) encode(d Destination) []byte {
	_ = eachSecret(&d, func(v, aad string) (string, error) { return s.sealer.seal(v, aad), nil })
	b, _ := json.Marshal(d)
	return b
}

// headerAAD binds a sealed header value to its destination and header: it
// cannot be moved to another header or destination.
func headerAAD(dest, header string) string {
	return dest + "/header/" + http.CanonicalHeaderKey(header)
}

// eachSecret calls fn on each value of d that is sealed at rest (its
// signing secrets and the values of its configured headers), with what the
// seal is bound to, and keeps what fn returns; where fn fails the value
// stays as it was. It returns the first failure.
func eachSecret(d *Destination, fn func(v, aad string) (string, error)) error {
	var first error
	do := func(v, aad string) string {
		out, err := fn(v, aad)
		if err != nil {
			first = cmp.Or(first, err)
			return v
		}
		return out
	}
	d.Secret = do(d.Secret, d.Name)
	d.PrevSecret = do(d.PrevSecret, d.Name)
	if len(d.Headers) > 0 {
		h := make(map[string]string, len(d.Headers)) // d's map may be a caller's too
		for k, v := range d.Headers {
			h[k] = do(v, headerAAD(d.Name, k))
		}
		d.Headers = h
	}
	return first
}

// errStoredCorrupt marks a stored destination that is not valid JSON.
var errStoredCorrupt = errors.New("stored corrupt")

// decode unmarshals a stored destination and opens its secrets. A secret it
// cannot open stays sealed (Validate then reports ErrSealed); open is false.
func (s *Store) decode(name string, b []byte) (d Destination, open bool, err error) {
	if err := json.Unmarshal(b, &d); err != nil {
		return Destination{}, false, fmt.Errorf("destination %s is %w: %w", name, errStoredCorrupt, err)
	}
	open = eachSecret(&d, func(v, aad string) (string, error) { return s.sealer.open(v, aad) }) == nil
	return d, open, nil
}

// ErrWouldStoreInClear is returned by Add, for a store without a secret
// key, when other destinations' secrets are encrypted at rest: the new
// destination's secrets would be the only ones readable in the bucket.
var ErrWouldStoreInClear = errors.New("other destinations' secrets are encrypted at rest, and no secret key was given to encrypt this one's")

// AllowStoringInClear makes Add store a destination's secrets unencrypted
// even when other destinations' are encrypted (see ErrWouldStoreInClear).
func AllowStoringInClear() StoreOption {
	return func(s *Store) error {
		s.allowClear = true
		return nil
	}
}

// sealedDest returns the name of a stored destination with a secret
// encrypted at rest, "" if there is none.
func (s *Store) sealedDest(ctx context.Context) (string, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return "", err
	}
	var found string
	for k := range keys.Keys() {
		if found != "" {
			continue // drain the listing
		}
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			continue // removed meanwhile
		}
		var d Destination
		if json.Unmarshal(e.Value(), &d) != nil {
			continue
		}
		_ = eachSecret(&d, func(v, _ string) (string, error) {
			if isSealed(v) {
				found = k
			}
			return v, nil
		})
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("list destinations: %w", err)
	}
	return found, nil
}

// Add creates d. It fails with ErrExists when the name is taken, and with
// ErrWouldStoreInClear when the store has no secret key, d has secrets (a
// signing secret, header values), other destinations' are encrypted, and
// AllowStoringInClear was not given.
func (s *Store) Add(ctx context.Context, d Destination) (Destination, error) {
	d = d.WithDefaults()
	if err := d.Validate(); err != nil {
		return Destination{}, err
	}
	if s.sealer == nil && !s.allowClear && (d.Secret != "" || d.PrevSecret != "" || len(d.Headers) > 0) {
		other, err := s.sealedDest(ctx)
		if err != nil {
			return Destination{}, err
		}
		if other != "" {
			return Destination{}, fmt.Errorf("%w (%s's are, say)", ErrWouldStoreInClear, other)
		}
	}
	st, err := s.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return Destination{}, fmt.Errorf("events stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return Destination{}, fmt.Errorf("events stream: %w", err)
	}
	d.StartSeq = info.State.LastSeq + 1
	d.Created = time.Now().UTC()
	d.Updated = d.Created
	if _, err := s.kv.Create(ctx, d.Name, s.encode(d)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Destination{}, fmt.Errorf("%w: %s (use 'relay dest update')", ErrExists, d.Name)
		}
		return Destination{}, fmt.Errorf("store destination %s: %w", d.Name, err)
	}
	return d, nil
}

// Update changes an existing destination with fn, retrying on concurrent
// updates.
func (s *Store) Update(ctx context.Context, name string, fn func(*Destination) error) (Destination, error) {
	for range 10 {
		e, err := s.kv.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Destination{}, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if err != nil {
			return Destination{}, err
		}
		d, _, err := s.decode(name, e.Value())
		if err != nil {
			return Destination{}, err
		}
		before := d.WithDefaults()
		if err := fn(&d); err != nil {
			return Destination{}, err
		}
		d.Name = name
		d = d.WithDefaults()
		if d.Ordered != before.Ordered || d.Partitions != before.Partitions {
			return Destination{}, fmt.Errorf("%w: ordering and partitions of %s are fixed; add a new destination with the new layout, send new events there, and remove %s once 'relay stats' shows it drained", ErrLayoutFixed, name, name)
		}
		if err := d.Validate(); err != nil {
			return Destination{}, err
		}
		d.Updated = time.Now().UTC()
		if _, err := s.kv.Update(ctx, name, s.encode(d), e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // changed under us: read again
			}
			return Destination{}, err
		}
		return d, nil
	}
	return Destination{}, fmt.Errorf("destination %s is being changed concurrently; try again", name)
}

// RekeyResult is what Rekey did.
type RekeyResult struct {
	// Resealed are the destinations whose secrets Rekey sealed with the
	// current key: they were sealed with a previous one, or stored in the
	// clear (before a key was set).
	Resealed []string
	// Current are the destinations already sealed with the current key,
	// or without a secret.
	Current []string
	// Failed are the destinations Rekey could not reseal, with why (a
	// secret sealed with a key it was not given, say).
	Failed map[string]error
}

// Rekey seals every destination's secrets with the store's current key,
// after a key rotation: give the store the new key and the old one as a
// previous key (WithSecretKey). It changes nothing else, and does not
// validate the rest of a destination. An expired previous secret (past
// its PrevSecretUntil) is dropped rather than resealed. Destinations it
// cannot open are reported in Failed and left as they are.
func (s *Store) Rekey(ctx context.Context) (RekeyResult, error) {
	if s.sealer == nil {
		return RekeyResult{}, errors.New("rekey needs the secret key to seal with")
	}
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return RekeyResult{}, err
	}
	var names []string
	for k := range keys.Keys() {
		names = append(names, k)
	}
	// The listing ends early, without an error, when ctx does.
	if err := ctx.Err(); err != nil {
		return RekeyResult{}, fmt.Errorf("list destinations: %w", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	res := RekeyResult{Failed: map[string]error{}}
	for _, name := range names {
		resealed, err := s.reseal(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			// removed meanwhile
		case err != nil:
			res.Failed[name] = err
		case resealed:
			res.Resealed = append(res.Resealed, name)
		default:
			res.Current = append(res.Current, name)
		}
	}
	return res, nil
}

// reseal seals the secrets of the stored destination name with the current
// key if one of them is not (a compare-and-set on its revision, retried
// when it changed meanwhile), and reports whether it did.
func (s *Store) reseal(ctx context.Context, name string) (bool, error) {
	for range 10 {
		e, err := s.kv.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if err != nil {
			return false, err
		}
		var d Destination
		if err := json.Unmarshal(e.Value(), &d); err != nil {
			return false, fmt.Errorf("destination %s is %w: %w", name, errStoredCorrupt, err)
		}
		// An expired previous secret no longer signs: drop it.
		stale := d.PrevSecret != "" && !d.PrevSecretUntil.IsZero() && time.Now().After(d.PrevSecretUntil)
		if stale {
			d.PrevSecret, d.PrevSecretUntil = "", time.Time{}
		}
		err = eachSecret(&d, func(v, aad string) (string, error) {
			if v == "" {
				return v, nil
			}
			plain, current, err := s.sealer.openKey(v, aad)
			stale = stale || err == nil && !current
			return plain, err
		})
		if err != nil {
			return false, err
		}
		if !stale {
			return false, nil
		}
		if _, err := s.kv.Update(ctx, name, s.encode(d), e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // changed under us: read again
			}
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("destination %s is being changed concurrently; try again", name)
}

// Get returns one destination.
func (s *Store) Get(ctx context.Context, name string) (Destination, error) {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Destination{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return Destination{}, err
	}
	d, _, err := s.decode(name, e.Value())
	return d, err
}

// List returns all destinations, sorted by name.
func (s *Store) List(ctx context.Context) ([]Destination, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []Destination
	for k := range keys.Keys() {
		d, err := s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	sortDests(out)
	return out, nil
}

// Remove deletes a destination and its consumer. Events not yet delivered to
// it stay in the event log until its retention removes them.
func (s *Store) Remove(ctx context.Context, name string) error {
	d, err := s.Get(ctx, name)
	if err != nil {
		return err
	}
	if err := s.kv.Delete(ctx, name); err != nil {
		return err
	}
	for _, c := range d.WithDefaults().consumerNames() {
		err := s.js.DeleteConsumer(ctx, stream.EventsStream, c)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("delete consumer %s of %s: %w", c, name, err)
		}
	}
	return nil
}

// Pending returns how many events of dest its consumers have not yet
// acknowledged (waiting or in flight); 0 when it has no consumer yet.
func (s *Store) Pending(ctx context.Context, name string) (uint64, error) {
	d, err := s.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, cn := range d.WithDefaults().consumerNames() {
		c, err := s.js.Consumer(ctx, stream.EventsStream, cn)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		info := c.CachedInfo()
		n += info.NumPending + uint64(info.NumAckPending)
	}
	return n, nil
}

// watch keeps a live copy of all destinations.
type watch struct {
	mu    sync.RWMutex
	dests map[string]Destination
}

func (w *watch) get(name string) (Destination, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	d, ok := w.dests[name]
	return d, ok
}

func sortDests(ds []Destination) {
	slices.SortFunc(ds, func(a, b Destination) int { return strings.Compare(a.Name, b.Name) })
}
