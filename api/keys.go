// Package api is relay's HTTP API: its keys, and the server of its
// resources under /v1 (see docs/api.md).
package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/stream"
)

// Scope is what a key may do.
type Scope string

// The scopes. Admin may do everything; read may read everything but
// secrets; publish may only publish events.
const (
	ScopePublish Scope = "publish"
	ScopeRead    Scope = "read"
	ScopeAdmin   Scope = "admin"
)

// scopeAny is what a request every valid key may make needs (GET
// /v1/key).
const scopeAny Scope = ""

// Allows reports whether a key of scope s may do what needs scope need.
func (s Scope) Allows(need Scope) bool {
	return s == ScopeAdmin || s == need || need == scopeAny
}

// ParseScope reads a scope.
func ParseScope(v string) (Scope, error) {
	switch s := Scope(v); s {
	case ScopePublish, ScopeRead, ScopeAdmin:
		return s, nil
	}
	return "", fmt.Errorf("scope %q: use publish, read or admin", v)
}

// Key is a stored API key: its name, scope and a hash of its secret part,
// never the key itself.
type Key struct {
	// ID is the key's public part, its record's name in the bucket.
	ID    string `json:"id"`
	Name  string `json:"name"`
	Scope Scope  `json:"scope"`
	// Tenant is the tenant the key is confined to: it sees and changes
	// that tenant's resources only. "" for a key of no tenant.
	Tenant  string    `json:"tenant,omitempty"`
	Created time.Time `json:"created"`
	// Session is the customer portal's session the request comes from
	// (its token is a bearer key of the session's tenant), and
	// Capabilities what it may change: not a stored key.
	Session      string              `json:"session,omitempty"`
	Capabilities []portal.Capability `json:"capabilities,omitempty"`
	// Hash is the SHA-256 of the key's secret part, hex: the secret is 32
	// random bytes, so a fast hash is enough (no password to guess).
	Hash string `json:"hash,omitempty"`
}

// A key reads relay_<id>_<secret>: the id (8 random bytes, hex) finds its
// record, the secret (32 random bytes, base64url) proves it.
const keyPrefix = "relay_"

var (
	nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}$`)
	idRE   = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// Errors of the key store.
var (
	ErrKeyExists   = errors.New("an API key with this name exists")
	ErrKeyNotFound = errors.New("no API key with this name")
	// ErrBadKey is the one answer to a key that is not valid, whatever
	// the reason: malformed, unknown, revoked or wrong.
	ErrBadKey = errors.New("invalid API key")
)

// Keys stores API keys in the relay_api_keys bucket, which every replica
// reads.
type Keys struct {
	kv  jetstream.KeyValue
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cachedKey // by id
}

type cachedKey struct {
	rec Key
	at  time.Time
}

const keyCacheFor = time.Second

// OpenKeys opens the key store ('relay run' creates the bucket).
func OpenKeys(ctx context.Context, js jetstream.JetStream) (*Keys, error) {
	kv, err := js.KeyValue(ctx, stream.KeysBucket)
	if err != nil {
		return nil, fmt.Errorf("open API key bucket %s (has relay set up the streams? run 'relay run' once): %w", stream.KeysBucket, err)
	}
	return &Keys{kv: kv, now: time.Now, cache: map[string]cachedKey{}}, nil
}

// Create makes a key named name with scope, stores its hash, and returns
// the key (the only time it is known) and its record.
func (k *Keys) Create(ctx context.Context, name string, scope Scope) (string, Key, error) {
	return k.CreateFor(ctx, "", name, scope)
}

// CreateFor is Create of a key confined to tenant ("": none). Key names
// are unique across tenants.
func (k *Keys) CreateFor(ctx context.Context, tenant, name string, scope Scope) (string, Key, error) {
	if err := ValidateName(name); err != nil {
		return "", Key{}, err
	}
	if tenant != "" {
		if err := stream.ValidateTenantID(tenant); err != nil {
			return "", Key{}, err
		}
	}
	if _, err := ParseScope(string(scope)); err != nil {
		return "", Key{}, err
	}
	all, err := k.List(ctx)
	if err != nil {
		return "", Key{}, err
	}
	if slices.ContainsFunc(all, func(x Key) bool { return x.Name == name }) {
		return "", Key{}, fmt.Errorf("%w: %s (revoke it first, or choose another name)", ErrKeyExists, name)
	}
	var id [8]byte
	var secret [32]byte
	_, _ = rand.Read(id[:])
	_, _ = rand.Read(secret[:])
	rec := Key{ID: hex.EncodeToString(id[:]), Name: name, Scope: scope, Tenant: tenant, Created: k.now().UTC()}
	sec := base64.RawURLEncoding.EncodeToString(secret[:])
	rec.Hash = hashSecret(sec)
	b, _ := json.Marshal(rec)
	if _, err := k.kv.Create(ctx, rec.ID, b); err != nil {
		return "", Key{}, fmt.Errorf("store API key %s: %w", name, err)
	}
	rec.Hash = ""
	return keyPrefix + rec.ID + "_" + sec, rec, nil
}

// ValidateName reports whether name can name a key.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("key name %q: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// List returns every key's record, without hashes, sorted by name.
func (k *Keys) List(ctx context.Context) ([]Key, error) {
	lister, err := k.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	var out []Key
	for id := range lister.Keys() {
		rec, err := k.get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // revoked meanwhile
		}
		if err != nil {
			return nil, err
		}
		rec.Hash = ""
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (k *Keys) get(ctx context.Context, id string) (Key, error) {
	e, err := k.kv.Get(ctx, id)
	if err != nil {
		return Key{}, err
	}
	var rec Key
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Key{}, fmt.Errorf("API key %s stored corrupt: %w", id, err)
	}
	return rec, nil
}

// Revoke deletes the key named name: requests with it fail from then on.
func (k *Keys) Revoke(ctx context.Context, name string) (Key, error) {
	all, err := k.List(ctx)
	if err != nil {
		return Key{}, err
	}
	i := slices.IndexFunc(all, func(x Key) bool { return x.Name == name })
	if i < 0 {
		return Key{}, fmt.Errorf("%w: %s", ErrKeyNotFound, name)
	}
	k.mu.Lock()
	delete(k.cache, all[i].ID)
	k.mu.Unlock()
	if err := k.kv.Purge(ctx, all[i].ID); err != nil {
		return Key{}, fmt.Errorf("revoke API key %s: %w", name, err)
	}
	return all[i], nil
}

// RevokeTenant revokes every key of tenant, and returns how many.
func (k *Keys) RevokeTenant(ctx context.Context, tenant string) (int, error) {
	all, err := k.List(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, key := range all {
		if key.Tenant != tenant || tenant == "" {
			continue
		}
		if _, err := k.Revoke(ctx, key.Name); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Verify returns the record of key, or ErrBadKey. The secret is compared
// with the stored hash in constant time. When the key's id names a stored
// key but its secret is wrong, the error comes with that key's id and
// name, for the log.
func (k *Keys) Verify(ctx context.Context, key string) (Key, error) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	id, secret, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || !idRE.MatchString(id) || secret == "" {
		return Key{}, ErrBadKey
	}
	k.mu.Lock()
	c, ok := k.cache[id]
	k.mu.Unlock()
	rec := c.rec
	if !ok || k.now().Sub(c.at) >= keyCacheFor {
		var err error
		rec, err = k.get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			k.mu.Lock()
			delete(k.cache, id)
			k.mu.Unlock()
			return Key{}, ErrBadKey
		}
		if err != nil {
			return Key{}, err
		}
		k.mu.Lock()
		k.cache[id] = cachedKey{rec: rec, at: k.now()}
		k.mu.Unlock()
	}
	if subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(rec.Hash)) != 1 {
		// The id names a key, the secret is wrong: the name is returned
		// with the error, for the log (never the key).
		return Key{ID: rec.ID, Name: rec.Name}, ErrBadKey
	}
	rec.Hash = ""
	return rec, nil
}
