package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/relaydev/relay/tenant"
)

// tenantBody is the body of PUT /v1/tenants/{tenant}.
type tenantBody struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
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
// created, 200 when updated. Its name and metadata are replaced by the
// body's.
func (s *Server) putTenant(c *call) {
	var body tenantBody
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	t, created, err := c.tenants.Put(c.within(30*time.Second), tenant.Tenant{ID: c.tenant, Name: body.Name, Metadata: body.Metadata})
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

// deleteTenant removes a tenant's record.
func (s *Server) deleteTenant(c *call) {
	if err := c.tenants.Delete(c.within(30*time.Second), c.tenant); err != nil {
		tenantProblem(c, err)
		return
	}
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
