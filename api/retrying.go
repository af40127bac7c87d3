package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/relaydev/relay/history"
)

// whoami answers GET /v1/key: the name and scope of the key the request
// was made with (never the key or its hash).
func (s *Server) whoami(c *call) {
	k := c.key
	out := map[string]any{"name": k.Name, "scope": k.Scope, "id": k.ID, "created": k.Created}
	if k.Tenant != "" {
		out["tenant"] = k.Tenant
	}
	if k.Session != "" {
		out["session"], out["capabilities"] = k.Session, k.Capabilities
	}
	c.json(http.StatusOK, out)
}

// egress answers GET /v1/egress: the addresses deliveries come from, as
// the operator declared them (--egress-ips), for receivers to allowlist.
func (s *Server) egress(c *call) {
	addrs := s.cfg.EgressIPs
	if addrs == nil {
		addrs = []string{}
	}
	c.json(http.StatusOK, map[string]any{"addresses": addrs})
}

// listRetrying answers GET /v1/destinations/{name}/retrying: the events
// of the destination waiting for their next attempt, as 'relay dest
// retrying'.
func (s *Server) listRetrying(c *call) {
	q := c.r.URL.Query()
	if !queryParams(c.w, q, "limit") {
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			c.problem(http.StatusBadRequest, "limit", fmt.Sprintf("%q: give a number from 1 to 1000", v))
			return
		}
		limit = n
	}
	evs, err := history.ListRetrying(c.within(30*time.Second), c.dests, c.name, limit)
	if err != nil {
		destProblem(c.w, nil, err)
		return
	}
	if evs == nil {
		evs = []history.Retrying{}
	}
	c.json(http.StatusOK, map[string]any{"events": evs})
}

// skipRequest is the optional body of a skip.
type skipRequest struct {
	Reason string `json:"reason"`
}

// skipRetrying answers POST /v1/destinations/{name}/retrying/{id}/skip:
// dead-letter the event at its next delivery instead of attempting it, as
// 'relay dest skip'.
func (s *Server) skipRetrying(c *call) {
	var req skipRequest
	if !s.readOptionalJSON(c.w, c.r, &req) {
		return
	}
	why, err := history.SkipReason(req.Reason)
	if err != nil {
		c.problem(http.StatusUnprocessableEntity, "reason", err.Error())
		return
	}
	sk, err := history.SkipEvent(c.within(30*time.Second), c.dests, c.name, c.r.PathValue("id"), why)
	switch {
	case errors.Is(err, history.ErrNotRetrying):
		c.problem(http.StatusNotFound, "id", err.Error())
	case errors.Is(err, history.ErrOrdered):
		c.problem(http.StatusConflict, "", err.Error())
	case err != nil:
		destProblem(c.w, nil, err)
	default:
		c.json(http.StatusOK, sk)
	}
}
