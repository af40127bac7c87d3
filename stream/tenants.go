package stream

import (
	"fmt"
	"regexp"
	"strings"
)

// The tenant subject contract. A destination of tenant T is named N within
// T; relay refers to it as T=N (DestRef), in its own subjects (relay.in.T=N,
// relay.ev.T=N.B, relay.dlq.T=N, ...), consumer names and buckets, so that
// everything keyed by a destination keeps working for tenants' ones. A
// producer publishes for tenant T with T as a token of its own, so that a
// NATS permission (publish allow relay.t.T.>) confines it to T:
//
//	relay.t.T.in.N        (destination N of T, no order key)
//	relay.t.T.in.N.K      (with order key K)
//	relay.t.T.type.X      (by type X, to T's destinations subscribed to X)
//
// A keyed event is stored as relay.tev.T.N.B, B its key's bucket, by the
// account mapping TenantMapping (a stream has one subject transform, which
// relay.in.*.* takes). relay's embedded NATS server has it; an external
// server needs it in its configuration (docs/tenants.md).
const (
	TenantPrefix      = "relay.t"
	TenantKeyedPrefix = "relay.tev"
	// RefSep separates a tenant's id from its destination's name in a
	// destination reference. Neither may contain it.
	RefSep = "="
)

// TenantMapping is the account mapping (source and destination) that
// stores a tenant's keyed events by bucket.
func TenantMapping() (src, dst string) {
	return TenantPrefix + ".*.in.*.*", fmt.Sprintf("%s.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(%d,3)}}", TenantKeyedPrefix, Buckets)
}

var tenantIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidateTenantID checks a tenant id: 1 to 64 characters A-Z, a-z, 0-9,
// '_' or '-', starting with a letter or digit. Such an id is one subject
// token and a bucket key as it is.
func ValidateTenantID(id string) error {
	if !tenantIDRE.MatchString(id) {
		return fmt.Errorf("invalid tenant id %q: use 1-64 characters A-Z, a-z, 0-9, '_' or '-', starting with a letter or digit", id)
	}
	return nil
}

// DestRef is how relay refers to destination name of tenant (T=N), or to
// a destination of no tenant (tenant ""): its name.
func DestRef(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return tenant + RefSep + name
}

// SplitDestRef is DestRef undone: the tenant ("" for none) and the name.
func SplitDestRef(ref string) (tenant, name string) {
	if t, n, ok := strings.Cut(ref, RefSep); ok {
		return t, n
	}
	return "", ref
}

// ValidateDestRef reports whether ref refers to a destination: a valid
// destination name, or a valid tenant id, RefSep and a valid name.
func ValidateDestRef(ref string) error {
	t, n := SplitDestRef(ref)
	if t != "" || strings.HasPrefix(ref, RefSep) {
		if err := ValidateTenantID(t); err != nil {
			return err
		}
	}
	return ValidateDestName(n)
}

// TenantInSubject is the subject a producer publishes to for destination
// name of tenant, with order key key (empty: none).
func TenantInSubject(tenant, name, key string) string {
	s := TenantPrefix + "." + tenant + ".in." + name
	if key != "" {
		s += "." + KeyToken(key)
	}
	return s
}

// TenantTypeSubject is the subject a producer publishes an event of type
// t to for tenant.
func TenantTypeSubject(tenant, t string) string {
	return TenantPrefix + "." + tenant + ".type." + t
}

// TenantTypeFilter is the filter subject of every tenant's typed events.
const TenantTypeFilter = TenantPrefix + ".*.type.>"

// tenantFilters are the stored subjects of destination name of tenant that
// producers publish to directly (relay's own publishes use relay.in.T=N).
func tenantFilters(tenant, name string) []string {
	return []string{TenantPrefix + "." + tenant + ".in." + name, TenantKeyedPrefix + "." + tenant + "." + name + ".>"}
}

// Mappings are the subject mappings (source to destination) relay needs of
// the account it publishes in: TenantMapping's.
func Mappings() map[string]string {
	src, dst := TenantMapping()
	return map[string]string{src: dst}
}
