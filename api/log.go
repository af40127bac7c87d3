package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/relaydev/relay/deliverylog"
)

// queryParams checks that q holds no parameter but those allowed, each
// once; it writes the problem and returns false otherwise.
func queryParams(w http.ResponseWriter, q url.Values, allowed ...string) bool {
	for k, vs := range q {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		switch {
		case !known:
			problem(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (known: %v)", k, allowed))
			return false
		case len(vs) > 1:
			problem(w, http.StatusBadRequest, k, fmt.Sprintf("query parameter %q given %d times: give it once", k, len(vs)))
			return false
		}
	}
	return true
}

// queryTime reads the RFC 3339 time of query parameter name (zero when
// absent).
func queryTime(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-01-02T15:04:05Z)", v)
	}
	return t, nil
}

// attempts answers GET /v1/attempts: the delivery log, newest first.
func (s *Server) attempts(c *call) {
	q := c.r.URL.Query()
	if !queryParams(c.w, q, "dest", "event", "type", "status", "since", "until", "limit", "cursor") {
		return
	}
	aq := deliverylog.AttemptQuery{Scoped: !c.all, Tenant: c.scope, EventID: q.Get("event"), Type: q.Get("type"), Status: q.Get("status")}
	var err error
	if d := q.Get("dest"); d != "" {
		if aq.Dest, err = c.destRef(d); err != nil {
			c.problem(http.StatusBadRequest, "dest", err.Error())
			return
		}
	}
	if aq.Since, err = queryTime(q, "since"); err != nil {
		c.problem(http.StatusBadRequest, "since", err.Error())
		return
	}
	if aq.Until, err = queryTime(q, "until"); err != nil {
		c.problem(http.StatusBadRequest, "until", err.Error())
		return
	}
	if v := q.Get("limit"); v != "" {
		if aq.Limit, err = strconv.Atoi(v); err != nil || aq.Limit < 1 {
			c.problem(http.StatusBadRequest, "limit", fmt.Sprintf("%q: give a number from 1 to %d", v, deliverylog.MaxAttemptLimit))
			return
		}
	}
	if v := q.Get("cursor"); v != "" {
		if aq.Before, err = strconv.ParseUint(v, 10, 64); err != nil || aq.Before == 0 {
			c.problem(http.StatusBadRequest, "cursor", fmt.Sprintf("%q: give the next value of an earlier page", v))
			return
		}
	}
	if err := aq.Validate(); err != nil {
		var qe *deliverylog.QueryError
		if errors.As(err, &qe) {
			c.problem(http.StatusBadRequest, qe.Field, qe.Err.Error())
			return
		}
		c.problem(http.StatusBadRequest, "", err.Error())
		return
	}
	page, err := deliverylog.ReadAttempts(c.within(30*time.Second), s.cfg.JS, aq)
	if err != nil {
		c.problem(http.StatusServiceUnavailable, "", "cannot read the delivery log now: "+err.Error())
		return
	}
	for i := range page.Attempts {
		page.Attempts[i].Dest = c.shortName(page.Attempts[i].Dest)
	}
	out := map[string]any{"attempts": page.Attempts}
	if page.Next != 0 {
		out["next"] = strconv.FormatUint(page.Next, 10)
	}
	c.json(http.StatusOK, out)
}

// event answers GET /v1/events/{id}: the event and where its delivery to
// each destination stands.
func (s *Server) event(c *call) {
	v, err := deliverylog.LookupEventOf(c.within(30*time.Second), s.cfg.JS, c.id, c.inScope)
	for i := range v.RoutedTo {
		v.RoutedTo[i] = c.shortName(v.RoutedTo[i])
	}
	for i := range v.Destinations {
		d := &v.Destinations[i]
		d.Dest = c.shortName(d.Dest)
		for j := range d.Attempts {
			d.Attempts[j].Dest = c.shortName(d.Attempts[j].Dest)
		}
	}
	switch {
	case errors.Is(err, deliverylog.ErrEventNotFound):
		c.problem(http.StatusNotFound, "id", fmt.Sprintf("event %q: %v (not attempted yet, or recorded longer ago than the log keeps)", c.id, err))
	case err != nil:
		c.problem(http.StatusServiceUnavailable, "", "cannot read the delivery log now: "+err.Error())
	default:
		c.json(http.StatusOK, v)
	}
}
