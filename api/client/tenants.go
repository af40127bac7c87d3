package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Tenant is one of the operator's customers (the Tenant schema).
type Tenant struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Defaults  TenantDefaults    `json:"defaults,omitzero"`
	Limits    TenantLimits      `json:"limits,omitzero"`
	Portal    TenantPortal      `json:"portal,omitzero"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// TenantDefaults are the settings a tenant's new destinations take where
// none is given (the TenantDefaults schema). Zero: relay's default.
type TenantDefaults struct {
	MaxAttempts int      `json:"max_attempts,omitempty"`
	BackoffBase Duration `json:"backoff_base,omitzero"`
	BackoffMax  Duration `json:"backoff_max,omitzero"`
	Timeout     Duration `json:"timeout,omitzero"`
	RateLimit   float64  `json:"rate_limit,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Signature   string   `json:"signature,omitempty"`
}

// TenantLimits bound what a tenant may use (the TenantLimits schema).
// Zero: no limit.
type TenantLimits struct {
	MaxDestinations int     `json:"max_destinations,omitempty"`
	PublishRate     float64 `json:"publish_rate,omitempty"`
	MaxInFlight     int     `json:"max_in_flight,omitempty"`
}

// TenantPortal is how the customer portal shows itself to a tenant's
// customers, and where it may be embedded (the TenantPortal schema).
// Zero: relay's own look, and no site may embed it.
type TenantPortal struct {
	// ProductName is shown in the portal's header.
	ProductName string `json:"product_name,omitempty"`
	// AccentColor is "#rrggbb", answered lowercased.
	AccentColor string `json:"accent_color,omitempty"`
	// FrameAncestors are the origins allowed to embed the portal in an
	// iframe, such as https://app.example.com or https://*.example.com:
	// no path, not even "/". Answered lowercased, without the scheme's
	// default port.
	FrameAncestors []string `json:"frame_ancestors,omitempty"`
}

// TenantChange is what PutTenant sets: it replaces the tenant's name,
// metadata, defaults, limits and portal settings (the TenantChange
// schema).
type TenantChange struct {
	Name     string            `json:"name,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Defaults TenantDefaults    `json:"defaults,omitzero"`
	Limits   TenantLimits      `json:"limits,omitzero"`
	Portal   TenantPortal      `json:"portal,omitzero"`
}

// TenantPage is a page of ListTenants (the TenantPage schema): Next is the
// cursor of the next page, empty on the last.
type TenantPage struct {
	Tenants []Tenant `json:"tenants"`
	Next    string   `json:"next,omitempty"`
}

func tenantPath(id string) string { return "/tenants/" + url.PathEscape(id) }

// PutTenant creates the tenant id, or replaces its name, metadata,
// defaults, limits and portal settings (putTenant, an upsert); created
// says which. Scope: admin.
func (c *Client) PutTenant(ctx context.Context, id string, change TenantChange) (t Tenant, created bool, err error) {
	resp, err := c.send(ctx, request{method: http.MethodPut, path: tenantPath(id), body: change})
	if err != nil {
		return Tenant{}, false, err
	}
	defer resp.Body.Close()
	if err := decodeJSON(resp.Body, &t); err != nil {
		return Tenant{}, false, fmt.Errorf("relay client: PUT %s: decode the answer: %w", resp.Request.URL.Path, err)
	}
	return t, resp.StatusCode == http.StatusCreated, nil
}

// Tenant returns one tenant (getTenant); IsNotFound when there is none.
// Scope: read.
func (c *Client) Tenant(ctx context.Context, id string) (Tenant, error) {
	var out Tenant
	err := c.do(ctx, request{method: http.MethodGet, path: tenantPath(id)}, &out)
	return out, err
}

// ListTenants returns up to limit tenants (0: the server's default, 100)
// whose ids sort after after (empty: from the first), in the order of
// their ids (listTenants). Scope: read.
func (c *Client) ListTenants(ctx context.Context, after string, limit int) (TenantPage, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out TenantPage
	err := c.do(ctx, request{method: http.MethodGet, path: "/tenants", query: q}, &out)
	return out, err
}

// DeleteTenant deletes a tenant, its keys and its destinations
// (deleteTenant); IsNotFound when there is none, IsConflict while its
// destinations have undelivered events, unless Force is given. Scope:
// admin, of a key of no tenant.
func (c *Client) DeleteTenant(ctx context.Context, id string, opts ...DeleteOption) error {
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	return c.do(ctx, request{method: http.MethodDelete, path: tenantPath(id), query: q}, nil)
}

// KeyRecord is a stored API key, as listed: never the key or its hash.
type KeyRecord struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Scope   string    `json:"scope"`
	Tenant  string    `json:"tenant,omitempty"`
	Created time.Time `json:"created"`
}

// NewKey is a key just created: the key itself, known only here.
type NewKey struct {
	Key     string    `json:"key"`
	Name    string    `json:"name"`
	ID      string    `json:"id"`
	Scope   string    `json:"scope"`
	Tenant  string    `json:"tenant"`
	Created time.Time `json:"created"`
}

// CreateTenantKey creates an API key of tenant id with scope (publish,
// read or admin), confined to that tenant (createTenantKey). Scope: admin,
// of a key of no tenant.
func (c *Client) CreateTenantKey(ctx context.Context, id, name, scope string) (NewKey, error) {
	var out NewKey
	err := c.do(ctx, request{method: http.MethodPost, path: tenantPath(id) + "/keys", body: map[string]string{"name": name, "scope": scope}}, &out)
	return out, err
}

// TenantKeys lists tenant id's API keys (listTenantKeys).
func (c *Client) TenantKeys(ctx context.Context, id string) ([]KeyRecord, error) {
	var out struct {
		Keys []KeyRecord `json:"keys"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: tenantPath(id) + "/keys"}, &out)
	return out.Keys, err
}

// RevokeTenantKey revokes tenant id's key named name (revokeTenantKey).
func (c *Client) RevokeTenantKey(ctx context.Context, id, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: tenantPath(id) + "/keys/" + url.PathEscape(name)}, nil)
}

// PortalSession is a link to the customer portal (the PortalSession
// schema): URL carries its token in the fragment, known only here.
type PortalSession struct {
	ID           string    `json:"id"`
	URL          string    `json:"url"`
	ExpiresAt    time.Time `json:"expires_at"`
	Capabilities []string  `json:"capabilities"`
}

// CreatePortalSession mints a link to the customer portal for tenant id
// (createPortalSession), with capabilities (manage_endpoints, view_secret,
// rotate_secret, replay; none: read only) for ttl (0: the server's
// default, 1h).
func (c *Client) CreatePortalSession(ctx context.Context, id string, capabilities []string, ttl time.Duration) (PortalSession, error) {
	body := map[string]any{"capabilities": capabilities}
	if capabilities == nil {
		body["capabilities"] = []string{}
	}
	if ttl != 0 {
		body["ttl"] = ttl.String()
	}
	var out PortalSession
	err := c.do(ctx, request{method: http.MethodPost, path: tenantPath(id) + "/portal-sessions", body: body}, &out)
	return out, err
}

// EndPortalSessions ends every portal session and unused link of tenant
// id (endPortalSessions).
func (c *Client) EndPortalSessions(ctx context.Context, id string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: tenantPath(id) + "/portal-sessions"}, nil)
}
