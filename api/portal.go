package api

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/tenant"
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
	c.json(http.StatusCreated, portalSession{ID: sess.ID, URL: s.portalURL(c.r) + "#token=" + token, ExpiresAt: sess.Expires, Capabilities: sess.Capabilities})
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
