package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

// cookieOf is the session cookie s.start sets for key.
func cookieOf(t *testing.T, s *sessions, key string) *http.Cookie {
	t.Helper()
	rec := httptest.NewRecorder()
	s.start(rec, httptest.NewRequest(http.MethodPost, "/ui/login", nil), key)
	cs := rec.Result().Cookies()
	require.Len(t, cs, 1)
	c := cs[0]
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/ui", c.Path)
	return c
}

func requestWith(c *http.Cookie) *http.Request {
	r := httptest.NewRequest("GET", "/ui/", nil)
	r.AddCookie(c)
	return r
}

// A session opened by one replica is good on another (the secret is
// shared through NATS); a tampered, foreign or expired cookie is not; the
// CSRF token is bound to the session.
func TestSessions(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	secret, err := loadSecret(ctx, srv.JS)
	require.NoError(t, err)
	again, err := loadSecret(ctx, srv.JS)
	require.NoError(t, err)
	require.Equal(t, secret, again, "every replica reads the same secret")

	now := time.Now()
	clock := func() time.Time { return now }
	a, err := newSessions(secret, time.Hour, true, clock)
	require.NoError(t, err)
	b, err := newSessions(again, time.Hour, true, clock)
	require.NoError(t, err)
	c := cookieOf(t, a, "relay_0123456789abcdef_secret")
	require.True(t, c.Secure, "Secure when served over TLS")

	ss, value, ok := b.open(requestWith(c))
	require.True(t, ok, "opened by the other replica")
	require.Equal(t, "relay_0123456789abcdef_secret", ss.Key)
	require.True(t, b.csrfOK(value, a.csrf(value)))
	require.False(t, b.csrfOK(value, ""))
	other := cookieOf(t, a, "relay_0123456789abcdef_other")
	require.False(t, b.csrfOK(value, a.csrf(other.Value)), "another session's token")

	tampered := *c
	tampered.Value = c.Value[:len(c.Value)-2] + "AA"
	_, _, ok = a.open(requestWith(&tampered))
	require.False(t, ok, "a tampered cookie")
	foreign, err := newSessions(make([]byte, 32), time.Hour, false, clock)
	require.NoError(t, err)
	_, _, ok = foreign.open(requestWith(c))
	require.False(t, ok, "sealed with another secret")

	now = now.Add(time.Hour + time.Second)
	_, _, ok = a.open(requestWith(c))
	require.False(t, ok, "expired")
}

// TestSessionCookieIsSecureBehindATLSProxy: without TLS of its own, the
// dashboard marks the cookie Secure when the request came over TLS to a
// proxy that says so, and only then.
func TestSessionCookieIsSecureBehindATLSProxy(t *testing.T) {
	t.Parallel()
	s, err := newSessions(make([]byte, 32), time.Hour, false, time.Now)
	require.NoError(t, err)
	cookie := func(proto string) *http.Cookie {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/ui/login", nil)
		if proto != "" {
			r.Header.Set("X-Forwarded-Proto", proto)
		}
		s.start(rec, r, "relay_0123456789abcdef_secret")
		return rec.Result().Cookies()[0]
	}
	require.True(t, cookie("https").Secure)
	require.False(t, cookie("http").Secure)
	require.False(t, cookie("").Secure, "plain HTTP, as make run serves it")
}
