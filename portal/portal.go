// Package portal holds the customer portal's sessions: links a sender's
// backend mints for one of its tenants (POST /v1/tenants/{id}/portal-
// sessions), each exchanged once for a session cookie. Only hashes of the
// links' and cookies' secrets are stored (the relay_portal bucket): someone
// who reads relay's buckets cannot sign in with what they read.
package portal

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Capability is what a session may do beyond reading its tenant's
// endpoints, attempts, events and dead letters.
type Capability string

// The capabilities.
const (
	// ManageEndpoints: add, edit, pause, resume and remove endpoints, and
	// send test events.
	ManageEndpoints Capability = "manage_endpoints"
	// ViewSecret: reveal an endpoint's signing secret.
	ViewSecret Capability = "view_secret"
	// RotateSecret: rotate an endpoint's signing secret.
	RotateSecret Capability = "rotate_secret"
	// Replay: replay dead letters.
	Replay Capability = "replay"
)

// Capabilities are every capability, in the order they are listed.
var Capabilities = []Capability{ManageEndpoints, ViewSecret, RotateSecret, Replay}

// Session lifetimes: DefaultTTL unless asked, at most MaxTTL.
const (
	DefaultTTL = time.Hour
	MinTTL     = time.Minute
	MaxTTL     = 24 * time.Hour
)

// Session is a portal session as stored: never a secret, only hashes.
type Session struct {
	ID           string       `json:"id"`
	Tenant       string       `json:"tenant"`
	Capabilities []Capability `json:"capabilities"`
	Created      time.Time    `json:"created"`
	Expires      time.Time    `json:"expires"`
	// Epoch is the tenant's portal epoch when the link was minted: a
	// session of another epoch has ended (EndAll).
	Epoch string `json:"epoch"`
	// LinkHash is the SHA-256 of the link's secret; CookieHash of the
	// session cookie's, once the link was exchanged (then the link is
	// spent).
	LinkHash   string `json:"link_hash"`
	CookieHash string `json:"cookie_hash,omitempty"`
	// By is the API key that minted it, for the audit.
	By string `json:"by,omitempty"`
}

// Can reports whether the session has capability c.
func (s Session) Can(c Capability) bool { return slices.Contains(s.Capabilities, c) }

// Errors.
var (
	// ErrBadToken is the one answer to a link or cookie that is not a
	// valid, live session's, whatever the reason: malformed, unknown,
	// spent, expired, or ended.
	ErrBadToken = errors.New("invalid or expired portal link or session")
	// ErrCapability: a capability that is not one.
	ErrCapability = errors.New("unknown capability")
)

// Store keeps the portal's sessions in the relay_portal bucket: per
// session s.<id> (the session, with its link's hash) and, once the link
// was exchanged, c.<id> (its cookie's hash), both expiring with the
// session; per tenant e.<tenant>, its epoch.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// Open opens the portal's bucket, which relay run creates (stream.Ensure).
// now is the clock; nil is time.Now.
func Open(ctx context.Context, js jetstream.JetStream, now func() time.Time) (*Store, error) {
	kv, err := js.KeyValue(ctx, stream.PortalBucket)
	if err != nil {
		return nil, fmt.Errorf("open portal bucket %s (has relay set up the streams? run 'relay run' once): %w", stream.PortalBucket, err)
	}
	if now == nil {
		now = time.Now
	}
	return &Store{kv: kv, now: now}, nil
}

// A link's token reads rpl_<id>_<secret>, a session cookie rps_<id>_<secret>:
// the id (8 random bytes, hex) finds the session, the secret (32 random
// bytes, base64url) proves it.
const (
	linkPrefix   = "rpl_"
	cookiePrefix = "rps_"
)

// IsSessionToken reports whether token has the form of a session cookie's
// token (the API takes it as a bearer key of the session's tenant).
func IsSessionToken(token string) bool { return strings.HasPrefix(token, cookiePrefix) }

var idRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

func secret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// split takes a token of prefix apart into its id and secret.
func split(token, prefix string) (id, sec string, ok bool) {
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok {
		return "", "", false
	}
	id, sec, ok = strings.Cut(rest, "_")
	return id, sec, ok && idRE.MatchString(id) && sec != ""
}

// ParseCapabilities reads capabilities, each once.
func ParseCapabilities(names []string) ([]Capability, error) {
	var out []Capability
	for _, n := range names {
		c := Capability(n)
		if !slices.Contains(Capabilities, c) {
			return nil, fmt.Errorf("%w %q: use %s", ErrCapability, n, capList())
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out, nil
}

func capList() string {
	s := make([]string, len(Capabilities))
	for i, c := range Capabilities {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// Mint makes a session of tenant with caps, for ttl (0: DefaultTTL), and
// returns its link's token: the only time the token is known.
func (s *Store) Mint(ctx context.Context, tenant string, caps []Capability, ttl time.Duration, by string) (string, Session, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return "", Session{}, fmt.Errorf("a portal session lasts %s to %s; %s asked", MinTTL, MaxTTL, ttl)
	}
	epoch, err := s.epoch(ctx, tenant)
	if err != nil {
		return "", Session{}, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	sec := secret()
	now := s.now().UTC()
	sess := Session{ID: hex.EncodeToString(id[:]), Tenant: tenant, Capabilities: caps, Created: now, Expires: now.Add(ttl), Epoch: epoch, LinkHash: hash(sec), By: by}
	if sess.Capabilities == nil {
		sess.Capabilities = []Capability{}
	}
	b, _ := json.Marshal(sess)
	if _, err := s.kv.Create(ctx, "s."+sess.ID, b, jetstream.KeyTTL(ttl)); err != nil {
		return "", Session{}, fmt.Errorf("store portal session: %w", err)
	}
	return linkPrefix + sess.ID + "_" + sec, sess, nil
}

// epoch is tenant's portal epoch, made at its first session.
func (s *Store) epoch(ctx context.Context, tenant string) (string, error) {
	e, err := s.kv.Get(ctx, "e."+tenant)
	if err == nil {
		return string(e.Value()), nil
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", fmt.Errorf("read the portal epoch of tenant %s: %w", tenant, err)
	}
	ep := newEpoch()
	if _, err := s.kv.Create(ctx, "e."+tenant, []byte(ep)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return s.epoch(ctx, tenant) // another made it meanwhile
		}
		return "", fmt.Errorf("store the portal epoch of tenant %s: %w", tenant, err)
	}
	return ep, nil
}

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatUint(binary.BigEndian.Uint64(b[:]), 36)
}

// EndAll ends every session of tenant, and every link not yet exchanged:
// its epoch changes.
func (s *Store) EndAll(ctx context.Context, tenant string) error {
	if _, err := s.kv.Put(ctx, "e."+tenant, []byte(newEpoch())); err != nil {
		return fmt.Errorf("end the portal sessions of tenant %s: %w", tenant, err)
	}
	return nil
}

// Exchange spends the link token for a session cookie, once: a second
// exchange of the same link, an expired or ended one, or a wrong one is
// ErrBadToken.
func (s *Store) Exchange(ctx context.Context, token string) (cookie string, _ Session, _ error) {
	return s.ExchangeFor(ctx, token, "")
}

// ExchangeFor is Exchange of a link that must be tenant's (any tenant's
// when tenant is ""): another's is ErrBadToken, and not spent.
func (s *Store) ExchangeFor(ctx context.Context, token, tenant string) (cookie string, _ Session, _ error) {
	id, sec, ok := split(token, linkPrefix)
	if !ok {
		return "", Session{}, ErrBadToken
	}
	sess, err := s.live(ctx, id)
	if err != nil {
		return "", Session{}, err
	}
	if tenant != "" && sess.Tenant != tenant {
		return "", Session{}, ErrBadToken
	}
	if subtle.ConstantTimeCompare([]byte(hash(sec)), []byte(sess.LinkHash)) != 1 {
		return "", Session{}, ErrBadToken
	}
	csec := secret()
	left := sess.Expires.Sub(s.now())
	if _, err := s.kv.Create(ctx, "c."+id, []byte(hash(csec)), jetstream.KeyTTL(max(left, time.Second))); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return "", Session{}, ErrBadToken // spent
		}
		return "", Session{}, fmt.Errorf("store portal session cookie: %w", err)
	}
	return cookiePrefix + id + "_" + csec, sess, nil
}

// Verify returns the live session of cookie, or ErrBadToken.
func (s *Store) Verify(ctx context.Context, cookie string) (Session, error) {
	id, sec, ok := split(cookie, cookiePrefix)
	if !ok {
		return Session{}, ErrBadToken
	}
	e, err := s.kv.Get(ctx, "c."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Session{}, ErrBadToken
	}
	if err != nil {
		return Session{}, err
	}
	if subtle.ConstantTimeCompare([]byte(hash(sec)), e.Value()) != 1 {
		return Session{}, ErrBadToken
	}
	return s.live(ctx, id)
}

// live is session id, when it has not expired nor ended.
func (s *Store) live(ctx context.Context, id string) (Session, error) {
	e, err := s.kv.Get(ctx, "s."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Session{}, ErrBadToken
	}
	if err != nil {
		return Session{}, err
	}
	var sess Session
	if err := json.Unmarshal(e.Value(), &sess); err != nil {
		return Session{}, ErrBadToken
	}
	if !s.now().Before(sess.Expires) {
		return Session{}, ErrBadToken
	}
	ep, err := s.kv.Get(ctx, "e."+sess.Tenant)
	if errors.Is(err, jetstream.ErrKeyNotFound) || err == nil && string(ep.Value()) != sess.Epoch {
		return Session{}, ErrBadToken // ended
	}
	if err != nil {
		return Session{}, err
	}
	return sess, nil
}

// End ends the session of cookie (a sign-out): its cookie is no longer
// good, on any replica. A cookie that is not a live session's is
// ErrBadToken.
func (s *Store) End(ctx context.Context, cookie string) error {
	sess, err := s.Verify(ctx, cookie)
	if err != nil {
		return err
	}
	// The session first: without it neither the cookie nor the link is
	// good, whatever happens to the cookie's key.
	if err := s.kv.Purge(ctx, "s."+sess.ID); err != nil {
		return fmt.Errorf("end portal session %s: %w", sess.ID, err)
	}
	if err := s.kv.Purge(ctx, "c."+sess.ID); err != nil {
		return fmt.Errorf("end portal session %s: %w", sess.ID, err)
	}
	return nil
}
