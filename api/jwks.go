package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/webhook"
)

// jwksMaxAge is how long receivers may cache a JWKS (Cache-Control):
// shorter than any useful rotation overlap, so that a receiver that
// caches it sees the new key before the old one stops signing.
const jwksMaxAge = 5 * time.Minute

// jwksFresh is how long the server keeps the key sets it built: the JWKS
// is served without a key, and building it reads every destination.
const jwksFresh = 10 * time.Second

// jwksBuildTimeout bounds a build of the key sets.
const jwksBuildTimeout = 30 * time.Second

// jwksCache is the JWKS of each tenant ("" for the destinations of none),
// built from one read of the destinations, by one build at a time.
// Requests never wait for a build while a set built before is at hand,
// unless this server changed a destination since (forget): then they
// wait for the build that sees the change, or get the set before it if
// that build fails.
type jwksCache struct {
	mu    sync.Mutex
	built time.Time // when sets were built; zero: stale
	sets  map[string][]byte
	etags map[string]string
	// building is closed when the running build ends; nil when none runs.
	building chan struct{}
	// gen counts forget's calls; a build that began before the last one
	// does not make the sets fresh. waitFor is the gen requests wait for.
	gen, waitFor, builtGen uint64
	// failed is when the last build failed, and err why.
	failed time.Time
	err    error
}

// serveJWKS answers GET /v1/jwks.json and GET /v1/tenants/{tenant}/jwks.json:
// the public keys in force of the destinations that sign v1a (of none, or
// of the tenant), as a JSON Web Key Set, each key's kid its RFC 7638
// thumbprint; during a rotation's overlap both keys. No key is needed:
// public keys are public. A tenant that does not exist has an empty set,
// as one without such destinations: the answer tells no tenant's
// existence.
func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Dests == nil {
		problem(w, http.StatusServiceUnavailable, "", "this server does not serve destinations (no store configured)")
		return
	}
	body, etag, err := s.jwks.get(r.Context(), s)
	if err != nil {
		problem(w, http.StatusServiceUnavailable, "", "cannot read relay's destinations now: "+err.Error())
		return
	}
	b, tag := body[r.PathValue("tenant")], etag[r.PathValue("tenant")]
	if b == nil {
		b, tag = encodeJWKS(nil)
	}
	w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(int(jwksMaxAge/time.Second)))
	w.Header().Set("ETag", tag)
	if etagMatch(r.Header.Get("If-None-Match"), tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	_, _ = w.Write(b)
}

// etagMatch reports whether an If-None-Match value names tag, compared
// weakly (RFC 9110 13.1.2: a proxy that compresses the answer may weaken
// its ETag).
func etagMatch(header, tag string) bool {
	for v := range strings.SplitSeq(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == "*" || v == strings.TrimPrefix(tag, "W/") {
			return true
		}
	}
	return false
}

// get returns the key sets and their ETags by tenant: maps a build made,
// never changed after.
func (c *jwksCache) get(ctx context.Context, s *Server) (map[string][]byte, map[string]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The change this request must see, if any: later ones are later
	// requests' (a moving target would starve it while changes go on).
	want := c.waitFor
	for {
		if c.sets != nil && !c.built.IsZero() && time.Since(c.built) < jwksFresh && c.builtGen >= want {
			return c.sets, c.etags, nil
		}
		if c.building == nil && (c.failed.IsZero() || time.Since(c.failed) >= time.Second) {
			c.building = make(chan struct{})
			go c.build(s, c.gen, c.building)
		}
		if c.sets != nil && c.builtGen >= want {
			return c.sets, c.etags, nil // the last build's, while the next runs
		}
		ch := c.building
		if ch == nil {
			// A build failed a moment ago: its error, or the sets before it.
			if c.sets != nil {
				return c.sets, c.etags, nil
			}
			return nil, nil, c.err
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			c.mu.Lock()
			return nil, nil, ctx.Err()
		}
		c.mu.Lock()
		if c.builtGen < want && c.building == nil && !c.failed.IsZero() && time.Since(c.failed) < time.Second {
			// The build that was to see the change failed: the sets
			// before it, if any, rather than nothing.
			if c.sets != nil {
				return c.sets, c.etags, nil
			}
			return nil, nil, c.err
		}
	}
}

// build reads every destination and makes the key sets; a destination
// that cannot be read is left out, and logged.
func (c *jwksCache) build(s *Server, gen uint64, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), jwksBuildTimeout)
	defer cancel()
	sets, etags, err := buildJWKS(ctx, s)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(done)
	c.building = nil
	if err != nil {
		c.failed, c.err = time.Now(), err
		s.cfg.Logger.Warn("cannot build the JWKS; serving the last one built, if any", "err", err)
		return
	}
	c.sets, c.etags, c.failed, c.err = sets, etags, time.Time{}, nil
	c.builtGen = gen
	c.built = time.Now()
	if gen != c.gen {
		c.built = time.Time{} // a change came during the build: build again
	}
}

func buildJWKS(ctx context.Context, s *Server) (map[string][]byte, map[string]string, error) {
	names, err := s.cfg.Dests.Names(ctx)
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(names) // a stable order, and ETag
	now := time.Now()
	keys := map[string][]webhook.JWK{}
	for _, name := range names {
		d, err := s.cfg.Dests.Get(ctx, name)
		switch {
		case errors.Is(err, destination.ErrNotFound):
			continue
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		case err != nil:
			s.cfg.Logger.Warn("JWKS: a destination cannot be read; its keys are left out", "dest", name, "err", err)
			continue
		}
		for _, pk := range d.PublicKeys(now) {
			if jwk, err := webhook.JWKOf(pk.Key); err == nil {
				keys[d.Tenant()] = append(keys[d.Tenant()], jwk)
			}
		}
	}
	sets, etags := map[string][]byte{}, map[string]string{}
	for t, ks := range keys {
		sets[t], etags[t] = encodeJWKS(ks)
	}
	return sets, etags, nil
}

// forget makes the key sets stale: this server changed a destination, and
// the next request waits for a build that sees the change.
func (c *jwksCache) forget() {
	c.mu.Lock()
	c.gen++
	c.waitFor = c.gen
	c.built = time.Time{}
	c.failed = time.Time{}
	c.mu.Unlock()
}

func encodeJWKS(keys []webhook.JWK) ([]byte, string) {
	if keys == nil {
		keys = []webhook.JWK{}
	}
	b, _ := json.Marshal(webhook.JWKSet{Keys: keys})
	b = append(b, '\n')
	sum := sha256.Sum256(b)
	return b, `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
}
