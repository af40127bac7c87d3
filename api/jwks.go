package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
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

// jwksCache is the JWKS of each tenant ("" for the destinations of none),
// built from one read of the destinations.
type jwksCache struct {
	mu    sync.Mutex
	built time.Time
	sets  map[string][]byte
	etags map[string]string
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
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	body, etag, err := s.jwks.get(ctx, s, r.PathValue("tenant"))
	if err != nil {
		problem(w, http.StatusServiceUnavailable, "", "cannot read relay's destinations now: "+err.Error())
		return
	}
	w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(int(jwksMaxAge/time.Second)))
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	_, _ = w.Write(body)
}

func (c *jwksCache) get(ctx context.Context, s *Server, tenant string) ([]byte, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.sets == nil || now.Sub(c.built) >= jwksFresh {
		ds, err := s.cfg.Dests.List(ctx)
		if err != nil {
			return nil, "", err
		}
		slices.SortFunc(ds, func(a, b destination.Destination) int { return strings.Compare(a.Name, b.Name) }) // a stable ETag
		keys := map[string][]webhook.JWK{}
		for _, d := range ds {
			for _, pk := range d.PublicKeys(now) {
				jwk, err := webhook.JWKOf(pk.Key)
				if err == nil {
					keys[d.Tenant()] = append(keys[d.Tenant()], jwk)
				}
			}
		}
		c.sets, c.etags, c.built = map[string][]byte{}, map[string]string{}, now
		for t, ks := range keys {
			c.sets[t], c.etags[t] = encodeJWKS(ks)
		}
	}
	if b, ok := c.sets[tenant]; ok {
		return b, c.etags[tenant], nil
	}
	b, etag := encodeJWKS(nil)
	return b, etag, nil
}

// forget drops the key sets built: the next request builds them again.
func (c *jwksCache) forget() {
	c.mu.Lock()
	c.sets = nil
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
