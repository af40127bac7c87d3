// Package destination is relay's destination model and its store: a
// destination's settings, filter, body template, subscriptions and retry
// policy, their validation, the sealing of its secrets at rest, the
// destinations bucket (Store) and the engine's live copy of it (Watch), and
// the JetStream consumers a destination is served by.
package destination

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/relaydev/relay/webhook"

	"github.com/relaydev/relay/stream"
)

// Destination is where the events published for it are delivered.
type Destination struct {
	// Name identifies the destination in subjects and commands. Required.
	Name string `json:"name"`
	// Kind is the system the destination delivers to: "" (HTTP POSTs to
	// URL) or a registered kind (kind.Names: nats, kafka, rabbitmq,
	// pubsub, sqs, eventbridge), whose target Config describes. Fixed once
	// the destination exists.
	Kind string `json:"kind,omitempty"`
	// Config is a non-HTTP destination's configuration: its kind's fields
	// that are not credentials. Credentials are those that are: sealed at
	// rest like the signing secrets, never printed (Redacted).
	Config      map[string]string `json:"config,omitempty"`
	Credentials map[string]string `json:"credentials,omitempty"`
	// URL receives one POST per attempt. Required for an HTTP destination:
	// http or https, no credentials in it. Empty for other kinds.
	URL string `json:"url,omitempty"`
	// URLs is the destination's URL pool, in order, when it has more than
	// one URL (URLs[0] is URL); each attempt goes to one of them, as
	// URLStrategy says. Optional: empty, every attempt goes to URL. At most
	// MaxPoolURLs.
	URLs []string `json:"urls,omitempty"`
	// URLStrategy is how an attempt picks a URL of the pool: "failover"
	// (default: the first URL that is not cooling down after failures) or
	// "round-robin" (the URLs that are not cooling down, in turn).
	URLStrategy string `json:"url_strategy,omitempty"`
	// Secret signs deliveries (Standard Webhooks, "whsec_" + base64).
	// Optional: without it deliveries are not signed.
	Secret string `json:"secret,omitempty"`
	// PrevSecret, until PrevSecretUntil, also signs deliveries: after a
	// rotation, receivers that still have the old secret keep verifying.
	PrevSecret      string    `json:"prev_secret,omitempty"`
	PrevSecretUntil time.Time `json:"prev_secret_until,omitzero"`
	// Signature is how deliveries are signed: SignatureHMAC (default:
	// "v1" with Secret), SignatureEd25519 ("v1a" with SigningKey: the
	// receiver holds only the public key) or SignatureBoth (both on every
	// request, while receivers move from one to the other).
	Signature string `json:"signature,omitempty"`
	// SigningKey signs "v1a" (Standard Webhooks, "whsk_" + base64 of an
	// Ed25519 private key), with SignatureEd25519 and SignatureBoth.
	// PrevSigningKey, until PrevSigningKeyUntil, also signs: after a
	// rotation, receivers that still have the old public key keep
	// verifying.
	SigningKey          string    `json:"signing_key,omitempty"`
	PrevSigningKey      string    `json:"prev_signing_key,omitempty"`
	PrevSigningKeyUntil time.Time `json:"prev_signing_key_until,omitzero"`
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
	// Shared serves an unordered destination from the shared consumer
	// (SharedConsumer) instead of a JetStream consumer of its own: a
	// destination then costs the NATS server nothing, and relay keeps it
	// from holding back the others (docs/architecture.md, "Many
	// destinations"). Optional, default false. Fixed once the destination
	// exists.
	Shared bool `json:"shared,omitempty"`
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
	// Filter selects the events delivered: a boolean expression over the
	// event (see CompileFilter); an event it turns down is acknowledged
	// without an attempt. Optional: without it every event is delivered.
	Filter string `json:"filter,omitempty"`
	// filter is Filter compiled, set where relay delivers (once per
	// version of the destination).
	filter *Filter
	// BodyTemplate reshapes what the destination receives: a Go
	// text/template over the event (see CompileBodyTemplate and
	// TemplateEvent) whose output is the body sent, and signed, instead of
	// the event's. Optional: without it the event's body is sent as is.
	// It may embed a credential (a routing key), so it is kept like the
	// secrets: sealed at rest, its text never printed (Redacted).
	BodyTemplate string `json:"body_template,omitempty"`
	// BodyContentType is the Content-Type of the rendered body. Optional,
	// with a BodyTemplate only; default application/json.
	BodyContentType string `json:"body_content_type,omitempty"`
	// bodyTemplate is BodyTemplate compiled, set where relay delivers (once
	// per version of the destination).
	bodyTemplate *BodyTemplate
	// PausedUntil pauses deliveries while it is in the future; PauseReason
	// says why: operator, circuit_open, retry_after or gone. Set by
	// 'relay dest pause', the circuit breaker, Retry-After and 410 Gone.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	PauseReason string    `json:"pause_reason,omitempty"`
	// BreakerTrips counts the circuit's consecutive openings (the pause
	// doubles with each); a successful probe resets it.
	BreakerTrips int `json:"breaker_trips,omitempty"`
	// Types are the event type patterns the destination subscribes to:
	// an event published by type (relay.type.T) is copied to every
	// destination with a pattern matching T (NATS wildcards: "*" one token,
	// ">" the rest). Optional.
	Types []string `json:"types,omitempty"`
	// Subscriptions say over which stream sequences each pattern applied:
	// a pattern added applies to events published after it was added. Set
	// by the store from Types.
	Subscriptions []Subscription `json:"subscriptions,omitempty"`
	// StartSeq is the first event-stream sequence that belongs to this
	// destination: events published for its name before it existed are dead
	// letters (unknown_destination). Set by the store.
	StartSeq uint64 `json:"start_seq"`
	// Created and Updated are set by the store.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Tenant is the id of the tenant d belongs to, "" for none: d's Name is
// then a stream.DestRef, tenant=name.
func (d Destination) Tenant() string {
	t, _ := stream.SplitDestRef(d.Name)
	return t
}

// ShortName is d's name within its tenant (its Name, when it has none).
func (d Destination) ShortName() string {
	_, n := stream.SplitDestRef(d.Name)
	return n
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

// How an attempt picks a URL of a destination's pool.
const (
	URLFailover   = "failover"
	URLRoundRobin = "round-robin"
)

// MaxPoolURLs bounds a destination's URL pool (the pool's index is a metric
// label).
const MaxPoolURLs = 10

// Pool is d's URL pool, in order: URLs, or URL alone.
func (d Destination) Pool() []string {
	if len(d.URLs) > 0 {
		return d.URLs
	}
	return []string{d.URL}
}

// SetPool makes urls d's URL pool: URL is the first, and URLs the whole pool
// when it has more than one.
func (d *Destination) SetPool(urls []string) {
	d.URL, d.URLs = "", nil
	if len(urls) > 0 {
		d.URL = urls[0]
	}
	if len(urls) > 1 {
		d.URLs = slices.Clone(urls)
	}
}

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
	if d.Signature == "" {
		d.Signature = SignatureHMAC
	}
	if d.URLStrategy == "" {
		d.URLStrategy = URLFailover
	}
	if d.Ordered && d.Partitions == 0 {
		d.Partitions = DefaultPartitions
	}
	if d.Ordered && d.OnFailure == "" {
		d.OnFailure = OnFailureBlock
	}
	if d.BodyTemplate != "" && d.BodyContentType == "" {
		d.BodyContentType = DefaultBodyContentType
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
	if err := ValidHeaderName(name); err != nil {
		return err
	}
	if RelaySets(name) {
		if stream.IsContractHeader(name) {
			return fmt.Errorf("header %q uses a prefix reserved for NATS and relay (Nats-, Relay-)", name)
		}
		return fmt.Errorf("header %q is set by relay and cannot be overridden", name)
	}
	return ValidHeaderValue(name, value)
}

// ValidateEventHeader is ValidateHeader for the headers of an event, which may
// also set Content-Type.
func ValidateEventHeader(name, value string) error {
	if strings.EqualFold(name, "Content-Type") {
		if err := ValidHeaderName(name); err != nil {
			return err
		}
		return ValidHeaderValue(name, value)
	}
	return ValidateHeader(name, value)
}

// validHeaderName reports a name that is not an HTTP token.
func ValidHeaderName(name string) error {
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
func RelaySets(name string) bool {
	l := strings.ToLower(name)
	return reservedHeaders[l] || strings.HasPrefix(l, "webhook-") || stream.IsContractHeader(name)
}

// validHeaderValue reports a value HTTP cannot carry: control characters
// other than tab. The value itself is not repeated (it may be a secret).
func ValidHeaderValue(name, value string) error {
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

// credentialHeaders are event headers whose values are credentials:
// RedactHeaders hides them.
var credentialHeaders = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true,
	"X-Api-Key": true, "Api-Key": true, "X-Auth-Token": true, "X-Access-Token": true,
}

// RedactHeaders returns h fit to show (an event's headers in the API, the
// dashboard and the CLI): the values of headers that carry credentials
// (Authorization, Cookie, X-Api-Key, ...) replaced by "xxxxx". h itself is
// not changed; the event keeps them, and its deliveries send them.
func RedactHeaders(h map[string][]string) map[string][]string {
	var out map[string][]string
	for k, vs := range h {
		if !credentialHeaders[http.CanonicalHeaderKey(k)] {
			continue
		}
		if out == nil {
			out = make(map[string][]string, len(h))
			for k2, v2 := range h {
				out[k2] = v2
			}
		}
		red := make([]string, len(vs))
		for i := range red {
			red[i] = "xxxxx"
		}
		out[k] = red
	}
	if out == nil {
		return h
	}
	return out
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

// Validate reports the first thing wrong with d (after WithDefaults), as a
// *SettingError naming the setting at fault.
func (d Destination) Validate() error {
	if err := stream.ValidateDestRef(d.Name); err != nil {
		return settingErr("name", err)
	}
	if d.IsHTTP() {
		if len(d.Config) > 0 || len(d.Credentials) > 0 {
			return settingErr("config", errors.New("an HTTP destination takes no config: its settings are its own (url, header...)"))
		}
		if err := d.validatePool(); err != nil {
			return err
		}
	} else if err := d.validateKind(); err != nil {
		return err
	}
	for _, sec := range []string{d.Secret, d.PrevSecret} {
		if isSealed(sec) {
			return settingErr("secret", ErrSealed)
		}
		if sec != "" {
			if err := webhook.ValidateSecret(sec); err != nil {
				return settingErr("secret", fmt.Errorf("%w (omit it to have one generated)", err))
			}
		}
	}
	if err := d.validateSignature(); err != nil {
		return err
	}
	for k, v := range d.Headers {
		if isSealed(v) {
			return settingErr("header", fmt.Errorf("header %s: %w", k, ErrSealed))
		}
		if err := ValidateHeader(k, v); err != nil {
			return settingErr("header", err)
		}
	}
	if d.Timeout < Duration(100*time.Millisecond) || d.Timeout > Duration(10*time.Minute) {
		return settingErr("timeout", fmt.Errorf("timeout %s must be between 100ms and 10m", time.Duration(d.Timeout)))
	}
	if d.Concurrency < 1 || d.Concurrency > MaxConcurrency {
		return settingErr("concurrency", fmt.Errorf("concurrency %d must be between 1 and %d", d.Concurrency, MaxConcurrency))
	}
	if d.Ordered && d.Shared {
		return settingErr("shared", errors.New("an ordered destination has consumers of its own: --shared applies to unordered destinations only"))
	}
	if !d.Ordered && (d.Partitions != 0 || d.OnFailure != "") {
		setting := "partitions"
		if d.Partitions == 0 {
			setting = "on-failure"
		}
		return settingErr(setting, errors.New("partitions and on-failure apply to ordered destinations only (add --ordered)"))
	}
	if d.RateLimit < 0 || d.RateLimit > 1e6 {
		return settingErr("rate-limit", fmt.Errorf("rate limit %g must be between 0 (none) and 1000000 per second", d.RateLimit))
	}
	if d.BreakerThreshold < -1 || d.BreakerThreshold > 1_000_000 {
		return settingErr("breaker-threshold", fmt.Errorf("breaker threshold %d must be -1 (never) or a count of consecutive failures", d.BreakerThreshold))
	}
	if d.BreakerPause < Duration(time.Second) {
		return settingErr("breaker-pause", fmt.Errorf("breaker pause %s must be at least 1s", time.Duration(d.BreakerPause)))
	}
	if d.OnGone != OnGoneDisable && d.OnGone != OnGoneDeadLetter {
		return settingErr("on-gone", fmt.Errorf("on-gone %q: use %q or %q", d.OnGone, OnGoneDisable, OnGoneDeadLetter))
	}
	if d.Ordered && (d.Partitions < 1 || d.Partitions > stream.Buckets) {
		return settingErr("partitions", fmt.Errorf("partitions %d must be between 1 and %d", d.Partitions, stream.Buckets))
	}
	if d.Ordered && d.OnFailure != OnFailureBlock && d.OnFailure != OnFailureSkip {
		return settingErr("on-failure", fmt.Errorf("on-failure %q: use %q or %q", d.OnFailure, OnFailureBlock, OnFailureSkip))
	}
	if err := validateTypes(d.Types); err != nil {
		return settingErr("type", err)
	}
	if d.Filter != "" {
		if _, err := CompileFilter(d.Filter); err != nil {
			return settingErr("filter", err)
		}
	}
	if isSealed(d.BodyTemplate) {
		return settingErr("body-template", ErrSealed)
	}
	if d.BodyTemplate != "" {
		if _, err := CompileBodyTemplate(d.BodyTemplate); err != nil {
			return settingErr("body-template", err)
		}
	}
	if d.BodyContentType != "" {
		if d.BodyTemplate == "" {
			return settingErr("body-content-type", errors.New("a body content type is that of a rendered body: it applies with a body template only"))
		}
		if err := ValidateContentType(d.BodyContentType); err != nil {
			return settingErr("body-content-type", err)
		}
	}
	return d.Retry.Validate()
}

// validatePool reports what is wrong with d's URL pool and its strategy.
func (d Destination) validatePool() error {
	if err := d.validateURLs(); err != nil {
		return settingErr("url", err)
	}
	if d.URLStrategy != URLFailover && d.URLStrategy != URLRoundRobin {
		return settingErr("url-strategy", fmt.Errorf("url-strategy %q: use %q or %q", d.URLStrategy, URLFailover, URLRoundRobin))
	}
	return nil
}

// validateURLs reports what is wrong with d's URL pool.
func (d Destination) validateURLs() error {
	if len(d.URLs) == 0 {
		if err := ValidateURL(d.URL); err != nil {
			return err
		}
	} else {
		if len(d.URLs) < 2 {
			return errors.New("a URL pool (urls) holds two URLs or more; a single URL goes in url")
		}
		if len(d.URLs) > MaxPoolURLs {
			return fmt.Errorf("a URL pool holds at most %d URLs; %d given", MaxPoolURLs, len(d.URLs))
		}
		if d.URLs[0] != d.URL {
			return errors.New("the first URL of the pool (urls) must be the destination's url")
		}
		seen := make(map[string]int, len(d.URLs))
		for i, u := range d.URLs {
			if err := ValidateURL(u); err != nil {
				return fmt.Errorf("URL %d of the pool: %w", i+1, err)
			}
			if j, ok := seen[u]; ok {
				return fmt.Errorf("URL %d of the pool repeats URL %d (%s)", i+1, j+1, RedactURL(u))
			}
			seen[u] = i
		}
	}
	return nil
}

// longWait is the longest a worker waits for the destination's rate limit
// before it hands the event back instead: half a timeout, at least 1s.
func (d Destination) LongWait() time.Duration {
	return max(time.Second, time.Duration(d.Timeout)/2)
}

// hasSecrets reports whether d has a value that is sealed at rest.
func (d Destination) hasSecrets() bool {
	return d.Secret != "" || d.PrevSecret != "" || d.SigningKey != "" || d.PrevSigningKey != "" || len(d.Headers) > 0 || d.BodyTemplate != "" || len(d.Credentials) > 0
}

// BodyTemplateSum describes d's body template without its text: its length
// in bytes and its SHA-256 in hex (as sha256sum prints it for the
// template's file, to compare the two). 0 and "" when d has none, or when
// it is sealed (the store had no key to open it).
func (d Destination) BodyTemplateSum() (n int, sha256Hex string) {
	if d.BodyTemplate == "" || isSealed(d.BodyTemplate) {
		return 0, ""
	}
	sum := sha256.Sum256([]byte(d.BodyTemplate))
	return len(d.BodyTemplate), hex.EncodeToString(sum[:])
}

// Redacted returns d fit to print: its secrets and the values of its
// configured headers replaced by a marker (any header may carry a
// credential: Cookie, X-Webhook-Secret...), its body template by its size
// and digest (BodyTemplateSum), and its URL by RedactURL's.
func (d Destination) Redacted() Destination {
	if d.Secret != "" {
		d.Secret = "(set)"
	}
	if d.PrevSecret != "" {
		d.PrevSecret = "(set)"
	}
	if d.SigningKey != "" {
		d.SigningKey = "(set)"
	}
	if d.PrevSigningKey != "" {
		d.PrevSigningKey = "(set)"
	}
	if len(d.Headers) > 0 {
		h := make(map[string]string, len(d.Headers))
		for k := range d.Headers {
			h[k] = "(set)"
		}
		d.Headers = h
	}
	if len(d.Credentials) > 0 {
		c := make(map[string]string, len(d.Credentials))
		for k := range d.Credentials {
			c[k] = "(set)"
		}
		d.Credentials = c
	}
	if n, sum := d.BodyTemplateSum(); n > 0 {
		d.BodyTemplate = fmt.Sprintf("(set: %d bytes, sha256 %s)", n, sum)
	} else if d.BodyTemplate != "" {
		d.BodyTemplate = "(set)" // sealed
	}
	d.URL = RedactURL(d.URL)
	if len(d.URLs) > 0 {
		urls := make([]string, len(d.URLs))
		for i, u := range d.URLs {
			urls[i] = RedactURL(u)
		}
		d.URLs = urls
	}
	return d
}

// PartitionConsumerName is the durable consumer of partition i of an ordered
// destination. Destination names have no upper-case letters, so these never
// collide with another destination's consumer.
func PartitionConsumerName(dest string, i int) string { return fmt.Sprintf("relay_%s_P%d", dest, i) }

// consumerNames are all of d's consumers: the one for events without an order
// key (all events, when d is not ordered), and one per partition.
func (d Destination) ConsumerNames() []string {
	if d.Shared {
		// Its lane's, which it may have (see SharedConsumer).
		return []string{LaneConsumerName(d.Name)}
	}
	names := []string{ConsumerName(d.Name)}
	if d.Ordered {
		for i := range d.Partitions {
			names = append(names, PartitionConsumerName(d.Name, i))
		}
	}
	return names
}

// partitionFilters are the subjects of partition i of ordered d.
func (d Destination) PartitionFilters(i int) []string {
	var f []string
	tenant, name := stream.SplitDestRef(d.Name)
	for b := i; b < stream.Buckets; b += d.Partitions {
		f = append(f, fmt.Sprintf("%s.%s.%d", stream.KeyedPrefix, d.Name, b))
		if tenant != "" {
			f = append(f, fmt.Sprintf("%s.%s.%s.%d", stream.TenantKeyedPrefix, tenant, name, b))
		}
	}
	return f
}

// CompiledFilter is the destination's filter, compiled, as a Watch holds
// it (nil: none, or not from a Watch).
func (d Destination) CompiledFilter() *Filter { return d.filter }

// CompiledTemplate is the destination's body template, compiled, as a
// Watch holds it (nil: none, or not from a Watch).
func (d Destination) CompiledTemplate() *BodyTemplate { return d.bodyTemplate }

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

// Display is destination ref (a stream.DestRef) as messages name it: its
// name, and "of tenant T" for a tenant's.
func Display(ref string) string {
	if t, n := stream.SplitDestRef(ref); t != "" {
		return n + " of tenant " + t
	}
	return ref
}
