// Package kind is the contract between relay's engine and the systems it
// delivers to besides HTTP: a destination kind says how its configuration
// is checked, which of its fields are secret, whether it keeps the order
// relay delivers in, and opens publishers that send one event at a time and
// say what the target answered.
//
// Each kind lives in a package of its own (kind/kafka, kind/rabbitmq...);
// package kind/kinds lists them. The engine retries, parks, dead-letters,
// logs, filters, templates, limits and breaks circuits the same way for
// every kind: a kind only sends and reports.
package kind

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Message is one attempt's event, as a kind sends it. Every kind carries
// ID, Type, Tenant, Timestamp and Signature in its own attributes or
// headers (documented per kind in docs/destinations.md).
type Message struct {
	// ID is the event id: the receiver's idempotency key.
	ID string
	// Type is the event's type, "" for an untyped event.
	Type string
	// Tenant is the destination's tenant, "" for none.
	Tenant string
	// Dest is the destination's name.
	Dest string
	// Key is the event's order key, "" for none.
	Key string
	// Body is what is sent: the event's body or its template's rendering.
	Body []byte
	// ContentType is the body's media type (application/json unless the
	// event or the template says otherwise).
	ContentType string
	// Timestamp (Unix seconds) and Signature are the Standard Webhooks
	// webhook-timestamp and webhook-signature of ID, Timestamp and Body:
	// Signature is "" when the destination signs nothing.
	Timestamp int64
	Signature string
	// Attempt is the attempt's number, from 1.
	Attempt int
}

// Answer is what the target said to one Publish.
type Answer struct {
	// Err is nil when the target confirmed it has the message (a JetStream
	// ack, Kafka's acks=all, a publisher confirm, a Pub/Sub message id, an
	// SQS message id, an EventBridge entry without error). Otherwise it
	// says why not, in words an operator reads in the delivery log.
	Err error
	// Permanent says that retrying the same event cannot succeed (a topic
	// that does not exist, credentials refused, a message too large): the
	// event is dead-lettered at once. Otherwise the engine retries it by
	// the destination's policy.
	Permanent bool
	// Code is the target's own code for the failure, when it has one
	// (ThrottlingException, NOT_FOUND, 312 NO_ROUTE...). Optional.
	Code string
	// RetryAfter is when the target asked to be tried again (throttling),
	// 0 when it did not say. The destination's retry policy caps it.
	RetryAfter time.Duration
	// Detail describes the confirmation (a partition and offset, a message
	// id): the delivery log keeps it as the attempt's response.
	Detail string
}

// Delivered is the answer of a confirmed delivery.
func Delivered(detail string) Answer { return Answer{Detail: detail} }

// Retry is the answer of a failure that may pass: a connection refused,
// a timeout, a broker that is not ready.
func Retry(code string, err error) Answer { return Answer{Err: err, Code: code} }

// Permanent is the answer of a failure retrying cannot mend.
func Permanent(code string, err error) Answer {
	return Answer{Err: err, Code: code, Permanent: true}
}

// Publisher sends messages to one destination's target. Publish is called
// from many goroutines at once; it returns when the target has answered or
// ctx (the attempt's timeout) ended. Close releases the connections; no
// Publish is running or follows.
type Publisher interface {
	Publish(ctx context.Context, m Message) Answer
	Close() error
}

// Env is what relay gives a publisher to reach the network with: every
// connection it opens goes through Dial or HTTPClient, which keep the
// address guard (and the egress proxy, when relay has one).
type Env struct {
	// Dial opens a connection, refusing addresses the guard blocks.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// HTTPClient sends requests the same way (for kinds whose client
	// library speaks HTTP).
	HTTPClient *http.Client
}

// Config is a destination's configuration for its kind: field name to
// value, as the kind's Fields describe them.
type Config map[string]string

// FieldType is how a field's value is written.
type FieldType string

// The field types.
const (
	String   FieldType = "string"
	Text     FieldType = "text" // several lines: a PEM, a credentials file
	Bool     FieldType = "bool"
	Int      FieldType = "int"
	Duration FieldType = "duration"
	Enum     FieldType = "enum"
)

// Field describes one configuration field: the API's destination-types,
// the CLI's --config and the portal's forms are built from these.
type Field struct {
	Name  string    `json:"name"`
	Label string    `json:"label"`
	Help  string    `json:"help"`
	Type  FieldType `json:"type"`
	// Values are an Enum's values.
	Values   []string `json:"values,omitempty"`
	Required bool     `json:"required"`
	// Sensitive fields are credentials: sealed at rest like signing
	// secrets, never shown or logged once set.
	Sensitive bool `json:"sensitive"`
	// Default is the value when the field is left out, "" for none.
	Default string `json:"default,omitempty"`
}

// Kind is one system relay delivers to.
type Kind interface {
	// Name is the kind's name in commands and the API ("kafka").
	Name() string
	// Title is its name for people ("Apache Kafka"); Description says in
	// a sentence what a destination of this kind does.
	Title() string
	Description() string
	// Fields describe the configuration.
	Fields() []Field
	// Validate checks what Check cannot: the fields' meaning together.
	// It is called after Check, so every value has its field's type. It
	// returns a *FieldError. It connects to nothing.
	Validate(c Config) error
	// Ordered reports whether a destination with configuration c keeps
	// the order relay delivers the events of one key in (an ordered
	// destination delivers them one at a time, each confirmed before the
	// next).
	Ordered(c Config) bool
	// Open returns a publisher for configuration c (checked). It need not
	// connect: a target that is down is the first Publish's retryable
	// answer, not Open's error.
	Open(c Config, env Env) (Publisher, error)
}

// Ambient is implemented by a kind whose configuration may leave its
// credentials out and act with relay's own identity on the host (Google's
// Application Default Credentials, say). A tenant's destination may not:
// its customer would act with the operator's rights.
type Ambient interface {
	// AmbientCredentials reports whether configuration c acts with relay's
	// own identity, and names the field that would give its own.
	AmbientCredentials(c Config) (ambient bool, field string)
}

// FieldError says which field of a configuration is wrong and why.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "config " + e.Field + ": " + e.Msg }

// Errorf is a *FieldError for field.
func Errorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Check validates c for k: no unknown field, every required field set,
// every value of its field's type, then k.Validate.
func Check(k Kind, c Config) error {
	fields := k.Fields()
	names := make([]string, 0, len(c))
	for name := range c {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !slices.ContainsFunc(fields, func(f Field) bool { return f.Name == name }) {
			known := make([]string, len(fields))
			for i, f := range fields {
				known[i] = f.Name
			}
			return Errorf(name, "%s has no such field (its fields: %s)", k.Name(), strings.Join(known, ", "))
		}
	}
	for _, f := range fields {
		v, ok := c[f.Name]
		if !ok || v == "" {
			if f.Required {
				return Errorf(f.Name, "required (%s)", f.Help)
			}
			continue
		}
		if err := checkValue(f, v); err != nil {
			return err
		}
	}
	return k.Validate(c)
}

func checkValue(f Field, v string) error {
	switch f.Type {
	case Bool:
		if _, err := strconv.ParseBool(v); err != nil {
			return Errorf(f.Name, "%q is not true or false", v)
		}
	case Int:
		if _, err := strconv.Atoi(v); err != nil {
			return Errorf(f.Name, "%q is not a whole number", v)
		}
	case Duration:
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			return Errorf(f.Name, "%q is not a duration such as 5s or 1m", v)
		}
	case Enum:
		if !slices.Contains(f.Values, v) {
			return Errorf(f.Name, "%q is not one of %s", v, strings.Join(f.Values, ", "))
		}
	}
	if f.Type != Text && strings.ContainsAny(v, "\r\n\x00") {
		return Errorf(f.Name, "has a line break or a NUL")
	}
	return nil
}

// Get returns c's value of field name, or its default in k.
func Get(k Kind, c Config, name string) string {
	if v := c[name]; v != "" {
		return v
	}
	for _, f := range k.Fields() {
		if f.Name == name {
			return f.Default
		}
	}
	return ""
}

// Sensitive reports whether field name of k is a credential.
func Sensitive(k Kind, name string) bool {
	for _, f := range k.Fields() {
		if f.Name == name {
			return f.Sensitive
		}
	}
	return false
}

// ErrClosed is Publish's error after Close.
var ErrClosed = errors.New("publisher closed")

// HTTP is the name of the kind every destination has unless it says
// otherwise: HTTP POSTs, delivered by the engine's own sender.
const HTTP = "http"

var (
	regMu    sync.RWMutex
	registry = map[string]Kind{}
)

// Register makes k known by its name to Lookup and All. It panics if the
// name is taken, as database/sql.Register does: kinds register once, at
// start (package kind/kinds registers relay's).
func Register(k Kind) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[k.Name()]; dup || k.Name() == HTTP {
		panic("kind: Register called twice for " + k.Name())
	}
	registry[k.Name()] = k
}

// Lookup returns the registered kind name.
func Lookup(name string) (Kind, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	k, ok := registry[name]
	return k, ok
}

// Names are the registered kinds' names, sorted, HTTP first.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return append([]string{HTTP}, names...)
}

// All returns the registered kinds, sorted by name.
func All() []Kind {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]Kind, 0, len(registry))
	for _, k := range registry {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Kind) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}
