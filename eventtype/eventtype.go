// Package eventtype is relay's catalog of event types: for each type a
// description, an example and, optionally, a JSON Schema that the events
// published with the type must satisfy. Types are global: the operator's
// product defines them. The catalog lives in the relay_event_types bucket,
// keyed by type.
package eventtype

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/relaydev/relay/stream"
)

// EventType is one type of the catalog.
type EventType struct {
	// Type is the event type, as producers give it (order.created).
	Type string `json:"type"`
	// Description says what the event means, for people choosing what to
	// subscribe to (at most MaxDescriptionLen bytes). Optional.
	Description string `json:"description,omitempty"`
	// Example is an example event body (JSON). Optional; with a Schema it
	// must satisfy it.
	Example json.RawMessage `json:"example,omitempty"`
	// Schema is a JSON Schema (draft 2020-12 unless it says another with
	// $schema) that every event of the type must satisfy. Optional:
	// without it any JSON body is accepted. It may not refer to other
	// documents ($ref to a URL): a schema is one document.
	Schema    json.RawMessage `json:"schema,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	// Rev is the record's revision in the bucket (Catalog.WaitRev).
	Rev uint64 `json:"-"`
}

// Limits of a type's record.
const (
	MaxDescriptionLen = 2048
	MaxExampleLen     = 64 << 10
	MaxSchemaLen      = 64 << 10
)

// FieldError is a field of a type's record that is not valid; Field names
// it as the API's JSON does.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Validate checks t: its type, description, example and schema (which must
// compile, and which the example must satisfy).
func (t EventType) Validate() error {
	_, err := t.compile()
	return err
}

// compile is Validate, and t's compiled schema (nil without one).
func (t EventType) compile() (*Schema, error) {
	if err := stream.ValidateEventType(t.Type); err != nil {
		return nil, &FieldError{"type", err.Error()}
	}
	if len(t.Description) > MaxDescriptionLen || !utf8.ValidString(t.Description) {
		return nil, &FieldError{"description", fmt.Sprintf("use at most %d bytes of UTF-8", MaxDescriptionLen)}
	}
	if len(t.Example) > MaxExampleLen {
		return nil, &FieldError{"example", fmt.Sprintf("%d bytes; at most %d", len(t.Example), MaxExampleLen)}
	}
	if len(t.Example) > 0 && !json.Valid(t.Example) {
		return nil, &FieldError{"example", "not valid JSON"}
	}
	if len(t.Schema) == 0 {
		return nil, nil
	}
	if len(t.Schema) > MaxSchemaLen {
		return nil, &FieldError{"schema", fmt.Sprintf("%d bytes; at most %d", len(t.Schema), MaxSchemaLen)}
	}
	s, err := Compile(t.Schema)
	if err != nil {
		return nil, &FieldError{"schema", err.Error()}
	}
	if len(t.Example) > 0 {
		if err := s.Check(t.Example); err != nil {
			return nil, &FieldError{"example", "does not satisfy the schema: " + err.Error()}
		}
	}
	return s, nil
}

// Schema is a compiled JSON Schema.
type Schema struct{ s *jsonschema.Schema }

// schemaURL names the one document a schema is, for the compiler.
// (a URL with a path: a relative $ref resolves to another document, which
// is refused, rather than to this one).
const schemaURL = "file:///relay/event-type/schema.json"

// Compile compiles a JSON Schema. It refers to no other document: a $ref
// to a URL or file is refused, so that compiling one never reads the
// network or the disk.
func Compile(schema []byte) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no scheme: nothing is loaded
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("not a JSON Schema relay can use: %s", strings.ReplaceAll(err.Error(), schemaURL, "the schema"))
	}
	// A reference cycle shows only as a value is checked: find it now,
	// rather than refuse every event of the type for it.
	for _, v := range []any{nil, map[string]any{}, []any{}, ""} {
		var ve *jsonschema.ValidationError
		if err := s.Validate(v); errors.As(err, &ve) && hasCycle(ve) {
			return nil, errors.New("not a JSON Schema relay can use: its references make a cycle")
		}
	}
	return &Schema{s: s}, nil
}

func hasCycle(ve *jsonschema.ValidationError) bool {
	if _, ok := ve.ErrorKind.(*kind.RefCycle); ok {
		return true
	}
	return slices.ContainsFunc(ve.Causes, hasCycle)
}

// Mismatch is an event body that does not satisfy its type's schema: Path
// is a JSON pointer to the value at fault ("" for the whole body), Reason
// what is wrong with it.
type Mismatch struct {
	Path, Reason string
}

func (m *Mismatch) Error() string {
	if m.Path == "" {
		return "the body: " + m.Reason
	}
	return m.Path + ": " + m.Reason
}

// Check reports whether body satisfies s, with a *Mismatch naming the first
// value at fault when it does not.
func (s *Schema) Check(body []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return &Mismatch{Reason: "not valid JSON"}
	}
	err = s.s.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Mismatch{Reason: err.Error()}
	}
	// The deepest first cause names the value at fault.
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return &Mismatch{Path: pointer(ve.InstanceLocation), Reason: ve.ErrorKind.LocalizedString(printer)}
}

// printer writes the schema validator's reasons in English.
var printer = message.NewPrinter(language.English)

// pointer is a JSON pointer (RFC 6901) of the path's tokens.
func pointer(path []string) string {
	var b strings.Builder
	for _, t := range path {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// ErrNotFound: the catalog has no such type.
var ErrNotFound = errors.New("no such event type")

// Store reads and writes the catalog.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// Open opens the catalog's bucket, which relay run creates (stream.Ensure).
// now is the clock of the records' times; nil is time.Now.
func Open(ctx context.Context, js jetstream.JetStream, now func() time.Time) (*Store, error) {
	kv, err := js.KeyValue(ctx, stream.EventTypesBucket)
	if err != nil {
		return nil, fmt.Errorf("open event-type bucket %s (has relay set up the streams? run 'relay run' once): %w", stream.EventTypesBucket, err)
	}
	if now == nil {
		now = time.Now
	}
	return &Store{kv: kv, now: now}, nil
}

// Put creates the type t.Type, or replaces its description, example and
// schema (an upsert); it returns the type as stored and whether it was
// created.
func (s *Store) Put(ctx context.Context, t EventType) (EventType, bool, error) {
	if err := t.Validate(); err != nil {
		return EventType{}, false, err
	}
	t.Example, t.Schema = compact(t.Example), compact(t.Schema)
	for {
		now := s.now().UTC()
		old, rev, err := s.get(ctx, t.Type)
		created := errors.Is(err, ErrNotFound)
		if err != nil && !created {
			return EventType{}, false, err
		}
		t.CreatedAt, t.UpdatedAt = now, now
		if !created {
			t.CreatedAt = old.CreatedAt
		}
		b, err := json.Marshal(t)
		if err != nil {
			return EventType{}, false, err
		}
		if created {
			t.Rev, err = s.kv.Create(ctx, t.Type, b)
		} else {
			t.Rev, err = s.kv.Update(ctx, t.Type, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return EventType{}, false, fmt.Errorf("store event type %s: %w", t.Type, err)
		}
		return t, created, nil
	}
}

func compact(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// Get returns the type, or ErrNotFound.
func (s *Store) Get(ctx context.Context, typ string) (EventType, error) {
	if stream.ValidateEventType(typ) != nil {
		return EventType{}, fmt.Errorf("%w: %s", ErrNotFound, typ)
	}
	t, _, err := s.get(ctx, typ)
	return t, err
}

func (s *Store) get(ctx context.Context, typ string) (EventType, uint64, error) {
	e, err := s.kv.Get(ctx, typ)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return EventType{}, 0, fmt.Errorf("%w: %s", ErrNotFound, typ)
	}
	if err != nil {
		return EventType{}, 0, fmt.Errorf("read event type %s: %w", typ, err)
	}
	var t EventType
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return EventType{}, 0, fmt.Errorf("event type %s stored corrupt: %w", typ, err)
	}
	t.Rev = e.Revision()
	return t, e.Revision(), nil
}

// List returns every type of the catalog, in the order of their names.
func (s *Store) List(ctx context.Context) ([]EventType, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list event types: %w", err)
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, k)
	}
	slices.Sort(names)
	out := []EventType{}
	for _, n := range names {
		t, _, err := s.get(ctx, n)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Delete removes the type from the catalog, or returns ErrNotFound; it
// returns the revision of the removal (Catalog.WaitRev). Events of the type
// are accepted, unchecked, from then on.
func (s *Store) Delete(ctx context.Context, typ string) (uint64, error) {
	_, rev, err := s.get(ctx, typ)
	if err != nil {
		return 0, err
	}
	if err := s.kv.Delete(ctx, typ, jetstream.LastRevision(rev)); err != nil {
		return 0, fmt.Errorf("delete event type %s: %w", typ, err)
	}
	// The delete marker's revision is the bucket's last sequence (or an
	// earlier one, if others wrote since: waiting for it waits as long).
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("delete event type %s: %w", typ, err)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		return bs.StreamInfo().State.LastSeq, nil
	}
	return 0, nil
}
