package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// jwksServer serves a key set as relay does: Cache-Control, an ETag, and
// 304 to a request that has it. It counts what it answered.
type jwksServer struct {
	*httptest.Server

	mu           sync.Mutex
	body         []byte
	cacheControl string
	status       int           // answer this status instead, when not 0
	block        chan struct{} // when not nil, answer once it is closed
	arrived      chan struct{} // when not nil, told of each request
	fetches      int           // requests answered with the set
	notModified  int           // requests answered 304
	failures     int           // requests answered status
	inFlight     int
	maxInFlight  int
}

func newJWKSServer(t *testing.T, cacheControl string, keys ...JWK) *jwksServer {
	t.Helper()
	s := &jwksServer{cacheControl: cacheControl}
	s.setKeys(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setKeys(t *testing.T, keys ...JWK) {
	t.Helper()
	b, err := json.Marshal(JWKSet{Keys: keys})
	require.NoError(t, err)
	s.setBody(b)
}

func (s *jwksServer) setBody(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = b
}

func (s *jwksServer) set(f func(s *jwksServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *jwksServer) counts() (fetches, notModified int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches, s.notModified
}

func (s *jwksServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	block, arrived := s.block, s.arrived
	s.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if block != nil {
		<-block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	if s.status != 0 {
		s.failures++
		w.WriteHeader(s.status)
		return
	}
	sum := sha256.Sum256(s.body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	w.Header().Set("ETag", etag)
	if s.cacheControl != "" {
		w.Header().Set("Cache-Control", s.cacheControl)
	}
	if r.Header.Get("If-None-Match") == etag {
		s.notModified++
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.fetches++
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.body)
}

// jwksKey is a signing key and its JWK.
type jwksKey struct {
	signing string
	jwk     JWK
}

func newJWKSKey(t *testing.T) jwksKey {
	t.Helper()
	sk := GenerateSigningKey()
	pk, err := PublicKey(sk)
	require.NoError(t, err)
	k, err := JWKOf(pk)
	require.NoError(t, err)
	return jwksKey{signing: sk, jwk: k}
}

var jwksBody = []byte(`{"order":42}`)

// signedBy returns the headers of a request signed at now by keys.
func signedBy(t *testing.T, now time.Time, keys ...jwksKey) http.Header {
	t.Helper()
	var sigs []string
	for _, k := range keys {
		sig, err := SignEd25519(k.signing, "evt_1", now.Unix(), jwksBody)
		require.NoError(t, err)
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set(HeaderID, "evt_1")
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	return h
}

var jwksNow = time.Unix(1_900_000_000, 0)

func TestJWKSCachesForMaxAgeAndRevalidates(t *testing.T) {
	t.Parallel()
	a, b := newJWKSKey(t), newJWKSKey(t)
	srv := newJWKSServer(t, "public, max-age=300", a.jwk, b.jwk)
	j := &JWKS{URL: srv.URL, Client: srv.Client()}
	ctx := context.Background()

	for i := range 5 {
		now := jwksNow.Add(time.Duration(i) * time.Minute) // up to 4 minutes in
		require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, a), jwksBody, now, 0))
		require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, b), jwksBody, now, 0))
	}
	fetches, notModified := srv.counts()
	require.Equal(t, [2]int{1, 0}, [2]int{fetches, notModified}, "one fetch while the set is fresh")

	// Stale after max-age: revalidated with the ETag, the 304 keeps it.
	now := jwksNow.Add(300 * time.Second)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, a), jwksBody, now, 0))
	fetches, notModified = srv.counts()
	require.Equal(t, [2]int{1, 1}, [2]int{fetches, notModified})
	now = now.Add(299 * time.Second)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, b), jwksBody, now, 0))
	fetches, notModified = srv.counts()
	require.Equal(t, [2]int{1, 1}, [2]int{fetches, notModified}, "the 304 made the set fresh for max-age")

	// A changed set comes whole; a key it dropped no longer verifies.
	srv.setKeys(t, b.jwk)
	now = now.Add(time.Second)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, b), jwksBody, now, 0))
	fetches, notModified = srv.counts()
	require.Equal(t, [2]int{2, 1}, [2]int{fetches, notModified})
	err := j.VerifyRequest(ctx, signedBy(t, now, a), jwksBody, now, 0)
	require.ErrorIs(t, err, ErrNoMatchingSignature)
	require.ErrorContains(t, err, "no v1a signature verifies under the keys of "+srv.URL+" (1 in use)")
}

func TestJWKSMaxAgeIsClamped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cacheControl string
		fresh        time.Duration // still fresh this long after the fetch
	}{
		{"", defaultJWKSMaxAge},
		{"no-cache", defaultJWKSMaxAge},
		{"public, max-age=120", 2 * time.Minute},
		{"max-age=5", minJWKSMaxAge},
		{"max-age=0", minJWKSMaxAge},
		{"public, max-age=99999999", maxJWKSMaxAge},
		{"max-age=soon", defaultJWKSMaxAge},
	} {
		t.Run(tc.cacheControl, func(t *testing.T) {
			t.Parallel()
			a := newJWKSKey(t)
			srv := newJWKSServer(t, tc.cacheControl, a.jwk)
			j := &JWKS{URL: srv.URL, Client: srv.Client()}
			verify := func(now time.Time) (fetches, notModified int) {
				require.NoError(t, j.VerifyRequest(context.Background(), signedBy(t, now, a), jwksBody, now, 0))
				return srv.counts()
			}
			fetches, notModified := verify(jwksNow)
			require.Equal(t, [2]int{1, 0}, [2]int{fetches, notModified})
			fetches, notModified = verify(jwksNow.Add(tc.fresh - time.Second))
			require.Equal(t, [2]int{1, 0}, [2]int{fetches, notModified}, "fresh")
			fetches, notModified = verify(jwksNow.Add(tc.fresh))
			require.Equal(t, [2]int{1, 1}, [2]int{fetches, notModified}, "stale: revalidated")
		})
	}
}

// A rotation adds a key to the set before relay signs with it: a request
// that no cached key verifies makes the verifier fetch the set again.
func TestJWKSPicksUpARotatedKey(t *testing.T) {
	t.Parallel()
	old, next := newJWKSKey(t), newJWKSKey(t)
	srv := newJWKSServer(t, "max-age=3600", old.jwk)
	j := &JWKS{URL: srv.URL, Client: srv.Client()}
	ctx := context.Background()
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, jwksNow, old), jwksBody, jwksNow, 0))

	srv.setKeys(t, old.jwk, next.jwk)
	now := jwksNow.Add(time.Minute)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, old, next), jwksBody, now, 0), "the old key still verifies, no fetch")
	fetches, _ := srv.counts()
	require.Equal(t, 1, fetches)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, next), jwksBody, now, 0), "the new key alone: fetched")
	fetches, _ = srv.counts()
	require.Equal(t, 2, fetches)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, next), jwksBody, now, 0))
	fetches, _ = srv.counts()
	require.Equal(t, 2, fetches, "and kept")
}

// Requests that no key verifies (forgeries, or another sender's) refetch
// the set at most once per MinRefresh.
func TestJWKSMinRefreshBoundsRefetches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		minRefresh time.Duration
		want       time.Duration
	}{
		{"default", 0, defaultJWKSMinRefresh},
		{"10s", 10 * time.Second, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, stranger := newJWKSKey(t), newJWKSKey(t)
			srv := newJWKSServer(t, "max-age=3600", a.jwk)
			j := &JWKS{URL: srv.URL, Client: srv.Client(), MinRefresh: tc.minRefresh}
			miss := func(now time.Time) int {
				err := j.VerifyRequest(context.Background(), signedBy(t, now, stranger), jwksBody, now, 0)
				require.ErrorIs(t, err, ErrNoMatchingSignature)
				fetches, notModified := srv.counts()
				return fetches + notModified // the set is unchanged: refreshes are 304s
			}
			require.Equal(t, 1, miss(jwksNow), "the first fetch is the refresh")
			require.Equal(t, 1, miss(jwksNow.Add(time.Second)))
			require.Equal(t, 1, miss(jwksNow.Add(tc.want-time.Second)))
			require.Equal(t, 2, miss(jwksNow.Add(tc.want)))
			for i := range 10 {
				require.Equal(t, 2, miss(jwksNow.Add(tc.want+time.Duration(i)*time.Second)))
			}
			require.Equal(t, 3, miss(jwksNow.Add(2*tc.want)))
		})
	}
}

func TestJWKSKeyIDs(t *testing.T) {
	t.Parallel()
	a, b := newJWKSKey(t), newJWKSKey(t)
	// b's key under a's kid: the set's kid is not trusted, the key's own
	// thumbprint is.
	forged := b.jwk
	forged.Kid = a.jwk.Kid
	srv := newJWKSServer(t, "", a.jwk, b.jwk, forged)
	j := &JWKS{URL: srv.URL, Client: srv.Client(), KeyIDs: []string{a.jwk.Kid, "not-a-kid"}}
	ctx := context.Background()
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, jwksNow, a), jwksBody, jwksNow, 0))
	err := j.VerifyRequest(ctx, signedBy(t, jwksNow, b), jwksBody, jwksNow, 0)
	require.ErrorIs(t, err, ErrNoMatchingSignature)
	require.ErrorContains(t, err, "(1 in use)")
	require.NoError(t, (&JWKS{URL: srv.URL, Client: srv.Client()}).VerifyRequest(ctx, signedBy(t, jwksNow, b), jwksBody, jwksNow, 0),
		"without KeyIDs every key verifies")
}

// Only Ed25519 keys for signatures are used; a set may hold others.
func TestJWKSIgnoresOtherKeys(t *testing.T) {
	t.Parallel()
	good, enc, es256, x25519 := newJWKSKey(t), newJWKSKey(t), newJWKSKey(t), newJWKSKey(t)
	set := fmt.Sprintf(`{"keys": [
		{"kty": "RSA", "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw", "e": "AQAB", "use": "sig"},
		{"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
		{"kty": "OKP", "crv": "X25519", "x": %q},
		{"kty": "OKP", "crv": "Ed25519", "x": %q, "use": "enc"},
		{"kty": "OKP", "crv": "Ed25519", "x": %q, "alg": "ES256"},
		{"kty": "OKP", "crv": "Ed25519", "x": "c2hvcnQ"},
		{"kty": "OKP", "crv": "Ed25519", "x": 42},
		"not a key",
		{"kty": "OKP", "crv": "Ed25519", "x": %q}
	]}`, x25519.jwk.X, enc.jwk.X, es256.jwk.X, good.jwk.X)
	srv := newJWKSServer(t, "")
	srv.setBody([]byte(set))
	j := &JWKS{URL: srv.URL, Client: srv.Client()}
	ctx := context.Background()
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, jwksNow, good), jwksBody, jwksNow, 0), "an Ed25519 key with no use and no alg")
	for name, k := range map[string]jwksKey{"X25519": x25519, "use enc": enc, "alg ES256": es256} {
		err := j.VerifyRequest(ctx, signedBy(t, jwksNow, k), jwksBody, jwksNow, 0)
		require.ErrorIs(t, err, ErrNoMatchingSignature, name)
		require.ErrorContains(t, err, "(1 in use)", name)
	}
}

func TestJWKSFetchFailureWithoutACopy(t *testing.T) {
	t.Parallel()
	a := newJWKSKey(t)
	srv := newJWKSServer(t, "", a.jwk)
	ctx := context.Background()
	h := signedBy(t, jwksNow, a)

	srv.set(func(s *jwksServer) { s.status = http.StatusServiceUnavailable })
	j := &JWKS{URL: srv.URL, Client: srv.Client()}
	err := j.VerifyRequest(ctx, h, jwksBody, jwksNow, 0)
	require.ErrorIs(t, err, ErrJWKS)
	require.NotErrorIs(t, err, ErrNoMatchingSignature)
	require.ErrorContains(t, err, "503 Service Unavailable")

	// Without a copy every request tries: the server is back.
	srv.set(func(s *jwksServer) { s.status = 0 })
	require.NoError(t, j.VerifyRequest(ctx, h, jwksBody, jwksNow, 0))

	for name, body := range map[string][]byte{
		"not JSON":     []byte("<html>"),
		"no keys":      []byte(`{"kty": "OKP"}`),
		"over a MiB":   []byte(`{"keys": [], "pad": "` + strings.Repeat("x", maxJWKSBody) + `"}`),
		"keys not set": []byte(`{"keys": {}}`),
	} {
		srv := newJWKSServer(t, "")
		srv.setBody(body)
		err := (&JWKS{URL: srv.URL, Client: srv.Client()}).VerifyRequest(ctx, h, jwksBody, jwksNow, 0)
		require.ErrorIs(t, err, ErrJWKS, name)
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	err = (&JWKS{URL: closed.URL}).VerifyRequest(ctx, h, jwksBody, jwksNow, 0)
	require.ErrorIs(t, err, ErrJWKS)
	require.ErrorContains(t, err, "connection refused")
	require.ErrorIs(t, (&JWKS{}).VerifyRequest(ctx, h, jwksBody, jwksNow, 0), ErrJWKS, "no URL")
}

// A set that cannot be fetched again is used as it was, and fetched again
// after MinRefresh.
func TestJWKSFetchFailureKeepsTheCopy(t *testing.T) {
	t.Parallel()
	a, next := newJWKSKey(t), newJWKSKey(t)
	srv := newJWKSServer(t, "max-age=60", a.jwk)
	failures := func() int {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.failures
	}
	j := &JWKS{URL: srv.URL, Client: srv.Client(), MinRefresh: 10 * time.Second}
	ctx := context.Background()
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, jwksNow, a), jwksBody, jwksNow, 0))

	srv.set(func(s *jwksServer) { s.status = http.StatusInternalServerError })
	stale := jwksNow.Add(time.Minute)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, stale, a), jwksBody, stale, 0), "the stale copy verifies")
	require.Equal(t, 1, failures())
	now := stale.Add(9 * time.Second)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, a), jwksBody, now, 0))
	err := j.VerifyRequest(ctx, signedBy(t, now, next), jwksBody, now, 0)
	require.ErrorIs(t, err, ErrNoMatchingSignature)
	require.Equal(t, 1, failures(), "no fetch within MinRefresh of the failed one")

	now = stale.Add(10 * time.Second)
	err = j.VerifyRequest(ctx, signedBy(t, now, next), jwksBody, now, 0)
	require.ErrorIs(t, err, ErrNoMatchingSignature, "the verify error, not the fetch's")
	require.NotErrorIs(t, err, ErrJWKS)
	require.ErrorContains(t, err, "fetching the set again failed")
	require.ErrorContains(t, err, "500 Internal Server Error")
	require.Equal(t, 2, failures())

	// Back, with the rotation's key.
	srv.set(func(s *jwksServer) { s.status = 0 })
	srv.setKeys(t, a.jwk, next.jwk)
	now = now.Add(10 * time.Second)
	require.NoError(t, j.VerifyRequest(ctx, signedBy(t, now, next), jwksBody, now, 0))
}

// Callers that need the set while it is being fetched wait for that fetch.
func TestJWKSFetchesOnceAtATime(t *testing.T) {
	t.Parallel()
	a := newJWKSKey(t)
	srv := newJWKSServer(t, "", a.jwk)
	block, arrived := make(chan struct{}), make(chan struct{}, 100)
	srv.set(func(s *jwksServer) { s.block, s.arrived = block, arrived })
	j := &JWKS{URL: srv.URL, Client: srv.Client()}
	h := signedBy(t, jwksNow, a)

	errs := make(chan error, 16)
	go func() { errs <- j.VerifyRequest(context.Background(), h, jwksBody, jwksNow, 0) }()
	<-arrived // the fetch is under way, and held

	// One whose context ends while it waits gives up.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := j.VerifyRequest(ctx, h, jwksBody, jwksNow, 0)
	require.ErrorIs(t, err, ErrJWKS)
	require.ErrorIs(t, err, context.Canceled)

	for range cap(errs) - 1 {
		go func() { errs <- j.VerifyRequest(context.Background(), h, jwksBody, jwksNow, 0) }()
	}
	close(block)
	for range cap(errs) {
		require.NoError(t, <-errs)
	}
	fetches, _ := srv.counts()
	require.Equal(t, 1, fetches)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Equal(t, 1, srv.maxInFlight)
}

// A header without a v1a signature is refused without a fetch.
func TestJWKSNeedsAV1aSignature(t *testing.T) {
	t.Parallel()
	srv := newJWKSServer(t, "")
	j := &JWKS{URL: srv.URL, Client: srv.Client()}
	sig, err := Sign(signTestSecret, "evt_1", jwksNow.Unix(), jwksBody)
	require.NoError(t, err)
	h := http.Header{}
	h.Set(HeaderID, "evt_1")
	h.Set(HeaderTimestamp, strconv.FormatInt(jwksNow.Unix(), 10))
	h.Set(HeaderSignature, sig)
	err = j.VerifyRequest(context.Background(), h, jwksBody, jwksNow, 0)
	require.ErrorIs(t, err, ErrNoMatchingSignature)
	require.ErrorContains(t, err, "the header has no v1a signature")
	require.ErrorIs(t, j.VerifyRequest(context.Background(), h, jwksBody, jwksNow.Add(time.Hour), 0), ErrTimestamp)
	fetches, _ := srv.counts()
	require.Zero(t, fetches)
}

// The request that starts a fetch may go away: the fetch goes on for the
// others waiting, and its answer is kept.
func TestJWKSFetchOutlivesTheRequestThatStartedIt(t *testing.T) {
	t.Parallel()
	a := newJWKSKey(t)
	srv := newJWKSServer(t, "", a.jwk)
	block, arrived := make(chan struct{}), make(chan struct{}, 100)
	srv.set(func(s *jwksServer) { s.block, s.arrived = block, arrived })
	j := &JWKS{URL: srv.URL, Client: srv.Client()}
	h := signedBy(t, jwksNow, a)

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- j.VerifyRequest(ctx, h, jwksBody, jwksNow, 0) }()
	<-arrived // its fetch is under way, and held
	other := make(chan error, 1)
	go func() { other <- j.VerifyRequest(context.Background(), h, jwksBody, jwksNow, 0) }()
	cancel()
	err := <-first
	require.ErrorIs(t, err, context.Canceled, "the one that went away gives up")
	close(block)
	require.NoError(t, <-other, "the fetch it started went on for the other")
	require.NoError(t, j.VerifyRequest(context.Background(), h, jwksBody, jwksNow, 0))
	fetches, _ := srv.counts()
	require.Equal(t, 1, fetches, "and its answer is kept")
}
