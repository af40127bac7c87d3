package client

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written in JSON as Go writes it ("30s",
// "1m30s"), as the API takes and answers durations.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a duration as time.ParseDuration does.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}

// NewEvent is an event to publish (the document's NewEvent): for one
// destination (Dest) or for every destination subscribed to its type
// (Type).
type NewEvent struct {
	// Tenant is the tenant the event is for. Optional: the client's
	// (ForTenant), or its key's.
	Tenant string `json:"tenant,omitempty"`
	Dest   string `json:"dest,omitempty"`
	Type   string `json:"type,omitempty"`
	// Key is the order key: an ordered destination delivers the events of
	// one key one at a time, in order.
	Key string `json:"key,omitempty"`
	// ID is the event id (webhook-id); generated when empty. An event
	// published again with the same id within relay's duplicate window
	// stores nothing new.
	ID string `json:"id,omitempty"`
	// Headers are passed on to the destination as HTTP headers.
	Headers map[string]string `json:"headers,omitempty"`
	// Data is the body POSTed to the destination, any value encoding/json
	// writes (use json.RawMessage for JSON already encoded: a []byte is
	// written in base64). Required.
	Data any `json:"data,omitempty"`
}

// Published is a stored event.
type Published struct {
	ID string `json:"id"`
	// Seq is the event's sequence in the events stream.
	Seq uint64 `json:"seq"`
	// Duplicate: the id was published before and nothing new was stored.
	Duplicate bool `json:"duplicate"`
}

// BatchPublished is the answer to a batch: one result per event, in order.
type BatchPublished struct {
	Results []BatchResult `json:"results"`
	Stored  int           `json:"stored"`
	Failed  int           `json:"failed"`
}

// BatchResult is one event's outcome in a batch: stored (Seq, Duplicate),
// or not (Error). An event not stored may be published again with its ID:
// a duplicate stores nothing.
type BatchResult struct {
	ID        string     `json:"id"`
	Seq       uint64     `json:"seq,omitempty"`
	Duplicate bool       `json:"duplicate,omitempty"`
	Error     *ItemError `json:"error,omitempty"`
}

// ItemError is why one item of a request failed.
type ItemError struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func (e *ItemError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Detail) }

// DestStats is a destination's state, as 'relay stats --json' shows it.
type DestStats struct {
	Dest string `json:"dest"`
	// Tenant is the destination's tenant; "" for none.
	Tenant string `json:"tenant,omitempty"`
	// Backlog counts the events not yet handed to a relay.
	Backlog uint64 `json:"backlog"`
	// InFlight counts those handed out and not acknowledged yet; Retrying
	// those of them delivered more than once.
	InFlight int `json:"in_flight"`
	Retrying int `json:"retrying"`
	// Parked counts the events waiting in Redis for a later attempt (-1:
	// Redis was not asked); OldestDue is the earliest one's due time.
	Parked    int64     `json:"parked"`
	OldestDue time.Time `json:"oldest_due,omitzero"`
	// DeadLetters counts the dead letters kept for it.
	DeadLetters uint64 `json:"dead_letters"`
	// DeadLetterFailures, when set, counts its events whose dead letter
	// could not be stored.
	DeadLetterFailures *DeadLetterFailures `json:"dead_letter_failures,omitempty"`
	// Partitions and BlockedPartitions (ordered destinations): partitions
	// whose head event is being retried, holding back later events.
	Partitions        int `json:"partitions,omitempty"`
	BlockedPartitions int `json:"blocked_partitions,omitempty"`
	// State is active, probing, or why it is paused: operator,
	// circuit_open, retry_after or gone.
	State       string    `json:"state"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// Unconsumed, when set, says why relay does not consume its events.
	Unconsumed string `json:"unconsumed,omitempty"`
	// OldestUndelivered is when the oldest event not acknowledged yet was
	// published (zero: none).
	OldestUndelivered time.Time `json:"oldest_undelivered,omitzero"`
	// Shared: served by relay's shared consumer.
	Shared bool `json:"shared,omitempty"`
}

// DeadLetterFailures counts a destination's events whose dead letter could
// not be stored for good (they stay in the event log).
type DeadLetterFailures struct {
	Count       uint64    `json:"count"`
	LastAt      time.Time `json:"last_at"`
	LastEventID string    `json:"last_event_id"`
	LastSeq     uint64    `json:"last_seq"`
	LastError   string    `json:"last_error"`
}

// Destination is a destination's settings as the API shows them: never a
// secret or a configured header's value, URLs redacted as the CLI shows
// them.
type Destination struct {
	Name string `json:"name"`
	// Tenant is the destination's tenant; "" for none.
	Tenant string `json:"tenant,omitempty"`
	// Kind is the system it delivers to: http, or another of
	// DestinationTypes. Config is a non-HTTP kind's configuration, without
	// its credentials, whose names CredentialNames lists.
	Kind            string            `json:"kind"`
	Config          map[string]string `json:"config,omitempty"`
	CredentialNames []string          `json:"credential_names,omitempty"`
	URL             string            `json:"url"`
	URLs            []string          `json:"urls"`
	URLStrategy     string            `json:"url_strategy"`
	// Signed: deliveries are signed. After a rotation the old secret signs
	// too until PreviousSecretUntil.
	Signed              bool      `json:"signed"`
	PreviousSecretUntil time.Time `json:"previous_secret_until,omitzero"`
	// Signature is how deliveries are signed: hmac (v1), ed25519 (v1a) or
	// both. PublicKeys verify the v1a signatures: the current key first,
	// then the previous one during a rotation's overlap (with Until).
	Signature  string      `json:"signature"`
	PublicKeys []PublicKey `json:"public_keys,omitempty"`
	// HeaderNames are the configured headers' names.
	HeaderNames      []string `json:"header_names"`
	Timeout          Duration `json:"timeout"`
	MaxAttempts      int      `json:"max_attempts"`
	BackoffBase      Duration `json:"backoff_base"`
	BackoffMax       Duration `json:"backoff_max"`
	Jitter           float64  `json:"jitter"`
	Concurrency      int      `json:"concurrency"`
	RateLimit        float64  `json:"rate_limit"`
	BreakerThreshold int      `json:"breaker_threshold"`
	BreakerPause     Duration `json:"breaker_pause"`
	OnGone           string   `json:"on_gone"`
	Ordered          bool     `json:"ordered"`
	Partitions       int      `json:"partitions,omitempty"`
	OnFailure        string   `json:"on_failure,omitempty"`
	Shared           bool     `json:"shared"`
	Types            []string `json:"types"`
	Filter           string   `json:"filter,omitempty"`
	// BodyTemplate is its body template's text, given to admin keys only
	// (it may embed a credential); BodyTemplateBytes and
	// BodyTemplateSHA256 (hex) describe it to every key (0: the event's
	// body is sent). BodyContentType is the rendered body's Content-Type.
	BodyTemplate       string `json:"body_template,omitempty"`
	BodyTemplateBytes  int    `json:"body_template_bytes,omitempty"`
	BodyTemplateSHA256 string `json:"body_template_sha256,omitempty"`
	BodyContentType    string `json:"body_content_type,omitempty"`
	// State is active, probing, or why it is paused: operator,
	// circuit_open, retry_after or gone. PausedUntil is set while it is
	// paused for a while (zero: not paused, or until resumed).
	State       string    `json:"state"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	// Secret is the signing secret relay generated, in the answer of
	// CreateDestination and RotateSecret only: the one time it is shown.
	Secret string `json:"secret,omitempty"`
}

// PublicKey is a public key that verifies a destination's v1a signatures.
type PublicKey struct {
	// Key is whpk_<base64>; Kid its JWK thumbprint, its kid in the JWKS.
	Key string `json:"key"`
	Kid string `json:"kid"`
	// Until is when the previous key stops signing; zero for the current.
	Until time.Time `json:"until,omitzero"`
}

// DestinationSettings are the settings of 'relay dest add' and 'update'.
// A nil field is not given: it keeps its value (UpdateDestination) or
// takes its default (CreateDestination). Go 1.26's new(value) makes the
// pointers: MaxAttempts: new(5).
type DestinationSettings struct {
	// Kind is the system delivered to ("" or http: a POST per event to
	// URL), fixed once the destination exists; Config is a non-HTTP kind's
	// configuration, credentials included (on update, "" removes a field).
	Kind   *string           `json:"kind,omitempty"`
	Config map[string]string `json:"config,omitempty"`
	// URL receives a POST per attempt; URLs is a pool instead, tried as
	// URLStrategy (failover, round-robin) says.
	URL         *string  `json:"url,omitempty"`
	URLs        []string `json:"urls,omitzero"`
	URLStrategy *string  `json:"url_strategy,omitempty"`
	// Secret signs deliveries (whsec_<base64>); NoSecret: unsigned. On
	// create, neither generates a secret (answered once).
	Secret   *string `json:"secret,omitempty"`
	NoSecret bool    `json:"no_secret,omitempty"`
	// Signature is hmac, ed25519 or both; SigningKey imports an Ed25519
	// signing key (whsk_<base64>) rather than have relay generate one.
	Signature  *string `json:"signature,omitempty"`
	SigningKey *string `json:"signing_key,omitempty"`
	// Headers are added to every request, replacing all the current ones
	// (an empty map removes them); their values are never shown again.
	Headers map[string]string `json:"headers,omitzero"`
	// Timeout bounds an attempt, connect to last byte.
	Timeout *Duration `json:"timeout,omitempty"`
	// MaxAttempts before dead-lettering, the first included.
	MaxAttempts *int `json:"max_attempts,omitempty"`
	// BackoffBase is the wait after the first failure, doubling up to
	// BackoffMax, +/- Jitter (0 to 0.5) of it.
	BackoffBase *Duration `json:"backoff_base,omitempty"`
	BackoffMax  *Duration `json:"backoff_max,omitempty"`
	Jitter      *float64  `json:"jitter,omitempty"`
	// Concurrency is the deliveries in flight per relay replica.
	Concurrency *int `json:"concurrency,omitempty"`
	// RateLimit is the most requests a second, all replicas together (0:
	// none).
	RateLimit *float64 `json:"rate_limit,omitempty"`
	// BreakerThreshold failed attempts in a row pause the destination for
	// BreakerPause at first (-1: never).
	BreakerThreshold *int      `json:"breaker_threshold,omitempty"`
	BreakerPause     *Duration `json:"breaker_pause,omitempty"`
	// OnGone is what a 410 does: disable or dead-letter.
	OnGone *string `json:"on_gone,omitempty"`
	// Ordered, Shared and Partitions are fixed once added.
	Ordered    *bool `json:"ordered,omitempty"`
	Shared     *bool `json:"shared,omitempty"`
	Partitions *int  `json:"partitions,omitempty"`
	// OnFailure is what a failing head of an ordered destination does:
	// block or skip.
	OnFailure *string `json:"on_failure,omitempty"`
	// Types are the event type patterns subscribed to (order.*),
	// replacing all the current ones (an empty list removes them).
	Types []string `json:"types,omitzero"`
	// Filter delivers only the events this expression is true for (""
	// removes it).
	Filter *string `json:"filter,omitempty"`
	// BodyTemplate is a Go text/template over the event whose output is
	// the body sent and signed (docs/templates.md; "" removes it, and its
	// content type); BodyContentType is that body's Content-Type
	// (application/json).
	BodyTemplate    *string `json:"body_template,omitempty"`
	BodyContentType *string `json:"body_content_type,omitempty"`
}

// NewDestination is a destination to add: a name, a URL (or URLs) and any
// other setting.
type NewDestination struct {
	// Name is lower-case letters, digits, '-' and '_'.
	Name string `json:"name"`
	DestinationSettings
}

// Attempt is one attempt in a dead letter's history.
type Attempt struct {
	N        int           `json:"n"`
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration_ns"`
	// Status is the HTTP status (0: no response; Error says why).
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// URL is the index of the URL attempted in the destination's pool (nil
	// for a single URL).
	URL *int `json:"url,omitempty"`
}

// DeadLetter is a dead letter in a list: without its history, headers and
// body.
type DeadLetter struct {
	// Seq is its sequence in the dead-letter stream.
	Seq     uint64    `json:"seq"`
	DeadAt  time.Time `json:"dead_at"`
	Dest    string    `json:"dest"`
	EventID string    `json:"event_id"`
	Key     string    `json:"key,omitempty"`
	// Type is the event's type, empty for an event published to its
	// destination by name.
	Type   string `json:"type,omitempty"`
	Reason string `json:"reason"`
	// Attempts made; LastStatus the last HTTP status (0: no response),
	// LastError the last transport error.
	Attempts   int    `json:"attempts"`
	LastStatus int    `json:"last_status"`
	LastError  string `json:"last_error,omitempty"`
	// Note is an operator's reason (skipped), or what the reason alone
	// does not say.
	Note         string    `json:"note,omitempty"`
	FirstAttempt time.Time `json:"first_attempt,omitzero"`
	LastAttempt  time.Time `json:"last_attempt,omitzero"`
	// Subject and StreamSeq locate the event in the event log.
	Subject        string `json:"subject"`
	StreamSeq      uint64 `json:"stream_seq"`
	HistoryOmitted int    `json:"history_omitted,omitempty"`
	EventOmitted   bool   `json:"event_omitted,omitempty"`
	// Malformed says why the message stored could not be read as a dead
	// letter.
	Malformed string `json:"malformed,omitempty"`
}

// DeadLetterDetail is one dead letter with its history, its event's
// headers and body.
type DeadLetterDetail struct {
	DeadLetter
	History []Attempt           `json:"history,omitempty"`
	Headers map[string][]string `json:"headers,omitempty"`
	// BodyJSON is a JSON body as itself, or a text body as a JSON string;
	// BodyBase64 the exact bytes of a body that is not JSON. Body has the
	// bytes either way.
	BodyJSON   json.RawMessage `json:"body,omitempty"`
	BodyBase64 []byte          `json:"body_base64,omitempty"`
	// BodyUnavailable says why the body of an event too large for the
	// letter could not be read from the event log.
	BodyUnavailable string `json:"body_unavailable,omitempty"`
}

// Body is the event's body (nil when unavailable).
func (d DeadLetterDetail) Body() []byte {
	if d.BodyBase64 != nil {
		return d.BodyBase64
	}
	return d.BodyJSON
}

// DeadLetterPage is a page of dead letters, oldest first.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// NextAfter, when more may follow, is the After of the next page.
	NextAfter uint64 `json:"next_after,omitempty"`
}

// DeadLetterQuery selects dead letters; every field is optional.
type DeadLetterQuery struct {
	Dest   string
	Reason string
	// Status is the last HTTP status ("503"), or "none": no response.
	Status string
	// Since and Until bound when they died (Until excluded).
	Since, Until time.Time
	// Limit is how many a page holds at most (default 100, at most 1000).
	Limit int
	// After is the dead-letter sequence the page starts after: the
	// NextAfter of the page before.
	After uint64
}

// LetterSelection is what PurgeDeadLetters acts on: Seqs, the filters, or
// All (one of them is required); DryRun counts them and changes nothing.
type LetterSelection struct {
	Seqs   []uint64 `json:"seqs,omitempty"`
	Dest   string   `json:"dest,omitempty"`
	Reason string   `json:"reason,omitempty"`
	// Status is the last HTTP status ("503"), or "none": no response.
	Status string    `json:"status,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
	All    bool      `json:"all,omitempty"`
	DryRun bool      `json:"dry_run,omitempty"`
}

// ReplaySelection is what ReplayDeadLetters acts on, and where to: each
// letter's destination, or ToDest.
type ReplaySelection struct {
	LetterSelection
	ToDest string `json:"to_dest,omitempty"`
}

// LetterOutcome is a dead letter a replay skipped or failed, and why.
type LetterOutcome struct {
	Seq    uint64 `json:"seq"`
	Detail string `json:"detail"`
}

// ReplayResult is what a replay did (in a dry run: would do).
type ReplayResult struct {
	DryRun bool `json:"dry_run"`
	// Matched letters were selected; Replayed republished and removed, of
	// which Duplicates were replayed before within the duplicate window.
	Matched    int `json:"matched"`
	Replayed   int `json:"replayed"`
	Duplicates int `json:"duplicates"`
	// Skipped can never be replayed (left as they are); Failed may be
	// replayed again safely.
	Skipped []LetterOutcome `json:"skipped"`
	Failed  []LetterOutcome `json:"failed"`
}

// PurgeResult is what a purge deleted (in a dry run: would delete).
type PurgeResult struct {
	DryRun  bool `json:"dry_run"`
	Matched int  `json:"matched"`
	Purged  int  `json:"purged"`
}

// Outcomes of an AttemptRecord.
const (
	OutcomeDelivered  = "delivered"
	OutcomeRetry      = "retry"
	OutcomeDeadLetter = "dead_letter"
	OutcomeFiltered   = "filtered"
)

// AttemptRecord is a record of the delivery log: an attempt, or an event
// settled without one.
type AttemptRecord struct {
	// Seq is the record's sequence in the log.
	Seq     uint64 `json:"seq"`
	EventID string `json:"event_id"`
	Type    string `json:"type,omitempty"`
	Key     string `json:"key,omitempty"`
	Dest    string `json:"dest"`
	// Attempt is the attempt's number, 0 when none was made.
	Attempt int `json:"attempt"`
	// Outcome is delivered, retry, dead_letter or filtered; Reason a dead
	// letter's; RetryInMS and Parked a retry's wait and whether it waits
	// in Redis.
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
	RetryInMS int64  `json:"retry_in_ms,omitempty"`
	Parked    bool   `json:"parked,omitempty"`
	// At is when the attempt started.
	At         time.Time `json:"at"`
	DurationMS float64   `json:"duration_ms"`
	// URL is the URL attempted, credentials and query values redacted.
	URL string `json:"url,omitempty"`
	// Class is 2xx to 5xx, error (no response) or none (no attempt).
	Class  string `json:"class"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// ResponseHeaders and ResponseBody are what the destination answered
	// (some headers; the start of the body).
	ResponseHeaders map[string]string `json:"response_headers,omitempty"`
	ResponseBody    string            `json:"response_body,omitempty"`
	// EventSeq is where the event is stored in the events stream.
	EventSeq uint64 `json:"event_seq,omitempty"`
}

// AttemptQuery selects records of the delivery log; every field is
// optional.
type AttemptQuery struct {
	Dest    string
	EventID string
	// Type is an event type: the records of its events only.
	Type string
	// Status is a status code ("503") or a class: 2xx, 3xx, 4xx, 5xx,
	// error (no response), none (no attempt).
	Status string
	// Since and Until bound when the records were written (Until
	// excluded).
	Since, Until time.Time
	// Limit is how many a page holds at most (default 100, at most 1000).
	Limit int
	// Cursor is the Next of the page before.
	Cursor string
}

// AttemptPage is a page of the delivery log, newest first.
type AttemptPage struct {
	Attempts []AttemptRecord `json:"attempts"`
	// Next is the Cursor of the next (older) page; empty on the last.
	Next string `json:"next,omitempty"`
}

// States of an event's delivery to a destination (EventView).
const (
	StateDelivered   = "delivered"
	StateRetrying    = "retrying"
	StateDead        = "dead"
	StateFilteredOut = "filtered_out"
	StatePending     = "pending"
)

// EventView is an event as the delivery log knows it, and where its
// delivery to each destination stands.
type EventView struct {
	ID   string `json:"id"`
	Type string `json:"type,omitempty"`
	Key  string `json:"key,omitempty"`
	// Seq is where the event is stored in the events stream; Stored says
	// it still is (else its headers and body are gone).
	Seq     uint64              `json:"seq,omitempty"`
	Stored  bool                `json:"stored"`
	Headers map[string][]string `json:"headers,omitempty"`
	// The body is in one of BodyJSON (JSON), BodyText (other text) and
	// BodyBase64 (anything else); Body has its bytes whichever it is.
	BodyJSON   json.RawMessage `json:"body,omitempty"`
	BodyText   string          `json:"body_text,omitempty"`
	BodyBase64 []byte          `json:"body_base64,omitempty"`
	// RoutedTo are a typed event's subscribers when it was routed.
	RoutedTo     []string    `json:"routed_to,omitempty"`
	Destinations []DestState `json:"destinations"`
}

// Body is the event's body: nil when it is no longer stored. A JSON body
// is as the server wrote it (compacted).
func (v EventView) Body() []byte {
	switch {
	case v.BodyJSON != nil:
		return v.BodyJSON
	case v.BodyBase64 != nil:
		return v.BodyBase64
	case v.BodyText != "":
		return []byte(v.BodyText)
	}
	return nil
}

// DestState is where an event's delivery to one destination stands:
// State, and its attempts, oldest first.
type DestState struct {
	Dest     string          `json:"dest"`
	State    string          `json:"state"`
	Attempts []AttemptRecord `json:"attempts"`
}

// DestinationType is a kind of destination relay delivers to, with the
// fields of its configuration.
type DestinationType struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// Ordered: some configuration of the kind keeps the order of a key's
	// events.
	Ordered bool        `json:"ordered"`
	Fields  []KindField `json:"fields"`
}

// KindField is a field of a kind's configuration.
type KindField struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	Help  string `json:"help"`
	// Type is string, text, bool, int, duration or enum (one of Values).
	Type     string   `json:"type"`
	Values   []string `json:"values,omitempty"`
	Required bool     `json:"required"`
	// Sensitive: a credential, sealed at rest and never shown once set.
	Sensitive bool   `json:"sensitive"`
	Default   string `json:"default,omitempty"`
}
