package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
	"github.com/relaydev/relay/tenant"
)

// apiEnv is a real NATS server with relay's streams, the API over it, and
// keys of each scope.
type apiEnv struct {
	t       *testing.T
	srv     streamtest.Server
	url     string
	router  routers.Router
	publish string
	read    string
	admin   string
	// logs is what the server logged.
	logs *lockedWriter
	// policies are the tenants' limits the server enforces.
	policies *tenant.Policies
	// portal is the server's portal session store.
	portal *portal.Store
}

func startAPI(t *testing.T) *apiEnv {
	t.Helper()
	return startTracedAPI(t, nil)
}

// startTracedAPI is startAPI with a producer that traces with tp.
func startTracedAPI(t *testing.T, tp trace.TracerProvider) *apiEnv {
	t.Helper()
	return startAPIWith(t, tp, nil)
}

// startAPIWith is startTracedAPI with the server's Config changed by
// change (when not nil).
func startAPIWith(t *testing.T, tp trace.TracerProvider, change func(*Config)) *apiEnv {
	t.Helper()
	srv := streamtest.Start(t)
	ctx := context.Background()
	keys, err := OpenKeys(ctx, srv.JS)
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, srv.JS)
	require.NoError(t, err)
	prod.TraceWith(tp)
	dests, err := destination.NewStore(ctx, srv.JS)
	require.NoError(t, err)
	letters, err := dlq.Open(ctx, srv.JS)
	require.NoError(t, err)
	tenants, err := tenant.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	types, err := eventtype.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	catalog, err := eventtype.WatchCatalog(ctx, srv.JS, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(catalog.Stop)
	policies, err := tenant.WatchPolicies(ctx, srv.JS, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(policies.Stop)
	sessions, err := portal.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	logs := &lockedWriter{w: &bytes.Buffer{}, mu: &sync.Mutex{}}
	cfg := Config{JS: srv.JS, Keys: keys, Producer: prod, Dests: dests, DeadLetters: letters, Tenants: tenants, EventTypes: types, Catalog: catalog, Policies: policies, Portal: sessions, MaxBody: 64 << 10, MaxBatchBody: 256 << 10,
		BodyTimeout: testBodyTimeout,
		Logger:      slog.New(slog.NewTextHandler(logs, nil))}
	if change != nil {
		change(&cfg)
	}
	h := NewServer(cfg)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context), "the OpenAPI document is valid")
	// The document's server is "/": routes are found relative to this one.
	doc.Servers = openapi3.Servers{{URL: hs.URL}}
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)

	e := &apiEnv{t: t, srv: srv, url: hs.URL, router: router, logs: logs, policies: policies, portal: sessions}
	e.publish, _, err = keys.Create(ctx, "pub", ScopePublish)
	require.NoError(t, err)
	e.read, _, err = keys.Create(ctx, "reader", ScopeRead)
	require.NoError(t, err)
	e.admin, _, err = keys.Create(ctx, "ops", ScopeAdmin)
	require.NoError(t, err)
	return e
}

// do sends a request and checks it, and the response, against the OpenAPI
// document: a handler that drifts from it fails here.
func (e *apiEnv) do(method, path, key, contentType string, body []byte, hdr ...string) (int, map[string]any) {
	e.t.Helper()
	resp, got := e.exchange(method, path, key, contentType, body, hdr...)
	var m map[string]any
	if len(got) > 0 && path != "/v1/openapi.json" {
		require.NoError(e.t, json.Unmarshal(got, &m), "%s", got)
	}
	if resp.StatusCode >= 400 {
		require.Equal(e.t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.NotEmpty(e.t, m["detail"])
	}
	return resp.StatusCode, m
}

// exchange is do for an answer that need not be JSON (a body's bytes): the
// response, its body read, checked against the OpenAPI document.
func (e *apiEnv) exchange(method, path, key, contentType string, body []byte, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	require.NoError(e.t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)

	route, params, err := e.router.FindRoute(req)
	if err == nil {
		exercised(route.Operation.OperationID)
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, ExcludeRequestBody: true}}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		out.SetBodyBytes(got)
		require.NoError(e.t, openapi3filter.ValidateResponse(context.Background(), out), "%s %s answered %d %s, not as the document says", method, path, resp.StatusCode, got)
	} else {
		require.Contains(e.t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.StatusCode,
			"%s %s is in no operation of the document (%v), yet answered %d %s", method, path, err, resp.StatusCode, got)
	}
	return resp, got
}

func TestPublishOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	_, err := mustStore(t, e).Add(ctx, destination.Destination{Name: "orders", URL: "https://example.com/hooks"})
	require.NoError(t, err)

	code, m := e.do("POST", "/v1/events", e.publish, "application/json", []byte(`{"dest":"orders","key":"c1","data":{"amount":5}}`), "Idempotency-Key", "evt-1")
	require.Equal(t, http.StatusAccepted, code, m)
	require.Equal(t, "evt-1", m["id"])
	require.Equal(t, false, m["duplicate"])
	seq := uint64(m["seq"].(float64))

	// Stored as the event, with its key and id.
	s, err := e.srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	raw, err := s.GetMsg(ctx, seq)
	require.NoError(t, err)
	require.JSONEq(t, `{"amount":5}`, string(raw.Data))
	require.Equal(t, "evt-1", raw.Header.Get(stream.HdrEventID), "the id as given; the dedup id is scoped")
	require.NotEqual(t, "evt-1", raw.Header.Get(stream.HdrMsgID))
	require.Equal(t, "c1", raw.Header.Get(stream.HdrKey))

	// The same Idempotency-Key again, by the same API key: nothing new
	// stored.
	code, m = e.do("POST", "/v1/events", e.publish, "application/json", []byte(`{"dest":"orders","key":"c1","data":{"amount":5}}`), "Idempotency-Key", "evt-1")
	require.Equal(t, http.StatusAccepted, code, m)
	require.Equal(t, true, m["duplicate"])
	require.Equal(t, float64(seq), m["seq"])

	// By type, no subscriber: stored (counted by the router, not an error).
	code, m = e.do("POST", "/v1/events", e.publish, "application/json", []byte(`{"type":"order.created","data":"text is JSON too"}`))
	require.Equal(t, http.StatusAccepted, code, m)
}

func TestPublishOverHTTPRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	_, err := mustStore(t, e).Add(context.Background(), destination.Destination{Name: "orders", URL: "https://example.com/hooks"})
	require.NoError(t, err)
	big := `{"dest":"orders","data":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, tc := range []struct {
		name, key, ct, body string
		hdr                 []string
		status              int
		field, detail       string
	}{
		{"no key", "", "application/json", `{"dest":"orders","data":1}`, nil, 401, "", "an API key is required"},
		{"wrong key", e.publish + "x", "application/json", `{"dest":"orders","data":1}`, nil, 401, "", "invalid API key"},
		{"read key", e.read, "application/json", `{"dest":"orders","data":1}`, nil, 403, "", `the key "reader" has scope read; this needs publish or admin`},
		{"not JSON", e.publish, "text/plain", `hello`, nil, 415, "", "send the body as application/json"},
		{"bad JSON", e.publish, "application/json", `{"dest":`, nil, 400, "", "the body is not a valid request: it ends before its JSON value does"},
		{"syntax", e.publish, "application/json", `{"dest" "orders"}`, nil, 400, "", "after object key (at byte 9)"},
		{"empty", e.publish, "application/json", ` `, nil, 400, "", "the body is empty: send a JSON object"},
		{"unknown field", e.publish, "application/json", `{"dest":"orders","data":1,"destination":"x"}`, nil, 400, "destination", `unknown field "destination"`},
		{"wrong type", e.publish, "application/json", `{"dest":7,"data":1}`, nil, 400, "dest", "dest must be a string, not a JSON number"},
		{"two values", e.publish, "application/json", `{"dest":"orders","data":1} {}`, nil, 400, "", "more after its JSON value, at byte 28"},
		{"stray brace", e.publish, "application/json", `{"dest":"orders","data":1}}`, nil, 400, "", "more after its JSON value, at byte 27"},
		{"stray bracket", e.publish, "application/json", "{\"dest\":\"orders\",\"data\":1}\n]", nil, 400, "", "more after its JSON value, at byte 28"},
		{"no data", e.publish, "application/json", `{"dest":"orders"}`, nil, 422, "data", "data is required"},
		{"neither", e.publish, "application/json", `{"data":1}`, nil, 422, "dest", "give dest"},
		{"both", e.publish, "application/json", `{"dest":"orders","type":"a.b","data":1}`, nil, 422, "type", "not both"},
		{"bad dest", e.publish, "application/json", `{"dest":"Orders!","data":1}`, nil, 422, "dest", ""},
		{"bad type", e.publish, "application/json", `{"type":"relay.x","data":1}`, nil, 422, "type", ""},
		{"ids differ", e.publish, "application/json", `{"dest":"orders","id":"a","data":1}`, []string{"Idempotency-Key", "b"}, 422, "id", "differ"},
		{"unknown dest", e.publish, "application/json", `{"dest":"nobody","data":1}`, nil, 404, "dest", "unknown destination"},
		{"too large", e.publish, "application/json", big, nil, 413, "", "larger than 65536 bytes"},
	} {
		code, m := e.do("POST", "/v1/events", tc.key, tc.ct, []byte(tc.body), tc.hdr...)
		require.Equal(t, tc.status, code, "%s: %v", tc.name, m)
		require.Equal(t, float64(tc.status), m["status"], tc.name)
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], tc.name)
		}
		require.Contains(t, m["detail"], tc.detail, tc.name)
	}
	code, m := e.do("GET", "/v1/nothing", e.admin, "", nil)
	require.Equal(t, 404, code)
	require.Contains(t, m["detail"], "no such resource: GET /v1/nothing")
	code, _ = e.do("DELETE", "/v1/events", e.admin, "", nil)
	require.Equal(t, 405, code, "a known path, another method")
}

// testBodyTimeout is the test server's Config.BodyTimeout.
const testBodyTimeout = 3 * time.Second

// TestStalledBodyGets408: a client that announces a body and stops
// sending it is answered 408 once BodyTimeout has passed, and the
// connection closed; nothing is published.
func TestStalledBodyGets408(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	_, err := mustStore(t, e).Add(context.Background(), destination.Destination{Name: "orders", URL: "https://example.com/hooks"})
	require.NoError(t, err)
	u, err := url.Parse(e.url)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	// 200 KiB announced (under MaxBatchBody), 20 bytes sent.
	_, err = fmt.Fprintf(conn, "POST /v1/events:batch HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"events\":[{\"dest\":", e.publish, 200<<10)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(testBodyTimeout+30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "an answer before the test's own deadline")
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	require.GreaterOrEqual(t, time.Since(start), testBodyTimeout-time.Second, "not before BodyTimeout")
	var p map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	require.Contains(t, p["detail"], "the body did not arrive within 3s (19 bytes came)")
}

func TestStatsOverHTTPAndTheDocument(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	_, err := mustStore(t, e).Add(context.Background(), destination.Destination{Name: "orders", URL: "https://example.com/hooks"})
	require.NoError(t, err)
	code, m := e.do("GET", "/v1/stats", e.read, "", nil)
	require.Equal(t, 200, code, m)
	ds := m["destinations"].([]any)
	require.Len(t, ds, 1)
	require.Equal(t, "orders", ds[0].(map[string]any)["dest"])
	code, _ = e.do("GET", "/v1/stats", e.publish, "", nil)
	require.Equal(t, 403, code, "publish may only publish")

	// The document is served as kept in the repository, without a key.
	code, _ = e.do("GET", "/v1/openapi.json", "", "", nil)
	require.Equal(t, 200, code)
	resp, err := http.Get(e.url + "/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, OpenAPI, got)
}

// TestFailedKeysAreLimitedPerAddress: wrong keys from one address get 429
// beyond a burst; valid keys from it still get through.
func TestFailedKeysAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	throttled := 0
	for range 30 {
		code, _ := e.do("GET", "/v1/stats", "relay_0000000000000000_nope", "", nil)
		if code == 429 {
			throttled++
		} else {
			require.Equal(t, 401, code)
		}
	}
	require.Positive(t, throttled, "after the burst of failed attempts, 429")
	// The same address (a proxy's, say) with a valid key is not locked out.
	code, m := e.do("GET", "/v1/stats", e.read, "", nil)
	require.Equal(t, 200, code, "%v", m)
	code, _ = e.do("GET", "/v1/stats", "", "", nil)
	require.Equal(t, 429, code, "no key, still over the address's budget")
}

func mustStore(t *testing.T, e *apiEnv) *destination.Store {
	t.Helper()
	st, err := destination.NewStore(context.Background(), e.srv.JS)
	require.NoError(t, err)
	return st
}

// A revoked key, or a key whose secret is wrong, is refused (401) and
// changes nothing; the log names the key whose id was given, never the key.
func TestRevokedAndWrongKeysChangeNothing(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	keys, err := OpenKeys(ctx, e.srv.JS)
	require.NoError(t, err)
	doomed, _, err := keys.Create(ctx, "doomed", ScopeAdmin)
	require.NoError(t, err)
	_, err = keys.Revoke(ctx, "doomed")
	require.NoError(t, err)
	body := []byte(`{"name":"sneaky","url":"https://example.com/x","no_secret":true}`)
	code, _ := e.do("POST", "/v1/destinations", doomed, "application/json", body)
	require.Equal(t, 401, code, "a revoked key")
	wrong := e.admin[:len(e.admin)-4] + "AAAA"
	code, _ = e.do("POST", "/v1/destinations", wrong, "application/json", body)
	require.Equal(t, 401, code, "the right id, a wrong secret")
	_, err = mustStore(t, e).Get(ctx, "sneaky")
	require.ErrorIs(t, err, destination.ErrNotFound, "nothing was created")
	out := e.logs.String()
	require.Contains(t, out, "key=ops", "the key whose secret was wrong is named")
	require.NotContains(t, out, e.admin[len("relay_0123456789abcdef_"):], "never the key")
	require.NotContains(t, out, "AAAA")
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestEgressAddresses(t *testing.T) {
	t.Parallel()
	e := startAPIWith(t, nil, func(c *Config) { c.EgressIPs = []string{"203.0.113.7", "198.51.100.0/28"} })
	for _, key := range []string{e.publish, e.read, e.admin} {
		code, m := e.do("GET", "/v1/egress", key, "", nil)
		require.Equal(t, http.StatusOK, code, m)
		require.Equal(t, []any{"203.0.113.7", "198.51.100.0/28"}, m["addresses"], "every key reads them")
	}
	code, _ := e.do("GET", "/v1/egress", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, code)

	none := startAPI(t)
	code, m := none.do("GET", "/v1/egress", none.read, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []any{}, m["addresses"], "none declared: an empty list, not null")
}
