package api

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/tenant"
	"golang.org/x/time/rate"
)

// portalBody is the body of POST /v1/tenants/{tenant}/portal-sessions.
type portalBody struct {
	Capabilities []string `json:"capabilities"`
	TTL          string   `json:"ttl"`
}

// portalSession is its answer: the link, the only time it is known.
type portalSession struct {
	ID           string              `json:"id"`
	URL          string              `json:"url"`
	ExpiresAt    time.Time           `json:"expires_at"`
	Capabilities []portal.Capability `json:"capabilities"`
}

func (s *Server) portal(c *call) (*portal.Store, bool) {
	if s.cfg.Portal == nil {
		c.problem(http.StatusServiceUnavailable, "", "this server does not serve the customer portal (no store configured)")
		return nil, false
	}
	return s.cfg.Portal, true
}

// createPortalSession mints a link to the customer portal for the tenant:
// its token travels in the URL's fragment, and is exchanged once for a
// session of the capabilities asked.
func (s *Server) createPortalSession(c *call) {
	ps, ok := s.portal(c)
	if !ok {
		return
	}
	var body portalBody
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	caps, err := portal.ParseCapabilities(body.Capabilities)
	if err != nil {
		c.problem(http.StatusUnprocessableEntity, "capabilities", err.Error())
		return
	}
	var ttl time.Duration
	if body.TTL != "" {
		if ttl, err = time.ParseDuration(body.TTL); err != nil || ttl < portal.MinTTL || ttl > portal.MaxTTL {
			c.problem(http.StatusUnprocessableEntity, "ttl", "ttl "+body.TTL+": give a duration from "+portal.MinTTL.String()+" to "+portal.MaxTTL.String()+" (default "+portal.DefaultTTL.String()+")")
			return
		}
	}
	ctx := c.within(30 * time.Second)
	if _, err := c.tenants.Get(ctx, c.tenant); err != nil {
		tenantProblem(c, err)
		return
	}
	token, sess, err := ps.Mint(ctx, c.tenant, caps, ttl, c.key.Name)
	if err != nil {
		c.problem(http.StatusServiceUnavailable, "", "the portal session was not made: "+err.Error())
		return
	}
	s.cfg.Logger.Info("portal session minted", "tenant", c.tenant, "session", sess.ID, "capabilities", sess.Capabilities, "expires", sess.Expires, "key", c.key.Name)
	c.json(http.StatusCreated, portalSession{ID: sess.ID, URL: s.portalURL(c.r) + "signin/" + c.tenant + "#token=" + token, ExpiresAt: sess.Expires, Capabilities: sess.Capabilities})
}

// endPortalSessions ends every portal session and link of the tenant.
func (s *Server) endPortalSessions(c *call) {
	ps, ok := s.portal(c)
	if !ok {
		return
	}
	ctx := c.within(30 * time.Second)
	if _, err := c.tenants.Get(ctx, c.tenant); err != nil && !errors.Is(err, tenant.ErrNotFound) {
		tenantProblem(c, err)
		return
	} else if err != nil {
		tenantProblem(c, err)
		return
	}
	if err := ps.EndAll(ctx, c.tenant); err != nil {
		c.problem(http.StatusServiceUnavailable, "", err.Error())
		return
	}
	s.cfg.Logger.Info("portal sessions ended", "tenant", c.tenant, "key", c.key.Name)
	c.w.WriteHeader(http.StatusNoContent)
}

// portalURL is where the portal is served: Config.PortalURL, else this
// server's own /portal/.
func (s *Server) portalURL(r *http.Request) string {
	if u := s.cfg.PortalURL; u != "" {
		return strings.TrimSuffix(u, "/") + "/"
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/portal/"
}

// portalKey is the key a customer portal's session token stands for: its
// tenant's, scope admin (its capabilities limit it, in auth), or
// ErrBadKey.
func (s *Server) portalKey(ctx context.Context, token string) (Key, error) {
	sess, err := s.cfg.Portal.Verify(ctx, token)
	if errors.Is(err, portal.ErrBadToken) {
		return Key{}, ErrBadKey
	}
	if err != nil {
		return Key{}, err
	}
	if tenant.ValidateID(sess.Tenant) != nil {
		// Never a key of no tenant: that would be the operator's view.
		return Key{}, ErrBadKey
	}
	return Key{ID: sess.ID, Name: "portal:" + sess.ID, Scope: ScopeAdmin, Tenant: sess.Tenant, Created: sess.Created,
		Session: sess.ID, Capabilities: sess.Capabilities}, nil
}

// audit runs h, a change a portal session asks for, and records what it
// asked and what came of it: a log line, and the operator event
// relay.portal.action (for the operator, and for the tenant's own
// destinations subscribed to relay.>).
func (s *Server) audit(pattern string, key Key, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		at := time.Now().UTC()
		s.cfg.Logger.Info("portal action", "tenant", key.Tenant, "session", key.Session, "action", pattern, "path", r.URL.Path, "status", status, "client", clientAddr(r))
		body := opevent.PortalActionBody{Tenant: key.Tenant, Session: key.Session, Action: pattern, Path: r.URL.Path, Status: status, At: at}
		select {
		case s.audits <- struct{}{}:
		default:
			s.cfg.Logger.Warn("portal action: its operator event was not published (too many at once)", "tenant", key.Tenant, "session", key.Session, "action", pattern)
			return
		}
		go func() {
			defer func() { <-s.audits }()
			// Publish bounds its wait (opevent's publish timeout).
			ev := opevent.Event{Type: opevent.PortalAction, ID: opevent.ID(opevent.PortalAction, key.Session, rand.Text()), Data: body}
			if err := opevent.Publish(context.Background(), s.cfg.JS, ev); err != nil {
				s.cfg.Logger.Warn("portal action: its operator event was not published", "tenant", key.Tenant, "session", key.Session, "err", err)
			}
		}()
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (body read
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// revealSecret answers GET /v1/destinations/{name}/secret: the
// destination's signing secret, and the previous one's end when it still
// signs too.
func (s *Server) revealSecret(c *call) {
	d, err := c.dests.Get(c.within(30*time.Second), c.name)
	if err != nil {
		destProblem(c.w, nil, err)
		return
	}
	switch {
	case !d.SignsHMAC():
		c.problem(http.StatusNotFound, "", "destination "+c.short+" signs with an Ed25519 key (signature "+d.Signature+"): it has no secret to reveal; receivers verify with its public keys (public_keys, or the JWKS)")
		return
	case d.Secret == "":
		c.problem(http.StatusNotFound, "", "destination "+c.short+" signs nothing: it has no secret")
		return
	}
	out := map[string]any{"secret": d.Secret}
	if d.PrevSecret != "" && time.Now().Before(d.PrevSecretUntil) {
		out["previous_secret_until"] = d.PrevSecretUntil
	}
	c.w.Header().Set("Cache-Control", "no-store")
	c.json(http.StatusOK, out)
}

// refuse is a handler that answers 403 with detail.
func refuse(detail string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { problem(w, http.StatusForbidden, "", detail) }
}

// portalTestEvent checks an event a portal session publishes: a test
// event, for one of its endpoints (dest) with a body (data) and nothing
// else, at most testEventBurst in a row and one a second after, per
// session. It answers the problem and returns false otherwise.
func (s *Server) portalTestEvent(c *call, ev newEvent) bool {
	switch {
	case ev.Dest == "":
		c.problem(http.StatusForbidden, "dest", "a customer portal session sends test events to one of its endpoints (dest) only")
		return false
	case ev.Type != "" || ev.Key != "" || len(ev.Headers) > 0:
		c.problem(http.StatusForbidden, "", "a customer portal session's test event has a dest and data only")
		return false
	}
	s.mu.Lock()
	l := s.testEvents[c.key.Session]
	if l == nil {
		if len(s.testEvents) > 10_000 {
			clear(s.testEvents)
		}
		l = rate.NewLimiter(1, testEventBurst)
		s.testEvents[c.key.Session] = l
	}
	ok := l.Allow()
	s.mu.Unlock()
	if !ok {
		c.w.Header().Set("Retry-After", "1")
		c.problem(http.StatusTooManyRequests, "", "too many test events: wait a second")
	}
	return ok
}

// testEventBurst is how many test events a portal session sends in a row.
const testEventBurst = 5
