package ui

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// sessionSecretKey is the key, in the relay_state bucket, of the secret
// that seals the dashboard's session cookies: one for every replica, so
// that a session opened on one is good on the others.
const sessionSecretKey = "ui-session-secret"

// loadSecret returns the session secret, creating it if none exists.
func loadSecret(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
	return stream.LoadSecret(ctx, js, sessionSecretKey, "the dashboard's session secret")
}

// session is what a session cookie holds, sealed: the API key the user
// signed in with, and when the session ends.
type session struct {
	Key     string    `json:"k"`
	Expires time.Time `json:"e"`
}

// sessions seals and opens session cookies with AES-GCM, and derives each
// session's CSRF token.
type sessions struct {
	aead   cipher.AEAD
	mac    []byte
	ttl    time.Duration
	secure bool
	now    func() time.Time
}

func newSessions(secret []byte, ttl time.Duration, secure bool, now func() time.Time) (*sessions, error) {
	enc := sha256.Sum256(append([]byte("relay ui session: "), secret...))
	block, err := aes.NewCipher(enc[:])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := sha256.Sum256(append([]byte("relay ui csrf: "), secret...))
	return &sessions{aead: aead, mac: mac[:], ttl: ttl, secure: secure, now: now}, nil
}

const cookieName = "relay_session"

// open returns the session of r's cookie, if it has a valid one that has
// not ended, and the cookie's value.
func (s *sessions) open(r *http.Request) (session, string, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	n := s.aead.NonceSize()
	if err != nil || len(b) < n {
		return session{}, "", false
	}
	plain, err := s.aead.Open(nil, b[:n], b[n:], []byte(cookieName))
	if err != nil {
		return session{}, "", false
	}
	var ss session
	if json.Unmarshal(plain, &ss) != nil || ss.Key == "" || !s.now().Before(ss.Expires) {
		return session{}, "", false
	}
	return ss, c.Value, true
}

// secureFor reports whether r's cookie is Secure: always when the
// dashboard is served over TLS (Config.Secure), and when the request came
// over TLS, to relay or to a proxy in front of it that says so
// (X-Forwarded-Proto: https; a client that lies only makes its own cookie
// stricter).
func (s *sessions) secureFor(r *http.Request) bool {
	return s.secure || r.TLS != nil || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

// start sets a session cookie for key on w, the answer to r.
func (s *sessions) start(w http.ResponseWriter, r *http.Request, key string) {
	ss := session{Key: key, Expires: s.now().Add(s.ttl)}
	plain, _ := json.Marshal(ss)
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := s.aead.Seal(nonce, nonce, plain, []byte(cookieName))
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: base64.RawURLEncoding.EncodeToString(sealed), Path: "/ui",
		Expires: ss.Expires, HttpOnly: true, Secure: s.secureFor(r), SameSite: http.SameSiteStrictMode,
	})
}

// end removes the session cookie.
func (s *sessions) end(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true, Secure: s.secureFor(r), SameSite: http.SameSiteStrictMode})
}

// csrf is the CSRF token of the session whose cookie value is cookie: a
// MAC of it, which a page from another site cannot know.
func (s *sessions) csrf(cookie string) string {
	m := hmac.New(sha256.New, s.mac)
	m.Write([]byte(cookie))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfOK reports whether token is the CSRF token of cookie.
func (s *sessions) csrfOK(cookie, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(s.csrf(cookie)), []byte(token)) == 1
}

// loginCookieName is the sign-in form's pre-session cookie: random bytes
// that the form's CSRF token is bound to, as a session's token is bound to
// its cookie. It goes only to /ui/login.
const loginCookieName = "relay_login"

// loginPrefix keeps a pre-session's token apart from a session's: no
// session cookie starts with it (base64url has no ':').
const loginPrefix = "login:"

// loginValue reports whether r has a well-formed pre-session cookie, and
// its value.
func loginValue(r *http.Request) (string, bool) {
	c, err := r.Cookie(loginCookieName)
	if err != nil {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) != 32 {
		return "", false
	}
	return c.Value, true
}

// loginToken is the sign-in form's CSRF token for r: of its pre-session,
// which it starts (a cookie on w) when r has none.
func (s *sessions) loginToken(w http.ResponseWriter, r *http.Request) string {
	v, ok := loginValue(r)
	if !ok {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		v = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: loginCookieName, Value: v, Path: "/ui/login",
			HttpOnly: true, Secure: s.secureFor(r), SameSite: http.SameSiteStrictMode})
	}
	return s.csrf(loginPrefix + v)
}

// loginOK reports whether token is the CSRF token of r's pre-session: the
// sign-in form was loaded by this browser from the dashboard.
func (s *sessions) loginOK(r *http.Request, token string) bool {
	v, ok := loginValue(r)
	return ok && s.csrfOK(loginPrefix+v, token)
}

// endLogin removes the pre-session cookie, once signed in.
func (s *sessions) endLogin(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: loginCookieName, Value: "", Path: "/ui/login", MaxAge: -1,
		HttpOnly: true, Secure: s.secureFor(r), SameSite: http.SameSiteStrictMode})
}
