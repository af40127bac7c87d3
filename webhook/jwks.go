package webhook

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrJWKS: the key set could not be fetched, or was not a JSON Web Key
// Set, and no earlier copy of it was in hand.
var ErrJWKS = errors.New("webhook: key set")

// The bounds of JWKS's cache and fetches.
const (
	// defaultJWKSMaxAge is how long a key set is kept when its response
	// has no Cache-Control max-age; a max-age is held to
	// [minJWKSMaxAge, maxJWKSMaxAge].
	defaultJWKSMaxAge     = 5 * time.Minute
	minJWKSMaxAge         = time.Minute
	maxJWKSMaxAge         = 24 * time.Hour
	defaultJWKSMinRefresh = 30 * time.Second
	// maxJWKSBody caps the bytes read of a key set response.
	maxJWKSBody = 1 << 20
)

// defaultJWKSClient fetches key sets when JWKS.Client is nil: unlike
// http.DefaultClient, it gives up on a server that does not answer.
var defaultJWKSClient = &http.Client{Timeout: 10 * time.Second}

// JWKS verifies v1a (Ed25519) signatures with the public keys of a JSON
// Web Key Set that it fetches from URL, as relay serves them
// (/v1/jwks.json, or /v1/tenants/{tenant}/jwks.json for a tenant's
// destinations). It fetches the set on first use and keeps it for the
// response's Cache-Control max-age (5 minutes without one, held to 1
// minute to 24 hours), then revalidates it with its ETag.
// When no key of the set verifies a request it fetches the set again, at
// most once per MinRefresh, since a key rotation adds a key to the set.
//
// A JWKS is safe for concurrent use and makes one fetch at a time; share
// one per URL, and do not copy it after first use.
type JWKS struct {
	// URL of the key set. Required.
	URL string
	// Client fetches the set. Optional: default a client with a 10 s
	// timeout. A fetch runs under the context of the call that makes it.
	Client *http.Client
	// KeyIDs, when set, are the only keys used: each is an RFC 7638
	// thumbprint, which is the kid relay gives the key (JWKOf). They are
	// matched against the thumbprint of the key itself, not the kid the
	// set claims for it. Optional: default every key of the set.
	KeyIDs []string
	// MinRefresh is the least time between a fetch and one made because
	// no key verified a request, or between a failed fetch and the next
	// while a copy of the set is in hand (without one, every request
	// tries). Optional: default 30 s.
	MinRefresh time.Duration

	mu        sync.Mutex
	have      bool // a set was fetched: keys, etag and expires hold
	keys      []ed25519.PublicKey
	etag      string
	expires   time.Time
	fetchedAt time.Time  // when the last fetch ended, success or not
	inFlight  *jwksFetch // the fetch under way, nil when none is
}

// A jwksFetch is one fetch of the set: callers that need the set while it
// runs wait for done and take its outcome rather than fetching again.
type jwksFetch struct {
	done chan struct{}
	err  error // set before done is closed
}

// VerifyRequest checks a request a receiver got, as the package's
// VerifyRequest does with a public key, with the keys of the set: its
// webhook-* headers h, its raw body, the timestamp within tolerance of
// now (DefaultTolerance if tolerance is 0), and a v1a signature under one
// of the keys. now is also the clock of the cache.
//
// Its errors match ErrMissingHeader, ErrTimestamp, ErrNoMatchingSignature
// (also when a fetch failed but an earlier copy of the set was in hand:
// that copy is used), or ErrJWKS (no copy of the set could be had), with
// errors.Is.
func (j *JWKS) VerifyRequest(ctx context.Context, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs, err := requestHeaders(h, now, tolerance)
	if err != nil {
		return err
	}
	if !hasScheme(sigs, "v1a,") {
		return errNoV1aInHeader // no key can help: do not fetch
	}
	keys, fetched, fetchErr := j.keySet(ctx, now, false)
	if keys == nil && fetchErr != nil {
		return fetchErr
	}
	if verifyV1a(keys, id, ts, body, sigs, ErrNoMatchingSignature) == nil {
		return nil
	}
	if !fetched {
		// A rotation may have added a key since the set was fetched.
		keys, fetched, fetchErr = j.keySet(ctx, now, true)
		if keys == nil && fetchErr != nil {
			return fetchErr
		}
		if fetched && verifyV1a(keys, id, ts, body, sigs, ErrNoMatchingSignature) == nil {
			return nil
		}
	}
	if fetchErr != nil {
		return fmt.Errorf("%w: no v1a signature verifies under the keys of %s (%d in use, of a copy: fetching the set again failed: %v)", ErrNoMatchingSignature, j.URL, len(keys), fetchErr)
	}
	return fmt.Errorf("%w: no v1a signature verifies under the keys of %s (%d in use)", ErrNoMatchingSignature, j.URL, len(keys))
}

// keySet returns the keys to verify with: the cached ones while they are
// fresh, else those of a fetch, its own or the one under way. With
// refresh, it fetches fresh keys too, unless the last fetch ended less
// than MinRefresh ago. fetched reports that the keys come from a fetch
// that ended during the call; err, that it failed, and then keys are the
// copy in hand, or nil when there is none.
func (j *JWKS) keySet(ctx context.Context, now time.Time, refresh bool) (keys []ed25519.PublicKey, fetched bool, err error) {
	minRefresh := j.MinRefresh
	if minRefresh <= 0 {
		minRefresh = defaultJWKSMinRefresh
	}
	j.mu.Lock()
	stale := !j.have || !now.Before(j.expires)
	if !stale && !(refresh && now.Sub(j.fetchedAt) >= minRefresh) {
		defer j.mu.Unlock()
		return j.keys, false, nil
	}
	if f := j.inFlight; f != nil {
		j.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("%w: waiting for %s: %w", ErrJWKS, j.URL, ctx.Err())
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.keys, true, f.err
	}
	f := &jwksFetch{done: make(chan struct{})}
	j.inFlight = f
	etag := j.etag
	j.mu.Unlock()

	// The fetch is everyone's: it runs on, bounded by its own timeout,
	// when the request that started it goes away.
	go func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksFetchTimeout)
		defer cancel()
		got, err := j.fetch(fctx, etag)
		j.mu.Lock()
		defer j.mu.Unlock()
		j.inFlight = nil
		j.fetchedAt = now
		switch {
		case err != nil:
			f.err = fmt.Errorf("%w: %w", ErrJWKS, err)
			if j.have && !now.Before(j.expires) {
				// Keep the stale copy, and try again after MinRefresh.
				j.expires = now.Add(minRefresh)
			}
		case got.notModified:
			j.expires = now.Add(got.maxAge)
			if got.etag != "" {
				j.etag = got.etag
			}
		default:
			j.have, j.keys, j.etag, j.expires = true, got.keys, got.etag, now.Add(got.maxAge)
		}
		close(f.done)
	}()
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, false, fmt.Errorf("%w: waiting for %s: %w", ErrJWKS, j.URL, ctx.Err())
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.keys, true, f.err
}

// jwksFetchTimeout bounds a fetch of the key set, whatever the client's
// own timeout.
const jwksFetchTimeout = 30 * time.Second

// jwksResponse is what a fetch learnt.
type jwksResponse struct {
	keys        []ed25519.PublicKey
	etag        string
	maxAge      time.Duration
	notModified bool // 304: the set is the one of etag
}

// fetch gets the set, conditionally on etag when there is one.
func (j *JWKS) fetch(ctx context.Context, etag string) (jwksResponse, error) {
	if j.URL == "" {
		return jwksResponse{}, errors.New("no URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.URL, nil)
	if err != nil {
		return jwksResponse{}, err
	}
	req.Header.Set("Accept", "application/json")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	client := j.Client
	if client == nil {
		client = defaultJWKSClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return jwksResponse{}, err
	}
	defer resp.Body.Close()
	got := jwksResponse{etag: resp.Header.Get("ETag"), maxAge: cacheMaxAge(resp.Header)}
	switch {
	case resp.StatusCode == http.StatusNotModified && etag != "":
		got.notModified = true
		return got, nil
	case resp.StatusCode != http.StatusOK:
		return jwksResponse{}, fmt.Errorf("GET %s: %s", j.URL, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBody+1))
	if err != nil {
		return jwksResponse{}, fmt.Errorf("GET %s: reading the body: %w", j.URL, err)
	}
	if len(b) > maxJWKSBody {
		return jwksResponse{}, fmt.Errorf("GET %s: the body is larger than %d bytes", j.URL, maxJWKSBody)
	}
	got.keys, err = j.parse(b)
	if err != nil {
		return jwksResponse{}, fmt.Errorf("GET %s: %w", j.URL, err)
	}
	return got, nil
}

// parse returns the keys of a set that JWKS uses: Ed25519 keys for
// signatures (use "sig" or none), of KeyIDs if set. It ignores the others,
// so that a set may also hold keys of kinds it does not know.
func (j *JWKS) parse(b []byte) ([]ed25519.PublicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if set.Keys == nil {
		return nil, errors.New(`not a JSON Web Key Set: no "keys"`)
	}
	keys := []ed25519.PublicKey{} // not nil: keySet's nil means no set
	for _, raw := range set.Keys {
		var k JWK
		if json.Unmarshal(raw, &k) != nil || (k.Use != "" && k.Use != "sig") {
			continue
		}
		if k.Alg != "" && k.Alg != "EdDSA" && k.Alg != "Ed25519" {
			continue
		}
		pk, err := PublicKeyOfJWK(k)
		if err != nil {
			continue
		}
		if len(j.KeyIDs) > 0 {
			own, err := JWKOf(pk)
			if err != nil || !slices.Contains(j.KeyIDs, own.Kid) {
				continue
			}
		}
		pub, err := decodePublicKey(pk)
		if err != nil {
			continue
		}
		keys = append(keys, pub)
	}
	return keys, nil
}

// cacheMaxAge is how long to keep a response with headers h: its
// Cache-Control max-age held to [minJWKSMaxAge, maxJWKSMaxAge], else
// defaultJWKSMaxAge.
func cacheMaxAge(h http.Header) time.Duration {
	for _, line := range h.Values("Cache-Control") {
		for _, dir := range strings.Split(line, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(dir), "=")
			if !strings.EqualFold(name, "max-age") {
				continue
			}
			sec, err := strconv.ParseInt(strings.Trim(value, `"`), 10, 64)
			if err != nil || sec < 0 {
				return defaultJWKSMaxAge
			}
			if sec > int64(maxJWKSMaxAge/time.Second) {
				return maxJWKSMaxAge
			}
			return max(time.Duration(sec)*time.Second, minJWKSMaxAge)
		}
	}
	return defaultJWKSMaxAge
}
