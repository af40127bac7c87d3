package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
)

// tenantKey creates, with e's global admin key, an API key of tenant with
// scope, and returns it.
func (e *apiEnv) tenantKey(tenant, name, scope string) string {
	e.t.Helper()
	code, m := e.send("POST", TenantPath(tenant, "/keys"), e.admin, `{"name":"`+name+`","scope":"`+scope+`"}`)
	require.Equal(e.t, http.StatusCreated, code, m)
	require.Equal(e.t, tenant, m["tenant"])
	return m["key"].(string)
}

// crossTenantCall is a request a tenant key makes about another tenant's
// resources, and the status it must get.
type crossTenantCall struct {
	method, path, body string
	want               int
}

// Every operation of the API document, made with tenant acme's admin key
// about tenant globex's resources (its destinations, events, dead letters,
// keys, the tenant itself): each answers 404, never 403, as for something
// that does not exist; lists show acme's own only; and nothing of
// globex's changed. The operations a key of no tenant only may make
// answer 403 (they are nobody's). The test fails when the document has an
// operation this table does not call.
func TestCrossTenantRequestsFindNothing(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(sink.Close)
	runRelay(t, e)
	for _, id := range []string{"acme", "globex"} {
		code, m := e.send("PUT", "/v1/tenants/"+id, e.admin, `{"name":"`+id+`"}`)
		require.Equal(t, http.StatusCreated, code, m)
	}
	acme := e.tenantKey("acme", "acme-admin", "admin")
	acmeRead := e.tenantKey("acme", "acme-read", "read")
	globexPub := e.tenantKey("globex", "globex-pub", "publish")
	globexAdmin := e.tenantKey("globex", "globex-admin", "admin")

	// Both have a destination "orders"; globex has "gonly" too.
	for _, d := range []struct{ key, name string }{{acme, "orders"}, {globexAdmin, "orders"}, {globexAdmin, "gonly"}} {
		code, m := e.send("POST", "/v1/destinations", d.key, `{"name":"`+d.name+`","url":"`+sink.URL+`"}`)
		require.Equal(t, http.StatusCreated, code, m)
		require.Equal(t, d.name, m["name"])
	}
	// Events: one of globex's only, and an id each publishes.
	for _, ev := range []struct{ key, body string }{
		{globexPub, `{"dest":"orders","id":"evt-globex","data":1}`},
		{globexPub, `{"dest":"orders","id":"evt-shared","data":"globex"}`},
		{acme, `{"dest":"orders","id":"evt-shared","data":"acme"}`},
	} {
		code, m := e.send("POST", "/v1/events", ev.key, ev.body)
		require.Equal(t, http.StatusAccepted, code, m)
	}
	e.waitAttemptsWith(globexAdmin, "dest=orders", 2)
	e.waitAttemptsWith(acme, "dest=orders", 1)
	// A dead letter of globex's.
	gseq := e.writeLetter(letterFor("globex=gonly", "evt-dead", 1, time.Now()))
	code, m := e.send("PUT", "/v1/event-types/order.created", e.admin, `{"description":"An order."}`)
	require.Equal(t, http.StatusCreated, code, m)

	g := "/v1/tenants/globex"
	seqPath := "/v1/dead-letters/" + strconv.FormatUint(gseq, 10)
	seqs := `{"seqs":[` + strconv.FormatUint(gseq, 10) + `]}`
	calls := map[string]crossTenantCall{
		"getOpenAPI":              {"GET", "/v1/openapi.json", "", 200},
		"getKey":                  {"GET", "/v1/key", "", 200},
		"getEgress":               {"GET", "/v1/egress", "", 200},
		"listDestinationTypes":    {"GET", "/v1/destination-types", "", 200},
		"getJWKS":                 {"GET", "/v1/jwks.json", "", 200},
		"getTenantJWKS":           {"GET", g + "/jwks.json", "", 200},
		"publishEvent":            {"POST", "/v1/events", `{"tenant":"globex","dest":"orders","data":1}`, 404},
		"publishEventBatch":       {"POST", "/v1/events:batch", `{"events":[{"tenant":"globex","dest":"orders","data":1}]}`, 404},
		"getStats":                {"GET", "/v1/stats", "", 200},
		"listDestinations":        {"GET", "/v1/destinations", "", 200},
		"createDestination":       {"POST", "/v1/destinations", `{"name":"gonly","url":"` + sink.URL + `"}`, 201},
		"getDestination":          {"GET", "/v1/destinations/gonly-g", "", 404},
		"updateDestination":       {"PATCH", "/v1/destinations/gonly-g", `{"timeout":"5s"}`, 404},
		"deleteDestination":       {"DELETE", "/v1/destinations/gonly-g?force=true", "", 404},
		"pauseDestination":        {"POST", "/v1/destinations/gonly-g/pause", `{}`, 404},
		"resumeDestination":       {"POST", "/v1/destinations/gonly-g/resume", "", 404},
		"rotateDestinationSecret": {"POST", "/v1/destinations/gonly-g/rotate-secret", `{}`, 404},
		"getDestinationSecret":    {"GET", "/v1/destinations/gonly-g/secret", "", 404},
		"testFilter":              {"POST", "/v1/filters:test", `{"filter":"data.x == 1","event":{"data":{"x":1}}}`, 200},
		"listRetrying":            {"GET", "/v1/destinations/gonly-g/retrying", "", 404},
		"skipRetrying":            {"POST", "/v1/destinations/gonly-g/retrying/evt-globex/skip", `{}`, 404},
		"listDeadLetters":         {"GET", "/v1/dead-letters", "", 200},
		"getDeadLetter":           {"GET", seqPath, "", 404},
		"getDeadLetterBody":       {"GET", seqPath + "/body", "", 404},
		"replayDeadLetters":       {"POST", "/v1/dead-letters/replay", seqs, 404},
		"purgeDeadLetters":        {"POST", "/v1/dead-letters/purge", seqs, 404},
		"listAttempts":            {"GET", "/v1/attempts?event=evt-globex", "", 200},
		"getEvent":                {"GET", "/v1/events/evt-globex", "", 404},
		"getEventBody":            {"GET", "/v1/events/evt-globex/body", "", 404},
		"listEventTypes":          {"GET", "/v1/event-types", "", 200},
		"getEventType":            {"GET", "/v1/event-types/order.created", "", 200},
		"putEventType":            {"PUT", "/v1/event-types/order.created", `{"description":"mine"}`, 403},
		"deleteEventType":         {"DELETE", "/v1/event-types/order.created", "", 403},
		"listTenants":             {"GET", "/v1/tenants", "", 200},
		"putTenant":               {"PUT", g, `{"name":"taken"}`, 404},
		"getTenant":               {"GET", g, "", 404},
		"deleteTenant":            {"DELETE", g, "", 404},
		"listTenantKeys":          {"GET", g + "/keys", "", 404},
		"createTenantKey":         {"POST", g + "/keys", `{"name":"sneaky","scope":"admin"}`, 404},
		"revokeTenantKey":         {"DELETE", g + "/keys/globex-admin", "", 404},
		"createPortalSession":     {"POST", g + "/portal-sessions", `{"capabilities":["manage_endpoints"]}`, 404},
		"endPortalSessions":       {"DELETE", g + "/portal-sessions", "", 404},
	}
	// globex's "gonly" as acme names it: acme has one too after
	// createDestination, so the 404s name one acme does not have.
	code, m = e.send("POST", "/v1/destinations", globexAdmin, `{"name":"gonly-g","url":"`+sink.URL+`"}`)
	require.Equal(t, http.StatusCreated, code, m)

	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	require.NoError(t, err)
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops = append(ops, op.OperationID)
			base, forTenant := strings.CutSuffix(op.OperationID, "ForTenant")
			c, ok := calls[base]
			require.True(t, ok, "operation %s (%s %s) has no cross-tenant call in this test", op.OperationID, method, path)
			if forTenant {
				// The same, for globex named in the path: not found.
				c = crossTenantCall{c.method, g + strings.TrimPrefix(c.path, "/v1"), c.body, http.StatusNotFound}
			}
			code, m := e.send(c.method, c.path, acme, c.body)
			require.Equal(t, c.want, code, "%s: %s %s with acme's key: %v", op.OperationID, c.method, c.path, m)
			if detail, _ := m["detail"].(string); code == http.StatusNotFound && !strings.Contains(c.path+c.body, "globex") {
				require.NotContains(t, detail, "globex", "%s: a 404 says nothing of the other tenant", op.OperationID)
			}
		}
	}
	require.Len(t, ops, len(calls)+countForTenant(ops), "every call of the table is an operation of the document")

	// Lists are acme's own.
	_, m = e.do("GET", "/v1/destinations", acmeRead, "", nil)
	require.ElementsMatch(t, []string{"orders", "gonly"}, names(m["destinations"], "name"))
	for _, d := range m["destinations"].([]any) {
		require.Equal(t, "acme", d.(map[string]any)["tenant"])
	}
	_, m = e.do("GET", "/v1/stats", acmeRead, "", nil)
	require.ElementsMatch(t, []string{"orders", "gonly"}, names(m["destinations"], "dest"))
	_, m = e.do("GET", "/v1/dead-letters", acmeRead, "", nil)
	require.Empty(t, m["dead_letters"])
	_, m = e.do("GET", "/v1/tenants", acmeRead, "", nil)
	require.Equal(t, []string{"acme"}, names(m["tenants"], "id"))
	_, m = e.do("GET", "/v1/attempts", acmeRead, "", nil)
	require.Len(t, m["attempts"], 1, "acme's one delivery: %v", m)
	// An id both published: each sees its own event (once the log's index
	// of events has it: it is written after the records).
	require.Eventually(t, func() bool {
		code, _ := e.do("GET", "/v1/events/evt-shared", acmeRead, "", nil)
		return code == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond)
	_, m = e.do("GET", "/v1/events/evt-shared", acmeRead, "", nil)
	require.Len(t, m["destinations"], 1, "%v", m)
	_, body := e.exchange("GET", "/v1/events/evt-shared/body", acmeRead, "", nil)
	require.Equal(t, `"acme"`, string(body))
	_, body = e.exchange("GET", "/v1/tenants/globex/events/evt-shared/body", e.read, "", nil)
	require.Equal(t, `"globex"`, string(body))
	_, m = e.do("GET", "/v1/key", acmeRead, "", nil)
	require.Equal(t, "acme", m["tenant"])
	// Its own tenant in the path is its own resources.
	code, m = e.do("GET", "/v1/tenants/acme/destinations/orders", acmeRead, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "acme", m["tenant"])

	// Nothing of globex's changed.
	ctx := context.Background()
	for _, name := range []string{"globex=orders", "globex=gonly", "globex=gonly-g"} {
		d, err := mustStore(t, e).Get(ctx, name)
		require.NoError(t, err, name)
		require.Equal(t, destination.StateActive, d.State(time.Now()), name)
		require.NotEqual(t, 5*time.Second, time.Duration(d.Timeout), "%s: not updated", name)
	}
	code, m = e.do("GET", g+strings.TrimPrefix(seqPath, "/v1"), e.read, "", nil)
	require.Equal(t, http.StatusOK, code, "globex's dead letter is still there: %v", m)
	require.Equal(t, "gonly", m["dest"])
	code, m = e.do("GET", "/v1/tenants/globex", globexAdmin, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "globex", m["name"])
	code, m = e.do("GET", "/v1/tenants/globex/keys", e.admin, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.ElementsMatch(t, []string{"globex-pub", "globex-admin"}, names(m["keys"], "name"))
	code, m = e.do("GET", "/v1/event-types/order.created", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "An order.", m["description"])
}

// countForTenant counts the operations for a tenant named in the path.
func countForTenant(ops []string) int {
	n := 0
	for _, op := range ops {
		if strings.HasSuffix(op, "ForTenant") {
			n++
		}
	}
	return n
}

// names are the field of each object of list, sorted.
func names(list any, field string) []string {
	var out []string
	for _, v := range list.([]any) {
		out = append(out, v.(map[string]any)[field].(string))
	}
	slices.Sort(out)
	return out
}

// waitAttemptsWith is waitAttempts with key.
func (e *apiEnv) waitAttemptsWith(key, query string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, m := e.do("GET", "/v1/attempts?"+query, key, "", nil)
		require.Equal(e.t, 200, code, m)
		if len(m["attempts"].([]any)) >= n {
			return
		}
		require.False(e.t, time.Now().After(deadline), "GET /v1/attempts?%s: fewer than %d records", query, n)
		time.Sleep(20 * time.Millisecond)
	}
}

// Deleting a tenant: refused while its destinations have undelivered
// events, unless forced; then its keys stop working at once, its
// destinations are gone (another tenant's of the same name stays), and
// publishing for it is refused as for a tenant that never was.
func TestDeletingATenantRemovesItsKeysAndDestinations(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	runRelay(t, e)
	for _, id := range []string{"acme", "globex"} {
		code, m := e.send("PUT", "/v1/tenants/"+id, e.admin, `{}`)
		require.Equal(t, http.StatusCreated, code, m)
		code, m = e.send("POST", TenantPath(id, "/destinations"), e.admin, `{"name":"orders","url":"https://`+id+`.example.com/hooks"}`)
		require.Equal(t, http.StatusCreated, code, m)
		require.Equal(t, id, m["tenant"])
	}
	key := e.tenantKey("acme", "acme-pub", "publish")
	code, m := e.send("POST", "/v1/destinations/orders/pause", e.admin, `{}`)
	require.Equal(t, http.StatusNotFound, code, "the global key's /v1/destinations are of no tenant: %v", m)
	code, m = e.send("POST", TenantPath("acme", "/destinations/orders/pause"), e.admin, `{}`)
	require.Equal(t, http.StatusOK, code, m)
	for range 2 {
		code, m = e.send("POST", "/v1/events", key, `{"dest":"orders","data":{}}`)
		require.Equal(t, http.StatusAccepted, code, m)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, m = e.do("DELETE", "/v1/tenants/acme", e.admin, "", nil)
		if code == http.StatusConflict && strings.Contains(m["detail"].(string), "orders: 2") {
			break
		}
		require.False(t, time.Now().After(deadline), "never refused for its 2 undelivered events: %d %v", code, m)
		time.Sleep(20 * time.Millisecond)
	}
	require.Contains(t, m["detail"], "force=true")
	code, m = e.do("DELETE", "/v1/tenants/acme?force=true", e.admin, "", nil)
	require.Equal(t, http.StatusNoContent, code, m)

	code, m = e.send("POST", "/v1/events", key, `{"dest":"orders","data":{}}`)
	require.Equal(t, http.StatusUnauthorized, code, "its key was revoked: %v", m)
	code, m = e.do("GET", "/v1/tenants/acme", e.admin, "", nil)
	require.Equal(t, http.StatusNotFound, code, m)
	code, m = e.send("POST", "/v1/events", e.admin, `{"tenant":"acme","dest":"orders","data":{}}`)
	require.Equal(t, http.StatusNotFound, code, m)
	require.Equal(t, "tenant", m["field"])
	ds, err := mustStore(t, e).List(context.Background())
	require.NoError(t, err)
	var left []string
	for _, d := range ds {
		left = append(left, d.Name)
	}
	require.Equal(t, []string{"globex=orders"}, left)
	// The id is free again: a new tenant acme starts empty.
	code, m = e.send("PUT", "/v1/tenants/acme", e.admin, `{}`)
	require.Equal(t, http.StatusCreated, code, m)
	code, m = e.do("GET", TenantPath("acme", "/destinations"), e.admin, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Empty(t, m["destinations"])
}

// A tenant's defaults are what its new destinations take where no setting
// is given; its limits bound its destinations and its publish rate over
// HTTP (429 with Retry-After, nothing published); only a key of no tenant
// sets them.
func TestTenantDefaultsAndLimits(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	code, m := e.send("PUT", "/v1/tenants/acme", e.admin, `{"defaults":{"max_attempts":3,"timeout":"5s","concurrency":4,"backoff_base":"2s"},"limits":{"max_destinations":2,"publish_rate":5}}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, map[string]any{"max_attempts": float64(3), "timeout": "5s", "concurrency": float64(4), "backoff_base": "2s"}, m["defaults"])
	code, m = e.send("PUT", "/v1/tenants/globex", e.admin, `{}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Nil(t, m["limits"], "none given, none shown")
	key := e.tenantKey("acme", "acme-admin", "admin")
	code, m = e.send("PUT", "/v1/tenants/acme", key, `{"limits":{"publish_rate":1000000}}`)
	require.Equal(t, http.StatusForbidden, code, "a tenant cannot raise its own limits: %v", m)

	for _, c := range []struct{ body, field string }{
		{`{"defaults":{"timeout":"1h"}}`, "defaults.timeout"},
		{`{"defaults":{"concurrency":-1}}`, "defaults.concurrency"},
		{`{"defaults":{"backoff_base":"1m","backoff_max":"1s"}}`, "defaults.backoff_max"},
		{`{"limits":{"publish_rate":-1}}`, "limits.publish_rate"},
		{`{"limits":{"max_in_flight":2000000}}`, "limits.max_in_flight"},
	} {
		code, m = e.send("PUT", "/v1/tenants/acme", e.admin, c.body)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s: %v", c.body, m)
		require.Equal(t, c.field, m["field"], "%s: %v", c.body, m)
	}
	code, m = e.do("GET", "/v1/tenants/acme", e.read, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"max_destinations": float64(2), "publish_rate": float64(5)}, m["limits"], "refused changes changed nothing")

	code, m = e.send("POST", "/v1/destinations", key, `{"name":"a","url":"https://a.example.com/h"}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, "5s", m["timeout"])
	require.Equal(t, float64(3), m["max_attempts"])
	require.Equal(t, float64(4), m["concurrency"])
	require.Equal(t, "2s", m["backoff_base"])
	code, m = e.send("POST", "/v1/destinations", key, `{"name":"b","url":"https://b.example.com/h","timeout":"7s"}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, "7s", m["timeout"], "a setting given wins over the tenant's default")
	require.Equal(t, float64(3), m["max_attempts"])
	code, m = e.send("POST", "/v1/destinations", key, `{"name":"c","url":"https://c.example.com/h"}`)
	require.Equal(t, http.StatusConflict, code, m)
	require.Contains(t, m["detail"], "limits.max_destinations 2")
	code, m = e.send("POST", TenantPath("globex", "/destinations"), e.admin, `{"name":"a","url":"https://a.example.com/h"}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, "30s", m["timeout"], "another tenant: relay's defaults")

	// 5 a second, a burst of 5: the sixth at once is refused, nothing
	// stored; globex is not limited by acme's rate.
	deadline := time.Now().Add(10 * time.Second)
	for e.policies.Limits("acme").PublishRate != 5 {
		require.False(t, time.Now().After(deadline), "the server never learned acme's limits")
		time.Sleep(10 * time.Millisecond)
	}
	before := e.lastSeq()
	for i := range 5 {
		code, m = e.send("POST", "/v1/events", key, `{"dest":"a","data":`+strconv.Itoa(i)+`}`)
		require.Equal(t, http.StatusAccepted, code, m)
	}
	resp, body := e.exchange("POST", "/v1/events", key, "application/json", []byte(`{"dest":"a","data":6}`))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, retry, 1)
	require.Contains(t, string(body), "at most 5 events per second")
	code, m = e.send("POST", "/v1/events:batch", key, `{"events":[`+strings.Repeat(`{"dest":"a","data":1},`, 5)+`{"dest":"a","data":1}]}`)
	require.Equal(t, http.StatusTooManyRequests, code, m)
	require.Contains(t, m["detail"], "smaller batches")
	require.Equal(t, before+5, e.lastSeq(), "the refused events were not stored")
	for range 10 {
		code, m = e.send("POST", "/v1/events", e.admin, `{"tenant":"globex","dest":"a","data":1}`)
		require.Equal(t, http.StatusAccepted, code, m)
	}
}

// A tenant's max_in_flight bounds its attempts under way across its
// destinations: three destinations of a tenant limited to 2, their
// receiver holding each request, never see more than 2 at once; every
// event is delivered at its first attempt (waiting for a slot uses none);
// another tenant's destination is not held back by it.
func TestTenantMaxInFlight(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	var mu sync.Mutex
	inFlight, most := map[string]int{}, map[string]int{}
	release := make(chan struct{})
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.URL.Query().Get("t")
		mu.Lock()
		inFlight[tenant]++
		most[tenant] = max(most[tenant], inFlight[tenant])
		mu.Unlock()
		if tenant == "acme" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		mu.Lock()
		inFlight[tenant]--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)
	t.Cleanup(func() { close(release) })
	code, m := e.send("PUT", "/v1/tenants/acme", e.admin, `{"limits":{"max_in_flight":2}}`)
	require.Equal(t, http.StatusCreated, code, m)
	code, m = e.send("PUT", "/v1/tenants/globex", e.admin, `{}`)
	require.Equal(t, http.StatusCreated, code, m)
	deadline := time.Now().Add(10 * time.Second)
	for e.policies.Limits("acme").MaxInFlight != 2 {
		require.False(t, time.Now().After(deadline), "the limit never loaded")
		time.Sleep(10 * time.Millisecond)
	}
	for _, name := range []string{"a", "b", "c"} {
		code, m = e.send("POST", TenantPath("acme", "/destinations"), e.admin, `{"name":"`+name+`","url":"`+sink.URL+`/?t=acme","no_secret":true}`)
		require.Equal(t, http.StatusCreated, code, m)
	}
	code, m = e.send("POST", TenantPath("globex", "/destinations"), e.admin, `{"name":"a","url":"`+sink.URL+`/?t=globex","no_secret":true}`)
	require.Equal(t, http.StatusCreated, code, m)
	runRelay(t, e)
	for i := range 9 {
		code, m = e.send("POST", TenantPath("acme", "/events"), e.admin, `{"dest":"`+string(rune('a'+i%3))+`","id":"evt-`+strconv.Itoa(i)+`","data":1}`)
		require.Equal(t, http.StatusAccepted, code, m)
	}
	// acme's 2 slots are taken and held; globex delivers meanwhile.
	deadline = time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		held := inFlight["acme"]
		mu.Unlock()
		if held == 2 {
			break
		}
		require.False(t, time.Now().After(deadline), "acme never had 2 attempts under way")
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 5 {
		code, m = e.send("POST", TenantPath("globex", "/events"), e.admin, `{"dest":"a","id":"g-`+strconv.Itoa(i)+`","data":1}`)
		require.Equal(t, http.StatusAccepted, code, m)
	}
	waitTenantAttempts(t, e, "globex", 5)
	// Let acme's through, one held request at a time.
	go func() {
		for range 9 {
			select {
			case release <- struct{}{}:
			case <-time.After(time.Minute):
				return
			}
		}
	}()
	recs := waitTenantAttempts(t, e, "acme", 9)
	for _, r := range recs {
		rec := r.(map[string]any)
		require.Equal(t, float64(1), rec["attempt"], "delivered at its first attempt: %v", rec)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, most["acme"], "at most 2 of acme's attempts at once")
}

// waitTenantAttempts waits until tenant's delivery log has n records, and
// returns them.
func waitTenantAttempts(t *testing.T, e *apiEnv, tenant string, n int) []any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, m := e.do("GET", TenantPath(tenant, "/attempts"), e.read, "", nil)
		require.Equal(t, http.StatusOK, code, m)
		if got := m["attempts"].([]any); len(got) >= n {
			return got
		}
		require.False(t, time.Now().After(deadline), "%s: fewer than %d attempts logged", tenant, n)
		time.Sleep(20 * time.Millisecond)
	}
}

// Operator events about a tenant's destination name the tenant and the
// destination within it, and reach the operator's destinations subscribed
// to relay.> and the tenant's own, not another tenant's.
func TestOperatorEventsPerTenant(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	var mu sync.Mutex
	got := map[string][]map[string]any{} // by receiver
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		got[r.URL.Query().Get("r")] = append(got[r.URL.Query().Get("r")], body)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)
	for _, id := range []string{"acme", "globex"} {
		code, m := e.send("PUT", "/v1/tenants/"+id, e.admin, `{}`)
		require.Equal(t, http.StatusCreated, code, m)
		code, m = e.send("POST", TenantPath(id, "/destinations"), e.admin, `{"name":"ops","url":"`+sink.URL+`/?r=`+id+`","types":["relay.>"],"no_secret":true}`)
		require.Equal(t, http.StatusCreated, code, m)
		code, m = e.send("POST", TenantPath(id, "/destinations"), e.admin, `{"name":"orders","url":"https://`+id+`.example.com/h"}`)
		require.Equal(t, http.StatusCreated, code, m)
	}
	code, m := e.send("POST", "/v1/destinations", e.admin, `{"name":"ops","url":"`+sink.URL+`/?r=operator","types":["relay.>"],"no_secret":true}`)
	require.Equal(t, http.StatusCreated, code, m)
	runRelay(t, e)
	code, m = e.send("POST", TenantPath("acme", "/destinations/orders/pause"), e.admin, `{}`)
	require.Equal(t, http.StatusOK, code, m)

	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got["acme"]) + len(got["operator"])
		mu.Unlock()
		if n >= 2 {
			break
		}
		require.False(t, time.Now().After(deadline), "the operator event never reached both")
		time.Sleep(20 * time.Millisecond)
	}
	// globex's receiver: nothing, once acme's and the operator's came
	// (the three are routed in the order they were published).
	code, m = e.send("POST", TenantPath("globex", "/destinations/orders/pause"), e.admin, `{}`)
	require.Equal(t, http.StatusOK, code, m)
	for {
		mu.Lock()
		done := len(got["operator"]) >= 2 && len(got["globex"]) >= 1
		mu.Unlock()
		if done {
			break
		}
		require.False(t, time.Now().After(deadline), "globex's operator event never reached both")
		time.Sleep(20 * time.Millisecond)
	}
	// Everything acme's receiver could get has been routed by now: the
	// router routes in order, and globex's came after.
	waitTenantAttempts(t, e, "acme", 1)
	mu.Lock()
	defer mu.Unlock()
	for _, r := range []string{"acme", "operator"} {
		ev := got[r][0]
		require.Equal(t, "relay.destination.disabled", ev["type"])
		require.Equal(t, "acme", ev["tenant"], r)
		require.Equal(t, "orders", ev["dest"], r)
		require.Equal(t, "operator", ev["reason"])
	}
	require.Len(t, got["acme"], 1, "acme's receiver gets its own only")
	require.Len(t, got["globex"], 1, "globex's receiver gets its own only")
	require.Equal(t, "globex", got["globex"][0]["tenant"])
	require.Len(t, got["operator"], 2, "the operator's gets both")
}
