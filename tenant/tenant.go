// Package tenant holds relay's tenants: the operator's customers, each with
// its own destinations, keys and limits. A tenant is a record in the
// relay_tenants bucket, keyed by its id, which the caller chooses.
package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Tenant is one of the operator's customers.
type Tenant struct {
	// ID is chosen by the caller (ValidateID), and never changes.
	ID string `json:"id"`
	// Name is for people (at most MaxNameLen bytes). Optional.
	Name string `json:"name,omitempty"`
	// Metadata is the caller's own, kept as given (ValidateMetadata).
	// Optional.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Defaults are what its new destinations take where no setting is
	// given; Limits what it may use. Optional.
	Defaults Defaults `json:"defaults,omitzero"`
	Limits   Limits   `json:"limits,omitzero"`
	// Portal is how the customer portal shows itself to the tenant's
	// customers, and where it may be embedded. Optional.
	Portal    Portal    `json:"portal,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Limits of a tenant's record.
const (
	MaxIDLen          = 64
	MaxNameLen        = 256
	MaxMetadataKeys   = 50
	MaxMetadataKeyLen = 64
	MaxMetadataValLen = 512
)

// ValidateID checks a tenant id: 1 to 64 characters A-Z, a-z, 0-9, '_' or
// '-', starting with a letter or digit. Such an id is one token of a NATS
// subject and a key of the bucket as it is, so that NATS permissions can
// name a tenant's subjects.
func ValidateID(id string) error { return stream.ValidateTenantID(id) }

// FieldError is a tenant's field that is not valid: Field names it as the
// API's JSON does ("name", "metadata.plan").
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Validate checks t's id, name, metadata, defaults, limits and portal
// settings.
func (t Tenant) Validate() error {
	if err := ValidateID(t.ID); err != nil {
		return &FieldError{"id", err.Error()}
	}
	if len(t.Name) > MaxNameLen {
		return &FieldError{"name", fmt.Sprintf("%d bytes; at most %d", len(t.Name), MaxNameLen)}
	}
	if !utf8.ValidString(t.Name) || strings.ContainsFunc(t.Name, isControl) {
		return &FieldError{"name", "use printable UTF-8 text, without control characters"}
	}
	if err := ValidateMetadata(t.Metadata); err != nil {
		return err
	}
	if err := t.Defaults.validate(); err != nil {
		return err
	}
	if err := t.Limits.validate(); err != nil {
		return err
	}
	_, err := t.Portal.normalize()
	return err
}

// ValidateMetadata checks a tenant's metadata: at most MaxMetadataKeys
// entries, each key 1 to MaxMetadataKeyLen bytes and each value at most
// MaxMetadataValLen, all UTF-8.
func ValidateMetadata(m map[string]string) error {
	if len(m) > MaxMetadataKeys {
		return &FieldError{"metadata", fmt.Sprintf("%d entries; at most %d", len(m), MaxMetadataKeys)}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch {
		case k == "" || len(k) > MaxMetadataKeyLen || !utf8.ValidString(k) || strings.ContainsFunc(k, isControl):
			return &FieldError{"metadata", fmt.Sprintf("key %q: use 1-%d bytes of printable UTF-8", k, MaxMetadataKeyLen)}
		case len(v) > MaxMetadataValLen || !utf8.ValidString(v):
			return &FieldError{"metadata." + k, fmt.Sprintf("use at most %d bytes of UTF-8", MaxMetadataValLen)}
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// ErrNotFound: no tenant has the id.
var ErrNotFound = errors.New("no such tenant")

// Store reads and writes the tenants in the relay_tenants bucket.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// Open opens the tenants' bucket, which relay run creates (stream.Ensure).
// now is the clock of the records' times; nil is time.Now.
func Open(ctx context.Context, js jetstream.JetStream, now func() time.Time) (*Store, error) {
	kv, err := js.KeyValue(ctx, stream.TenantsBucket)
	if err != nil {
		return nil, fmt.Errorf("open tenant bucket %s (has relay set up the streams? run 'relay run' once): %w", stream.TenantsBucket, err)
	}
	if now == nil {
		now = time.Now
	}
	return &Store{kv: kv, now: now}, nil
}

// Put creates the tenant t.ID, or replaces its name, metadata, defaults,
// limits and portal settings: an upsert. It returns the tenant as stored
// (its portal settings normalized), and whether it was created. Its
// CreatedAt is kept across updates.
func (s *Store) Put(ctx context.Context, t Tenant) (Tenant, bool, error) {
	if err := t.Validate(); err != nil {
		return Tenant{}, false, err
	}
	var err error
	if t.Portal, err = t.Portal.normalize(); err != nil {
		return Tenant{}, false, err
	}
	for {
		now := s.now().UTC()
		old, rev, err := s.get(ctx, t.ID)
		created := errors.Is(err, ErrNotFound)
		if err != nil && !created {
			return Tenant{}, false, err
		}
		t.CreatedAt, t.UpdatedAt = now, now
		if !created {
			t.CreatedAt = old.CreatedAt
		}
		b, err := json.Marshal(t)
		if err != nil {
			return Tenant{}, false, err
		}
		if created {
			_, err = s.kv.Create(ctx, t.ID, b)
		} else {
			_, err = s.kv.Update(ctx, t.ID, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // written meanwhile: read it again
		}
		if err != nil {
			return Tenant{}, false, fmt.Errorf("store tenant %s: %w", t.ID, err)
		}
		return t, created, nil
	}
}

// Get returns the tenant id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (Tenant, error) {
	if ValidateID(id) != nil {
		return Tenant{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	t, _, err := s.get(ctx, id)
	return t, err
}

func (s *Store) get(ctx context.Context, id string) (Tenant, uint64, error) {
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Tenant{}, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Tenant{}, 0, fmt.Errorf("read tenant %s: %w", id, err)
	}
	var t Tenant
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return Tenant{}, 0, fmt.Errorf("tenant %s stored corrupt: %w", id, err)
	}
	return t, e.Revision(), nil
}

// List returns up to limit tenants whose ids sort after after (empty: from
// the first), in the order of their ids, and the cursor of the next page
// (empty: none).
func (s *Store) List(ctx context.Context, after string, limit int) ([]Tenant, string, error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("limit %d: give at least 1", limit)
	}
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: %w", err)
	}
	var ids []string
	for id := range lister.Keys() {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []Tenant
	for _, id := range ids {
		if len(out) == limit {
			return out, out[len(out)-1].ID, nil
		}
		t, _, err := s.get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, t)
	}
	return out, "", nil
}

// Delete removes the tenant id, or returns ErrNotFound.
func (s *Store) Delete(ctx context.Context, id string) error {
	_, rev, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	if err := s.kv.Delete(ctx, id, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("delete tenant %s: %w", id, err)
	}
	return nil
}
