package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/tenant"
)

// tenantBody is the body of PUT /v1/tenants/{tenant}.
type tenantBody struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
	Defaults tenant.Defaults   `json:"defaults"`
	Limits   tenant.Limits     `json:"limits"`
	Portal   tenant.Portal     `json:"portal"`
}

// Tenants' pages: DefaultTenantPage a page unless limit says, at most
// MaxTenantPage.
const (
	DefaultTenantPage = 100
	MaxTenantPage     = 1000
)

func (s *Server) tenants(w http.ResponseWriter) (*tenant.Store, bool) {
	if s.cfg.Tenants == nil {
		problem(w, http.StatusServiceUnavailable, "", "this server does not serve tenants (no store configured)")
		return nil, false
	}
	return s.cfg.Tenants, true
}

// putTenant creates or updates a tenant (an upsert): 201 when it was
// created, 200 when updated. Its name, metadata, defaults, limits and
// portal settings are replaced by the body's.
func (s *Server) putTenant(c *call) {
	var body tenantBody
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	t, created, err := c.tenants.Put(c.within(30*time.Second), tenant.Tenant{ID: c.tenant, Name: body.Name, Metadata: body.Metadata, Defaults: body.Defaults, Limits: body.Limits, Portal: body.Portal})
	if err != nil {
		tenantProblem(c, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.w.Header().Set("Location", "/v1/tenants/"+t.ID)
	}
	c.json(status, t)
}

func (s *Server) getTenant(c *call) {
	t, err := c.tenants.Get(c.within(10*time.Second), c.tenant)
	if err != nil {
		tenantProblem(c, err)
		return
	}
	c.json(http.StatusOK, t)
}

// listTenants lists the tenants in the order of their ids, a page at a
// time: after is the cursor (the last id of the page before).
func (s *Server) listTenants(c *call) {
	q := c.r.URL.Query()
	if id := c.key.Tenant; id != "" {
		// A tenant key sees its own tenant only.
		t, err := c.tenants.Get(c.within(10*time.Second), id)
		if err != nil {
			tenantProblem(c, err)
			return
		}
		if after := q.Get("after"); after != "" && after >= id {
			c.json(http.StatusOK, map[string]any{"tenants": []tenant.Tenant{}})
			return
		}
		c.json(http.StatusOK, map[string]any{"tenants": []tenant.Tenant{t}})
		return
	}
	limit := DefaultTenantPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTenantPage {
			c.problem(http.StatusBadRequest, "limit", "limit "+strconv.Quote(v)+": give 1 to "+strconv.Itoa(MaxTenantPage))
			return
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && tenant.ValidateID(after) != nil {
		c.problem(http.StatusBadRequest, "after", "after "+strconv.Quote(after)+": give the next cursor of the page before (a tenant id)")
		return
	}
	ts, next, err := c.tenants.List(c.within(30*time.Second), after, limit)
	if err != nil {
		tenantProblem(c, err)
		return
	}
	out := map[string]any{"tenants": ts}
	if ts == nil {
		out["tenants"] = []tenant.Tenant{}
	}
	if next != "" {
		out["next"] = next
	}
	c.json(http.StatusOK, out)
}

// deleteTenant removes a tenant: its keys, its record, then its
// destinations. While they have events not yet delivered it is refused
// (409) unless ?force=true: those events then stay in the events stream,
// undelivered, until its retention ends, as a destination's removed with
// force do; an attempt under way ends and is logged.
func (s *Server) deleteTenant(c *call) {
	force, ok := c.force()
	if !ok {
		return
	}
	removed, err := DeleteTenant(c.within(2*time.Minute), TenantDeletion{Tenants: c.tenants, Keys: s.cfg.Keys, Dests: s.cfg.Dests, Portal: s.cfg.Portal, ID: c.tenant, Force: force})
	var pe *TenantPendingError
	switch {
	case errors.As(err, &pe):
		c.problem(http.StatusConflict, "", pe.Error()+": add ?force=true to delete the tenant anyway")
		return
	case err != nil && removed.Deleted:
		c.problem(http.StatusServiceUnavailable, "", fmt.Sprintf("the tenant is deleted, but of its destinations only %d were removed (DELETE it again to remove the others): %v", removed.Destinations, err))
		return
	case err != nil:
		tenantProblem(c, err)
		return
	}
	s.forget(c.tenant)
	s.cfg.Producer.ForgetTenant(c.tenant)
	s.cfg.Logger.Info("tenant deleted", "tenant", c.tenant, "destinations", removed.Destinations, "keys", removed.Keys, "key", c.key.Name)
	c.w.WriteHeader(http.StatusNoContent)
}

// TenantDeletion is what DeleteTenant deletes, with what.
type TenantDeletion struct {
	Tenants *tenant.Store
	Keys    *Keys
	Dests   *destination.Store // optional: none, no destination is removed
	// Portal, when given, has the tenant's portal sessions ended.
	Portal *portal.Store
	ID     string
	// Force deletes even while the tenant's destinations have events not
	// yet delivered.
	Force bool
}

// TenantRemoved is what DeleteTenant removed.
type TenantRemoved struct {
	Deleted      bool // the tenant's record
	Keys         int
	Destinations int
}

// TenantPendingError refuses to delete a tenant whose destinations have
// events not yet delivered.
type TenantPendingError struct {
	ID      string
	Pending []string // "name: n"
}

func (e *TenantPendingError) Error() string {
	return fmt.Sprintf("tenant %s's destinations still have undelivered events (%s); deleted, they would never be delivered", e.ID, strings.Join(e.Pending, ", "))
}

// DeleteTenant deletes tenant d.ID: its keys first (no request of its own
// starts once it is going), its record, then its destinations. While they
// have events not yet delivered it is refused (*TenantPendingError)
// unless d.Force: those events then stay in the events stream,
// undelivered, until its retention ends, as those of a destination
// removed with force do; an attempt under way ends and is logged. Run
// again after a failure, it goes on where it stopped.
func DeleteTenant(ctx context.Context, d TenantDeletion) (TenantRemoved, error) {
	var out TenantRemoved
	_, err := d.Tenants.Get(ctx, d.ID)
	gone := errors.Is(err, tenant.ErrNotFound)
	if err != nil && !gone {
		return out, err
	}
	var dests []destination.Destination
	if d.Dests != nil {
		all, err := d.Dests.List(ctx)
		if err != nil {
			return out, err
		}
		for _, x := range all {
			if x.Tenant() == d.ID {
				dests = append(dests, x)
			}
		}
	}
	if gone && len(dests) == 0 {
		return out, fmt.Errorf("%w: %s", tenant.ErrNotFound, d.ID)
	}
	if !d.Force && !gone {
		var pending []string
		for _, x := range dests {
			n, err := d.Dests.Pending(ctx, x.Name)
			if err != nil && !errors.Is(err, destination.ErrNotFound) {
				return out, fmt.Errorf("count the undelivered events of %s: %w", destination.Display(x.Name), err)
			}
			if n > 0 {
				pending = append(pending, fmt.Sprintf("%s: %d", x.ShortName(), n))
			}
		}
		if len(pending) > 0 {
			return out, &TenantPendingError{ID: d.ID, Pending: pending}
		}
	}
	if out.Keys, err = d.Keys.RevokeTenant(ctx, d.ID); err != nil {
		return out, fmt.Errorf("revoke the tenant's API keys (the tenant is kept; try again): %w", err)
	}
	if !gone {
		if err := d.Tenants.Delete(ctx, d.ID); err != nil && !errors.Is(err, tenant.ErrNotFound) {
			return out, err
		}
	}
	out.Deleted = true
	if d.Portal != nil {
		if err := d.Portal.EndAll(ctx, d.ID); err != nil {
			return out, err
		}
	}
	for _, x := range dests {
		if err := d.Dests.RemoveIdle(ctx, x.Name, true); err != nil && !errors.Is(err, destination.ErrNotFound) {
			return out, err
		}
		out.Destinations++
	}
	return out, nil
}

// tenantKeyBody is the body of POST /v1/tenants/{tenant}/keys.
type tenantKeyBody struct {
	Name  string `json:"name"`
	Scope string `json:"scope"`
}

// createTenantKey creates an API key confined to the tenant; the key is
// in the answer, and only there.
func (s *Server) createTenantKey(c *call) {
	var body tenantKeyBody
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	if err := ValidateName(body.Name); err != nil {
		c.problem(http.StatusUnprocessableEntity, "name", err.Error())
		return
	}
	scope, err := ParseScope(body.Scope)
	if err != nil {
		c.problem(http.StatusUnprocessableEntity, "scope", err.Error())
		return
	}
	ctx := c.within(30 * time.Second)
	if _, err := c.tenants.Get(ctx, c.tenant); err != nil {
		tenantProblem(c, err)
		return
	}
	key, rec, err := s.cfg.Keys.CreateFor(ctx, c.tenant, body.Name, scope)
	switch {
	case errors.Is(err, ErrKeyExists):
		c.problem(http.StatusConflict, "name", err.Error())
		return
	case err != nil:
		c.problem(http.StatusServiceUnavailable, "", "the key was not created: "+err.Error())
		return
	}
	// A tenant deleted meanwhile keeps no key.
	if _, err := c.tenants.Get(ctx, c.tenant); errors.Is(err, tenant.ErrNotFound) {
		_, _ = s.cfg.Keys.Revoke(ctx, rec.Name)
		tenantProblem(c, err)
		return
	}
	s.cfg.Logger.Info("tenant API key created", "tenant", c.tenant, "name", rec.Name, "scope", rec.Scope, "by", c.key.Name)
	c.json(http.StatusCreated, map[string]any{"key": key, "name": rec.Name, "id": rec.ID, "scope": rec.Scope, "tenant": rec.Tenant, "created": rec.Created})
}

// listTenantKeys lists the tenant's keys (never a key or its hash).
func (s *Server) listTenantKeys(c *call) {
	ctx := c.within(30 * time.Second)
	if _, err := c.tenants.Get(ctx, c.tenant); err != nil {
		tenantProblem(c, err)
		return
	}
	all, err := s.cfg.Keys.List(ctx)
	if err != nil {
		c.problem(http.StatusServiceUnavailable, "", err.Error())
		return
	}
	out := []Key{}
	for _, k := range all {
		if k.Tenant == c.tenant {
			out = append(out, k)
		}
	}
	c.json(http.StatusOK, map[string]any{"keys": out})
}

// revokeTenantKey revokes one of the tenant's keys, by name.
func (s *Server) revokeTenantKey(c *call) {
	ctx := c.within(30 * time.Second)
	name := c.r.PathValue("key")
	all, err := s.cfg.Keys.List(ctx)
	if err != nil {
		c.problem(http.StatusServiceUnavailable, "", err.Error())
		return
	}
	if !slices.ContainsFunc(all, func(k Key) bool { return k.Name == name && k.Tenant == c.tenant }) {
		c.problem(http.StatusNotFound, "", fmt.Sprintf("%v: %s", ErrKeyNotFound, name))
		return
	}
	if _, err := s.cfg.Keys.Revoke(ctx, name); err != nil {
		c.problem(http.StatusServiceUnavailable, "", err.Error())
		return
	}
	s.cfg.Logger.Info("tenant API key revoked", "tenant", c.tenant, "name", name, "by", c.key.Name)
	c.w.WriteHeader(http.StatusNoContent)
}

// tenantProblem answers err, an error of the tenant store.
func tenantProblem(c *call, err error) {
	var fe *tenant.FieldError
	switch {
	case errors.As(err, &fe):
		c.problem(http.StatusUnprocessableEntity, fe.Field, fe.Error())
	case errors.Is(err, tenant.ErrNotFound):
		c.problem(http.StatusNotFound, "", err.Error())
	default:
		c.problem(http.StatusServiceUnavailable, "", "tenants unavailable: "+err.Error())
	}
}
