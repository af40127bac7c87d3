package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/tenant"
)

// needs are what a route's handler works on, checked and looked up before
// it runs (Server.handle), in this order; the first that fails is answered
// and the handler does not run.
type needs uint16

const (
	// needDests: the destination store (503 without one).
	needDests needs = 1 << iota
	// needName: the path's {name}, a destination's name (404 if it
	// cannot be one); the destination store too.
	needName
	// needLetters: the dead-letter store (503 without one).
	needLetters
	// needSeq: the path's {seq}, a dead-letter sequence (400 if it is
	// not one); the dead-letter store too.
	needSeq
	// needEventID: the path's {id}, an event id (400 if it cannot be one).
	needEventID
	// needTenants: the tenant store (503 without one).
	needTenants
	// needTenant: the path's {tenant}, a tenant's id (404 if it cannot be
	// one); the tenant store too.
	needTenant
	// needTypes: the event-type catalog's store (503 without one).
	needTypes
	// needScope: the path's {tenant} is the tenant the request is for
	// (404 unless it exists); set on the routes at TenantPath. Without
	// it, the request is for its key's tenant (none for a key of none).
	needScope
)

// call is one request to a route, as its handler takes it: what the route
// needs, checked and looked up, and the request's key.
type call struct {
	w http.ResponseWriter
	r *http.Request
	// key is the request's API key (set by auth), without its hash.
	key Key

	// scope is the tenant the request is for: the path's (needScope),
	// else its key's; "" for none. all: the request is a key of no
	// tenant's at a plain path (no tenant in it): the operator's view, in
	// which lists and lookups by sequence or id cover every tenant's (and
	// name a tenant's destination as stream.DestRef does, tenant=name),
	// while a destination named in the path is one of no tenant.
	scope   string
	all     bool
	dests   *destination.Store // needDests, needName
	letters *dlq.Store         // needLetters, needSeq
	// name is the path's destination (needName), as relay refers to it
	// (stream.DestRef of scope and short); short is the path's name.
	name    string
	short   string
	seq     uint64           // needSeq
	id      string           // needEventID
	tenants *tenant.Store    // needTenants, needTenant
	tenant  string           // needTenant; PUT /v1/tenants/{tenant} too
	types   *eventtype.Store // needTypes

	cancels []context.CancelFunc
}

// handle is h as an http.HandlerFunc: it checks and looks up what h needs,
// answering the problem itself when one fails, and ends the contexts h
// took (within) when h returns.
func (s *Server) handle(n needs, h func(*call)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := &call{w: w, r: r}
		c.key, _ = r.Context().Value(keyOfRequest{}).(Key)
		defer func() {
			for _, cancel := range c.cancels {
				cancel()
			}
		}()
		var ok bool
		c.scope = c.key.Tenant
		c.all = c.key.Tenant == "" && n&needScope == 0
		if n&needScope != 0 {
			if c.scope, ok = s.scopeOf(w, r); !ok {
				return
			}
		}
		if n&(needDests|needName) != 0 {
			if c.dests, ok = s.dests(w); !ok {
				return
			}
		}
		if n&needName != 0 {
			c.short = r.PathValue("name")
			if err := stream.ValidateDestName(c.short); err != nil {
				problem(w, http.StatusNotFound, "", fmt.Sprintf("%v: %s", destination.ErrNotFound, c.short))
				return
			}
			c.name = stream.DestRef(c.scope, c.short)
		}
		if n&(needLetters|needSeq) != 0 {
			if c.letters, ok = s.letters(w); !ok {
				return
			}
		}
		if n&needSeq != 0 {
			seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
			if err != nil || seq == 0 {
				problem(w, http.StatusBadRequest, "seq", fmt.Sprintf("%q: give a dead-letter sequence (seq in GET /v1/dead-letters)", r.PathValue("seq")))
				return
			}
			c.seq = seq
		}
		if n&(needTenants|needTenant) != 0 {
			if c.tenants, ok = s.tenants(w); !ok {
				return
			}
			c.tenant = r.PathValue("tenant")
		}
		if n&needTenant != 0 {
			if err := tenant.ValidateID(c.tenant); err != nil {
				problem(w, http.StatusNotFound, "", fmt.Sprintf("%v: %s", tenant.ErrNotFound, c.tenant))
				return
			}
		}
		if n&needTypes != 0 {
			if c.types, ok = s.eventTypes(w); !ok {
				return
			}
		}
		if n&needEventID != 0 {
			c.id = r.PathValue("id")
			if err := publish.ValidateEventID(c.id); err != nil {
				problem(w, http.StatusBadRequest, "id", err.Error())
				return
			}
		}
		h(c)
	}
}

// inScope reports whether destination dest (a stream.DestRef) is of the
// tenant the request is for (none: of no tenant).
func (c *call) inScope(dest string) bool {
	t, _ := stream.SplitDestRef(dest)
	return c.all || t == c.scope
}

// shortName is destination dest (a stream.DestRef of the request's
// tenant) as the request names it: its name within the tenant.
func (c *call) shortName(dest string) string {
	if c.all {
		return dest
	}
	_, n := stream.SplitDestRef(dest)
	return n
}

// destRef is destination name, given in a query or body, as relay refers
// to it: the request's tenant's of that name; in the operator's view (all)
// also any tenant's as stream.DestRef names it (tenant=name).
func (c *call) destRef(name string) (string, error) {
	if c.all {
		return name, stream.ValidateDestRef(name)
	}
	if err := stream.ValidateDestName(name); err != nil {
		return "", err
	}
	return stream.DestRef(c.scope, name), nil
}

// scopeOf is the tenant named in r's path, or false after answering 404
// when there is no such tenant (or 503 when tenants cannot be read).
func (s *Server) scopeOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("tenant")
	ts, ok := s.tenants(w)
	if !ok {
		return "", false
	}
	if s.knows(id) {
		return id, true
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	switch _, err := ts.Get(ctx, id); {
	case errors.Is(err, tenant.ErrNotFound):
		problem(w, http.StatusNotFound, "", err.Error())
		return "", false
	case err != nil:
		problem(w, http.StatusServiceUnavailable, "", "tenants unavailable: "+err.Error())
		return "", false
	}
	s.seen(id)
	return id, true
}

// force is the request's ?force, or false after answering 400 for one
// that is neither true nor false.
func (c *call) force() (force, ok bool) {
	switch v := c.r.URL.Query().Get("force"); v {
	case "", "false":
		return false, true
	case "true":
		return true, true
	default:
		c.problem(http.StatusBadRequest, "force", fmt.Sprintf("force %q: give true or false", v))
		return false, false
	}
}

// within is the request's context, ended after d from now, or when the
// handler returns.
func (c *call) within(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(c.r.Context(), d)
	c.cancels = append(c.cancels, cancel)
	return ctx
}

// tracedWithin is within with the trace context of the request's
// traceparent and tracestate headers, if it has a valid one: a producer
// that traces (relay.Producer.TraceWith) continues it in each event's
// publish span.
func (c *call) tracedWithin(d time.Duration) context.Context {
	ctx := c.r.Context()
	if c.r.Header.Get("Traceparent") != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(c.r.Header))
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	c.cancels = append(c.cancels, cancel)
	return ctx
}

// admin reports whether the request came with an admin key.
//
// A customer portal's session is not: it sees what a read key sees.
func (c *call) admin() bool { return c.key.Scope == ScopeAdmin && c.key.Session == "" }

// problem answers an RFC 9457 problem (see problem).
func (c *call) problem(status int, field, detail string) { problem(c.w, status, field, detail) }

// json answers v as JSON with status.
func (c *call) json(status int, v any) { writeJSON(c.w, status, v) }
