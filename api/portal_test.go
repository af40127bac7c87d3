package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/portal"
)

// Portal links over HTTP: minted by a key of no tenant or the tenant's own
// admin key, with capabilities and a lifetime, the token in the URL's
// fragment; bad input refused naming the field; ended all at once, and
// by deleting the tenant.
func TestPortalSessionsOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	code, m := e.send("PUT", "/v1/tenants/acme", e.admin, `{}`)
	require.Equal(t, http.StatusCreated, code, m)
	own := e.tenantKey("acme", "acme-admin", "admin")
	ownRead := e.tenantKey("acme", "acme-read", "read")

	before := time.Now()
	code, m = e.send("POST", "/v1/tenants/acme/portal-sessions", e.admin, `{"capabilities":["replay","manage_endpoints"],"ttl":"2h"}`)
	require.Equal(t, http.StatusCreated, code, m)
	url := m["url"].(string)
	require.True(t, strings.HasPrefix(url, e.url+"/portal/#token=rpl_"), url)
	require.NotContains(t, strings.Split(url, "#")[0], "rpl_", "the token is in the fragment only")
	exp, err := time.Parse(time.RFC3339Nano, m["expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, before.Add(2*time.Hour), exp, time.Minute)
	require.Equal(t, []any{"manage_endpoints", "replay"}, m["capabilities"])
	require.NotContains(t, e.logs.String(), strings.Split(url, "#token=")[1], "the token is not logged")

	// The link opens a session of acme's, once.
	cookie, sess, err := e.portal.Exchange(ctx, strings.Split(url, "#token=")[1])
	require.NoError(t, err)
	require.Equal(t, "acme", sess.Tenant)
	require.True(t, sess.Can(portal.Replay))

	code, m = e.send("POST", "/v1/tenants/acme/portal-sessions", own, `{}`)
	require.Equal(t, http.StatusCreated, code, "the tenant's own admin key mints: %v", m)
	require.Equal(t, []any{}, m["capabilities"], "read only")
	unused := strings.Split(m["url"].(string), "#token=")[1]
	code, m = e.send("POST", "/v1/tenants/acme/portal-sessions", ownRead, `{}`)
	require.Equal(t, http.StatusForbidden, code, m)
	for _, c := range []struct{ body, field string }{
		{`{"capabilities":["fly"]}`, "capabilities"},
		{`{"ttl":"25h"}`, "ttl"},
		{`{"ttl":"10s"}`, "ttl"},
		{`{"ttl":"soon"}`, "ttl"},
	} {
		code, m = e.send("POST", "/v1/tenants/acme/portal-sessions", e.admin, c.body)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s: %v", c.body, m)
		require.Equal(t, c.field, m["field"], c.body)
	}
	code, m = e.send("POST", "/v1/tenants/ghost/portal-sessions", e.admin, `{}`)
	require.Equal(t, http.StatusNotFound, code, m)

	// Ending all: the session and the unused link stop working.
	code, m = e.do("DELETE", "/v1/tenants/acme/portal-sessions", own, "", nil)
	require.Equal(t, http.StatusNoContent, code, m)
	_, err = e.portal.Verify(ctx, cookie)
	require.ErrorIs(t, err, portal.ErrBadToken)
	_, _, err = e.portal.Exchange(ctx, unused)
	require.ErrorIs(t, err, portal.ErrBadToken)

	// Deleting the tenant ends its sessions too.
	code, m = e.send("POST", "/v1/tenants/acme/portal-sessions", e.admin, `{}`)
	require.Equal(t, http.StatusCreated, code, m)
	cookie, _, err = e.portal.Exchange(ctx, strings.Split(m["url"].(string), "#token=")[1])
	require.NoError(t, err)
	code, m = e.do("DELETE", "/v1/tenants/acme", e.admin, "", nil)
	require.Equal(t, http.StatusNoContent, code, m)
	_, err = e.portal.Verify(ctx, cookie)
	require.ErrorIs(t, err, portal.ErrBadToken, "the tenant is gone")
	code, m = e.send("PUT", "/v1/tenants/acme", e.admin, `{}`)
	require.Equal(t, http.StatusCreated, code, m)
	_, err = e.portal.Verify(ctx, cookie)
	require.ErrorIs(t, err, portal.ErrBadToken, "a new tenant of the same id does not revive it")
}
