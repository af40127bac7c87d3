package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tenants over HTTP: created and updated by PUT (an upsert), read, listed
// a page at a time, deleted; bad input is refused naming the field, and
// each scope gets what it may.
func TestTenantsOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	put := func(id, body, key string) (int, map[string]any) {
		t.Helper()
		return e.do(http.MethodPut, "/v1/tenants/"+id, key, "application/json", []byte(body))
	}

	code, got := put("acme", `{"name":"Acme","metadata":{"plan":"pro"}}`, e.admin)
	require.Equal(t, http.StatusCreated, code, "%v", got)
	require.Equal(t, "acme", got["id"])
	require.Equal(t, map[string]any{"plan": "pro"}, got["metadata"])
	created := got["created_at"]

	code, got = put("acme", `{"name":"Acme Corp"}`, e.admin)
	require.Equal(t, http.StatusOK, code, "%v", got)
	require.Equal(t, "Acme Corp", got["name"])
	require.Nil(t, got["metadata"], "the body replaces the metadata")
	require.Equal(t, created, got["created_at"])

	code, got = e.do(http.MethodGet, "/v1/tenants/acme", e.read, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "Acme Corp", got["name"])

	for _, c := range []struct {
		id, body string
		status   int
		field    string
	}{
		{"acme.corp", `{}`, http.StatusUnprocessableEntity, "id"},
		{strings.Repeat("x", 65), `{}`, http.StatusUnprocessableEntity, "id"},
		{"b", `{"name":"` + strings.Repeat("n", 257) + `"}`, http.StatusUnprocessableEntity, "name"},
		{"b", `{"metadata":{"plan":"` + strings.Repeat("v", 513) + `"}}`, http.StatusUnprocessableEntity, "metadata.plan"},
		{"b", `{"metadata":{"plan":1}}`, http.StatusBadRequest, "metadata"},
		{"b", `{"nmae":"typo"}`, http.StatusBadRequest, ""},
	} {
		code, got := put(c.id, c.body, e.admin)
		require.Equal(t, c.status, code, "%s %s: %v", c.id, c.body, got)
		if c.field != "" {
			require.Equal(t, c.field, got["field"], "%s %s: %v", c.id, c.body, got)
		}
	}
	_, got = put("b", `{"nmae":"typo"}`, e.admin)
	require.Contains(t, got["detail"], "nmae", "the unknown field is named")

	// Scopes: read keys read, only admin keys change.
	code, _ = put("c", `{}`, e.read)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = e.do(http.MethodGet, "/v1/tenants", e.publish, "", nil)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = e.do(http.MethodDelete, "/v1/tenants/acme", e.read, "", nil)
	require.Equal(t, http.StatusForbidden, code)

	// Pages, in the order of the ids.
	for i := range 5 {
		code, _ := put(fmt.Sprintf("t%d", i), `{}`, e.admin)
		require.Equal(t, http.StatusCreated, code)
	}
	var ids []string
	path := "/v1/tenants?limit=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		code, got := e.do(http.MethodGet, path, e.read, "", nil)
		require.Equal(t, http.StatusOK, code, "%v", got)
		for _, x := range got["tenants"].([]any) {
			ids = append(ids, x.(map[string]any)["id"].(string))
		}
		next, ok := got["next"].(string)
		if !ok {
			break
		}
		path = "/v1/tenants?limit=2&after=" + next
	}
	require.Equal(t, []string{"acme", "t0", "t1", "t2", "t3", "t4"}, ids)
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after=a.b"} {
		code, _ := e.do(http.MethodGet, "/v1/tenants?"+q, e.read, "", nil)
		require.Equal(t, http.StatusBadRequest, code, q)
	}

	code, _ = e.do(http.MethodDelete, "/v1/tenants/acme", e.admin, "", nil)
	require.Equal(t, http.StatusNoContent, code)
	for _, id := range []string{"acme", "no.such"} {
		code, _ = e.do(http.MethodGet, "/v1/tenants/"+id, e.read, "", nil)
		require.Equal(t, http.StatusNotFound, code, id)
		code, _ = e.do(http.MethodDelete, "/v1/tenants/"+id, e.admin, "", nil)
		require.Equal(t, http.StatusNotFound, code, id)
	}
}

// A tenant's portal settings over HTTP: PUT stores them normalized, GET
// answers them, a PUT without them clears them (as it does the other
// fields), and a bad value is refused with 422 naming its field.
func TestTenantPortalSettingsOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	code, got := e.send(http.MethodPut, "/v1/tenants/acme", e.admin, `{"name":"Acme","portal":{"product_name":"Acme Hooks",
		"accent_color":"#1A73E8","frame_ancestors":["HTTPS://App.Acme.example:443","https://*.acme.example","http://localhost:3000"]}}`)
	require.Equal(t, http.StatusCreated, code, "%v", got)
	want := map[string]any{"product_name": "Acme Hooks", "accent_color": "#1a73e8",
		"frame_ancestors": []any{"https://app.acme.example", "https://*.acme.example", "http://localhost:3000"}}
	require.Equal(t, want, got["portal"], "stored normalized")
	code, got = e.send(http.MethodGet, "/v1/tenants/acme", e.read, "")
	require.Equal(t, http.StatusOK, code, "%v", got)
	require.Equal(t, want, got["portal"])

	for _, c := range []struct {
		portal, field string
	}{
		{`{"product_name":"` + strings.Repeat("p", 101) + `"}`, "portal.product_name"},
		{`{"product_name":"line\nbreak"}`, "portal.product_name"},
		{`{"accent_color":"blue"}`, "portal.accent_color"},
		{`{"accent_color":"#12345"}`, "portal.accent_color"},
		{`{"frame_ancestors":["app.acme.example"]}`, "portal.frame_ancestors"},
		{`{"frame_ancestors":["https://app.acme.example/"]}`, "portal.frame_ancestors"},
		{`{"frame_ancestors":["https://app.acme.example?x=1"]}`, "portal.frame_ancestors"},
		{`{"frame_ancestors":["https://u@app.acme.example"]}`, "portal.frame_ancestors"},
		{`{"frame_ancestors":["ftp://app.acme.example"]}`, "portal.frame_ancestors"},
		{`{"frame_ancestors":["https://app.*.example"]}`, "portal.frame_ancestors"},
		{`{"frame_ancestors":["https://a.example","https://A.example:443"]}`, "portal.frame_ancestors"},
		{`{"frame_ancestors":[` + strings.Repeat(`"https://a.example",`, 20) + `"https://a.example"]}`, "portal.frame_ancestors"},
	} {
		code, got := e.send(http.MethodPut, "/v1/tenants/acme", e.admin, `{"name":"Acme","portal":`+c.portal+`}`)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s: %v", c.portal, got)
		require.Equal(t, c.field, got["field"], "%s: %v", c.portal, got)
		require.Contains(t, got["detail"], c.field, "%s: %v", c.portal, got)
	}
	code, got = e.send(http.MethodPut, "/v1/tenants/acme", e.admin, `{"portal":{"accent_colour":"#000000"}}`)
	require.Equal(t, http.StatusBadRequest, code, "an unknown field: %v", got)
	require.Contains(t, got["detail"], "accent_colour")

	code, got = e.send(http.MethodGet, "/v1/tenants/acme", e.read, "")
	require.Equal(t, http.StatusOK, code, "%v", got)
	require.Equal(t, want, got["portal"], "refused changes changed nothing")
	code, got = e.send(http.MethodPut, "/v1/tenants/acme", e.admin, `{"name":"Acme"}`)
	require.Equal(t, http.StatusOK, code, "%v", got)
	require.Nil(t, got["portal"], "the body replaces the portal settings")
}
