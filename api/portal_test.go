package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/stream"
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
	require.True(t, strings.HasPrefix(url, e.url+"/portal/signin/acme#token=rpl_"), url)
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

// A portal session's token is a key of its tenant: it reads the tenant's
// resources, changes only what its capabilities allow, never another
// tenant's, and nothing of an operator's; what it changes is audited; it
// stops working when the sessions end.
func TestPortalSessionTokenActsWithinItsCapabilities(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	for _, id := range []string{"acme", "globex"} {
		code, m := e.send("PUT", "/v1/tenants/"+id, e.admin, `{}`)
		require.Equal(t, http.StatusCreated, code, m)
		code, m = e.send("POST", "/v1/tenants/"+id+"/destinations", e.admin, `{"name":"orders","url":"https://example.com/hook"}`)
		require.Equal(t, http.StatusCreated, code, m)
	}
	session := func(caps string) string {
		code, m := e.send("POST", "/v1/tenants/acme/portal-sessions", e.admin, `{"capabilities":`+caps+`}`)
		require.Equal(t, http.StatusCreated, code, m)
		cookie, _, err := e.portal.Exchange(ctx, strings.Split(m["url"].(string), "#token=")[1])
		require.NoError(t, err)
		return cookie
	}
	readOnly, manage, secrets := session(`[]`), session(`["manage_endpoints","replay"]`), session(`["view_secret"]`)

	code, m := e.send("GET", "/v1/key", readOnly, "")
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "acme", m["tenant"])
	require.NotEmpty(t, m["session"])
	code, m = e.send("GET", "/v1/key", manage, "")
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, []any{"manage_endpoints", "replay"}, m["capabilities"])

	for _, c := range []struct {
		key, method, path, body string
		want                    int
	}{
		{readOnly, "GET", "/v1/destinations/orders", "", 200},
		{readOnly, "GET", "/v1/attempts", "", 200},
		{readOnly, "POST", "/v1/destinations/orders/pause", "", 403},
		{readOnly, "POST", "/v1/events", `{"dest":"orders","data":1}`, 403},
		{readOnly, "GET", "/v1/destinations/orders/secret", "", 403},
		{manage, "GET", "/v1/destinations/orders/secret", "", 403},
		{manage, "POST", "/v1/destinations/orders/rotate-secret", "", 403},
		{manage, "POST", "/v1/dead-letters/purge", `{"all":true,"dry_run":true}`, 403},
		{manage, "POST", "/v1/events:batch", `{"events":[{"dest":"orders","data":1}]}`, 403},
		{manage, "POST", "/v1/tenants/acme/portal-sessions", `{}`, 403},
		{manage, "DELETE", "/v1/tenants/acme/portal-sessions", "", 403},
		{manage, "POST", "/v1/tenants/acme/keys", `{"name":"k","scope":"admin"}`, 403},
		{manage, "GET", "/v1/tenants/globex/destinations/orders", "", 404},
		{manage, "POST", "/v1/tenants/globex/destinations/orders/pause", "", 404},
		{manage, "PUT", "/v1/event-types/x.y", `{}`, 403},
		{manage, "PATCH", "/v1/destinations/orders", `{"secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, 403},
		{manage, "PATCH", "/v1/destinations/orders", `{"no_secret":true}`, 403},
		{manage, "PATCH", "/v1/destinations/orders", `{"concurrency":1000}`, 403},
		{manage, "POST", "/v1/destinations", `{"name":"big","url":"https://example.com/b","ordered":true,"partitions":16}`, 403},
		{manage, "DELETE", "/v1/destinations/orders?force=true", "", 403},
		{manage, "POST", "/v1/destinations/orders/retrying/evt-1/skip", `{}`, 403},
		{manage, "POST", "/v1/events", `{"type":"order.created","data":1}`, 403},
		{manage, "POST", "/v1/events", `{"dest":"orders","key":"k","data":1}`, 403},
		{readOnly, "GET", "/v1/tenants", "", 403},
		{readOnly, "GET", "/v1/tenants/acme", "", 403},
		{manage, "PATCH", "/v1/destinations/orders", `{"url":"https://example.com/moved","types":["order.*"],"filter":"data.x > 1"}`, 200},
		{manage, "POST", "/v1/destinations", `{"name":"second","url":"https://example.com/2","types":["order.created"]}`, 201},
		{manage, "POST", "/v1/dead-letters/replay", `{"all":true,"dry_run":true}`, 200},
		{manage, "POST", "/v1/destinations/orders/pause", "", 200},
		{manage, "POST", "/v1/events", `{"dest":"orders","data":1}`, 202},
		{secrets, "GET", "/v1/destinations/orders/secret", "", 200},
		{secrets, "POST", "/v1/destinations/orders/pause", "", 403},
	} {
		code, m := e.send(c.method, c.path, c.key, c.body)
		require.Equal(t, c.want, code, "%s %s: %v", c.method, c.path, m)
	}
	// globex's destination is untouched; acme's paused.
	code, m = e.send("GET", "/v1/tenants/globex/destinations/orders", e.admin, "")
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "active", m["state"], m)
	code, m = e.send("GET", "/v1/tenants/acme/destinations/orders", e.admin, "")
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "operator", m["state"], m)

	// The audit: each change asked (done or refused by the handler) is an
	// operator event of acme's, with the session and the answer.
	nc, err := nats.Connect(e.srv.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync(stream.TenantTypeSubject("acme", opevent.PortalAction))
	require.NoError(t, err)
	// The server has the subscription before the audits are published
	// (from another connection): without the round trip, a loaded machine
	// could publish first, and the audit would be missed.
	require.NoError(t, nc.Flush())
	code, m = e.send("POST", "/v1/destinations/orders/resume", manage, "")
	require.Equal(t, http.StatusOK, code, m)
	code, m = e.send("POST", "/v1/destinations/orders/pause", readOnly, "")
	require.Equal(t, http.StatusForbidden, code, m)
	audits := map[string]map[string]any{}
	for range 2 {
		msg, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		var audit map[string]any
		require.NoError(t, json.Unmarshal(msg.Data, &audit))
		require.Equal(t, "relay.portal.action", audit["type"])
		require.Equal(t, "acme", audit["tenant"])
		audits[audit["action"].(string)] = audit
	}
	require.Equal(t, "/v1/destinations/orders/resume", audits["POST /v1/destinations/{name}/resume"]["path"])
	require.EqualValues(t, 200, audits["POST /v1/destinations/{name}/resume"]["status"])
	require.EqualValues(t, 403, audits["POST /v1/destinations/{name}/pause"]["status"], "a refusal is audited too")
	require.Contains(t, e.logs.String(), "portal action")

	// Test events: a few in a row, then one a second.
	limited := false
	for range 10 {
		code, _ := e.send("POST", "/v1/events", manage, `{"dest":"orders","data":1}`)
		if code == http.StatusTooManyRequests {
			limited = true
			break
		}
		require.Equal(t, http.StatusAccepted, code)
	}
	require.True(t, limited, "a session's test events are limited")

	// A read-only session sees what a read key sees: no body template.
	code, m = e.send("PATCH", "/v1/tenants/acme/destinations/orders", e.admin, `{"body_template":"{{.Data}} token=s3cret"}`)
	require.Equal(t, http.StatusOK, code, m)
	code, m = e.send("GET", "/v1/destinations/orders", readOnly, "")
	require.Equal(t, http.StatusOK, code, m)
	require.NotContains(t, m, "body_template")
	require.NotZero(t, m["body_template_bytes"])

	code, m = e.do("DELETE", "/v1/tenants/acme/portal-sessions", e.admin, "", nil)
	require.Equal(t, http.StatusNoContent, code, m)
	code, m = e.send("GET", "/v1/destinations", manage, "")
	require.Equal(t, http.StatusUnauthorized, code, "an ended session is no key: %v", m)
}
