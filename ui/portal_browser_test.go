package ui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/api"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream/streamtest"
	"github.com/relaydev/relay/tenant"
	"github.com/relaydev/relay/ui"
)

// portalEnv is a real NATS server, a relay delivering to a sink, the HTTP
// API and the customer portal on a free port, two tenants (acme and
// globex, each with a portal setting of its own) and an event type.
type portalEnv struct {
	t       *testing.T
	url     string
	admin   string
	sink    *sink
	st      *destination.Store
	prod    *publish.Producer
	tenants *tenant.Store
	clock   *testClock
}

// testClock is the portal sessions' clock, which a test moves on.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

type portalOptions struct {
	// tls serves the portal over TLS.
	tls bool
	// frameAncestors are relay run's --portal-frame-ancestor.
	frameAncestors []string
	// acme are acme's portal settings.
	acme tenant.Portal
}

func startPortal(t *testing.T, o portalOptions) *portalEnv {
	t.Helper()
	srv := streamtest.Start(t)
	ctx := context.Background()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	st, err := destination.NewStore(ctx, srv.JS, destination.WithSecretKey(secret))
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, srv.JS)
	require.NoError(t, err)
	keys, err := api.OpenKeys(ctx, srv.JS)
	require.NoError(t, err)
	letters, err := dlq.Open(ctx, srv.JS)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tenants, err := tenant.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	types, err := eventtype.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	clock := &testClock{}
	sessions, err := portal.Open(ctx, srv.JS, clock.Now)
	require.NoError(t, err)
	// The replicas' address policy: loopback (the sink) and nothing else
	// that is not public.
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	require.NoError(t, egress.AgreePolicy(ctx, srv.JS, egress.Policy{Allow: allow}))
	apiSrv := api.NewServer(api.Config{JS: srv.JS, Keys: keys, Producer: prod, Dests: st, DeadLetters: letters, Tenants: tenants, EventTypes: types, Portal: sessions,
		EgressIPs: []string{"203.0.113.7", "198.51.100.0/28"}, Logger: quiet})
	customers, err := ui.NewPortal(ctx, ui.PortalConfig{API: checkedAPI(t, apiSrv), JS: srv.JS, Sessions: sessions, Tenants: tenants,
		FrameAncestors: o.frameAncestors, Secure: o.tls, Logger: quiet})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/portal/", customers)
	mux.Handle("/", apiSrv)
	var hs *httptest.Server
	if o.tls {
		hs = httptest.NewTLSServer(mux)
	} else {
		hs = httptest.NewServer(mux)
	}
	t.Cleanup(hs.Close)

	s := &sink{delivered: map[string]int{}, at: map[string]time.Time{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		answer := s.answer
		s.mu.Unlock()
		status := 200
		if answer != nil {
			status = answer(r)
		}
		if status >= 200 && status < 300 {
			s.mu.Lock()
			s.delivered[r.Header.Get("webhook-id")]++
			s.at[r.Header.Get("webhook-id")] = time.Now()
			s.mu.Unlock()
		}
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, "answered %d", status)
	}))
	t.Cleanup(s.Close)

	rctx, cancel := context.WithCancel(ctx)
	r, err := relay.New(rctx, relay.Config{JS: srv.JS, Logger: quiet, SecretKey: secret,
		HTTPClient: egress.NewClient(egress.Options{Guard: egress.Guard{Allow: allow}})})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	e := &portalEnv{t: t, url: hs.URL, sink: s, st: st, prod: prod, tenants: tenants, clock: clock}
	e.admin, _, err = keys.Create(ctx, "ops", api.ScopeAdmin)
	require.NoError(t, err)
	// acme's endpoints try once: a failure is a dead letter at once.
	_, _, err = tenants.Put(ctx, tenant.Tenant{ID: "acme", Portal: o.acme, Defaults: tenant.Defaults{MaxAttempts: 1}})
	require.NoError(t, err)
	_, _, err = tenants.Put(ctx, tenant.Tenant{ID: "globex"})
	require.NoError(t, err)
	_, _, err = types.Put(ctx, eventtype.EventType{Type: "order.created", Description: "An order was placed.",
		Example: json.RawMessage(`{"order": 1042, "total": 120, "region": "eu"}`)})
	require.NoError(t, err)
	return e
}

// call is an API call with the operator's key.
func (e *portalEnv) call(method, path, body string) map[string]any {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+e.admin)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := e.client().Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	require.Less(e.t, res.StatusCode, 300, "%s %s: %v", method, path, m)
	return m
}

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

func (e *portalEnv) client() *http.Client {
	if strings.HasPrefix(e.url, "https:") {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	}
	return http.DefaultClient
}

// link mints a portal link of tenant id with capabilities caps.
func (e *portalEnv) link(id string, caps ...string) string {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"capabilities": append([]string{}, caps...)})
	m := e.call("POST", "/v1/tenants/"+id+"/portal-sessions", string(b))
	return m["url"].(string)
}

// signInPortal opens link and waits for the endpoints page.
func (p *page) signInPortal(link string) {
	p.t.Helper()
	p.do(chromedp.Navigate(link))
	p.waitFor(`location.pathname === "/portal/endpoints" || !document.querySelector("#signin-error").hidden`)
	require.Equal(p.t, "/portal/endpoints", p.eval(`location.pathname`), "signed in: %s", p.eval(`document.body.innerText`))
}

func (p *page) eval(expr string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`String(`+expr+`)`))
	require.NoError(p.t, err, expr)
	return s
}

// fetchStatus is the status of a request the page makes (same origin,
// with its cookie), with the page's CSRF token when post.
func (p *page) fetchStatus(method, path string) int {
	p.t.Helper()
	status, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`(async () => {
		const h = document.body.getAttribute("hx-headers");
		const headers = h ? JSON.parse(h) : {};
		const r = await fetch(`+jsString(path)+`, {method: `+jsString(method)+`, headers});
		return r.status;
	})()`, chromedp.EvalAwaitPromise))
	require.NoError(p.t, err)
	return status
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		require.False(t, time.Now().After(deadline), "%s: not after 30s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPortalCustomerJourney: a tenant's customer signs in by link, adds an
// endpoint (a private address refused, with why), tries a filter on the
// catalog's example, sends a test event and sees its attempt, reveals and
// rotates the secret, and replays a failed event, which is then delivered.
func TestPortalCustomerJourney(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{acme: tenant.Portal{ProductName: "Acme Cloud", AccentColor: "#7b1fa2"}})
	link := e.link("acme", "manage_endpoints", "view_secret", "rotate_secret", "replay")
	require.Contains(t, link, "/portal/signin/acme#token=rpl_")
	p := openBrowser(t)
	p.signInPortal(link)
	require.Empty(t, p.eval(`location.hash`), "the token is gone from the address bar")
	require.Equal(t, "Acme Cloud", p.text("#product"))
	require.Equal(t, "rgb(123, 31, 162)", p.eval(`getComputedStyle(document.querySelector("#add")).backgroundColor`), "the tenant's accent colour")
	p.do(chromedp.Navigate(link))
	p.waitFor(`!document.querySelector("#signin-error").hidden`)
	require.Contains(t, p.text("#signin-error"), "expired or was already used", "a link is used once")
	p.do(chromedp.Navigate(e.url + "/portal/endpoints"))
	p.waitFor(`document.querySelector("#add-endpoint") !== null`)
	require.Equal(t, "Webhooks come from these addresses, for your firewall's allowlist: 203.0.113.7, 198.51.100.0/28.", p.text("#egress"))

	// A private address: refused, and explained.
	p.do(chromedp.SetValue(chromedp.ID("name"), "orders"), chromedp.SetValue(chromedp.ID("url"), "http://10.1.2.3/hooks"),
		chromedp.Click(chromedp.ID("add")))
	p.waitFor(`document.querySelector("#add-error") !== null`)
	require.Contains(t, p.text("#add-error"), "10.1.2.3")
	require.Contains(t, p.text("#add-error"), "public internet addresses only")
	require.NotContains(t, p.text("#add-error"), "--allow-net", "the operator's remedy is not the customer's")

	// The filter tried on the catalog's example.
	p.do(chromedp.SetValue(chromedp.ID("url"), e.sink.URL+"/orders"),
		chromedp.Click(chromedp.CSS(`input[name="type"][value="order.created"]`)),
		chromedp.SetValue(chromedp.ID("filter"), `data.total > 100`),
		chromedp.Click(chromedp.ID("test-filter")))
	p.waitFor(`document.querySelector("#filter-outcome") !== null`)
	require.Contains(t, p.text("#filter-outcome"), "Delivered: the filter is true for this example of order.created")
	p.do(chromedp.SetValue(chromedp.ID("filter"), `data.total > 500`), chromedp.Click(chromedp.ID("test-filter")))
	p.waitFor(`document.querySelector("#filter-outcome").innerText.includes("Not delivered")`)
	p.do(chromedp.SetValue(chromedp.ID("filter"), `data.total >`), chromedp.Click(chromedp.ID("test-filter")))
	p.waitFor(`document.querySelector("#filter-outcome .error") !== null`)

	p.do(chromedp.SetValue(chromedp.ID("filter"), `data.total > 100`), chromedp.Click(chromedp.ID("add")))
	p.waitFor(`document.querySelector("#secret") !== null`)
	require.Contains(t, p.text("#notice"), "Endpoint added")
	secret := p.text("#secret")
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	d, err := e.st.Get(context.Background(), "acme=orders")
	require.NoError(t, err, "a destination of acme's")
	require.Equal(t, []string{"order.created"}, d.Types)
	require.Equal(t, "data.total > 100", d.Filter)

	// A test event, and its attempt.
	p.do(chromedp.Click(chromedp.ID("send-test")))
	p.waitFor(`document.querySelector("#sent a") !== null`)
	id := p.text("#sent a")
	waitUntil(t, "the test event delivered", func() bool { n, _ := e.sink.deliveries(id); return n == 1 })
	p.reloadUntil(e.url+"/portal/endpoints/orders", `document.querySelector(".attempts tbody").innerText.includes("answered 200")`)
	p.screenshot("portal-endpoint")
	p.do(chromedp.Navigate(e.url + "/portal/endpoints"))
	p.waitFor(`document.querySelector("#endpoints") !== null`)
	require.Contains(t, p.text("#endpoints"), "orders")
	p.screenshot("portal-endpoints")
	p.do(chromedp.Navigate(e.url + "/portal/attempts?endpoint=orders&status=2xx"))
	p.waitFor(`document.querySelector(".attempts") !== null`)
	require.Contains(t, p.text(".attempts tbody"), id)
	p.screenshot("portal-attempts")
	typed := e.call("POST", "/v1/tenants/acme/events", `{"type":"order.created","data":{"total":300}}`)["id"].(string)
	waitUntil(t, "the typed event delivered", func() bool { n, _ := e.sink.deliveries(typed); return n == 1 })
	p.reloadUntil(e.url+"/portal/attempts?type=order.created", `document.querySelector(".attempts tbody").innerText.includes(`+jsString(typed)+`)`)
	require.NotContains(t, p.text(".attempts tbody"), id, "the untyped test event is not of that type")
	p.do(chromedp.Navigate(e.url + "/portal/event?id=" + id))
	p.waitFor(`document.querySelector(".event-endpoint") !== null`)
	require.Contains(t, p.text(".event-endpoint h2"), "To orders")
	require.Contains(t, p.text("pre.body"), "1042")
	p.screenshot("portal-event")

	// The secret: revealed, then rotated.
	p.do(chromedp.Navigate(e.url + "/portal/endpoints/orders"))
	p.waitFor(`document.querySelector("#reveal") !== null`)
	p.do(chromedp.Click(chromedp.ID("reveal")))
	p.waitFor(`document.querySelector("#secret") !== null`)
	require.Equal(t, secret, p.text("#secret"))
	p.do(chromedp.Click(chromedp.ID("rotate")))
	p.waitFor(`document.querySelector("#notice") !== null && document.querySelector("#notice").innerText.includes("New signing secret")`)
	require.NotEqual(t, secret, p.text("#secret"))

	// A failed event, replayed once the endpoint is fixed.
	e.sink.setAnswer(func(*http.Request) int { return 500 })
	failed := e.call("POST", "/v1/tenants/acme/events", `{"dest":"orders","data":{"total":700}}`)["id"].(string)
	p.reloadUntil(e.url+"/portal/dead-letters", `document.querySelectorAll('#letters button[id^="replay-"]').length === 1`)
	p.screenshot("portal-dead-letters")
	e.sink.setAnswer(func(*http.Request) int { return 200 })
	p.do(chromedp.Click(chromedp.CSS(`#letters button[id^="replay-"]`)))
	p.waitFor(`document.querySelector("#confirm") !== null`)
	require.Contains(t, p.text("#confirm h2"), "Replay 1 failed event?")
	n, _ := e.sink.deliveries(failed)
	require.Zero(t, n, "a dry run first")
	p.do(chromedp.Click(chromedp.ID("confirm-replay")))
	p.waitFor(`document.querySelector("#replay-result") !== null`)
	require.Contains(t, p.text("#replay-result"), "Replayed 1 of 1")
	waitUntil(t, "the replayed event delivered", func() bool { n, _ := e.sink.deliveries(failed); return n == 1 })

	// Signed out: the cookie is no longer a session.
	p.do(chromedp.Click(chromedp.ID("signout")))
	p.waitFor(`document.querySelector("#signed-out") !== null`)
	require.Equal(t, http.StatusUnauthorized, p.fetchStatus("GET", "/portal/endpoints"))
	dialogs, errs := p.problems()
	require.Empty(t, dialogs)
	// The used link's exchange and the request after signing out were
	// answered 401, as they should: any other error is a failure.
	errs = slices.DeleteFunc(errs, func(s string) bool { return strings.Contains(s, "status of 401") })
	require.Empty(t, errs)
}

// TestPortalReadOnlySession: a session without capabilities has no
// button that changes anything, and what it posts anyway is refused.
func TestPortalReadOnlySession(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{})
	e.call("POST", "/v1/tenants/acme/destinations", `{"name":"crm","url":"`+e.sink.URL+`/crm"}`)
	p := openBrowser(t)
	p.signInPortal(e.link("acme"))
	require.Contains(t, p.text("#endpoints"), "crm")
	require.False(t, p.has("#add-endpoint"))
	require.Contains(t, p.text("#read-only"), "can look, not change")
	p.do(chromedp.Navigate(e.url + "/portal/endpoints/crm"))
	p.waitFor(`document.querySelector("#endpoint-url") !== null`)
	for _, sel := range []string{"#pause", "#resume", "#reveal", "#rotate", "#send-test", "#save"} {
		require.False(t, p.has(sel), sel)
	}
	for _, path := range []string{"/portal/endpoints/crm/pause", "/portal/endpoints/crm/reveal-secret", "/portal/endpoints/crm/rotate-secret", "/portal/endpoints/crm/test"} {
		require.Equal(t, http.StatusForbidden, p.fetchStatus("POST", path), path)
	}
	d, err := e.st.Get(context.Background(), "acme=crm")
	require.NoError(t, err)
	require.Empty(t, d.PauseReason, "not paused")
	// Without the CSRF token the portal refuses before the API is asked.
	status, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`fetch("/portal/endpoints/crm/pause", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status)
}

// TestPortalLinksExpireAndEnd: a link after its expiry, and a link or a
// session after the tenant's sessions were ended, are refused.
func TestPortalLinksExpireAndEnd(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{})
	p := openBrowser(t)

	expired := e.link("acme")
	e.clock.advance(time.Hour + time.Minute)
	p.do(chromedp.Navigate(expired))
	p.waitFor(`!document.querySelector("#signin-error").hidden`)
	require.Contains(t, p.text("#signin-error"), "expired or was already used")
	p.screenshot("portal-link-expired")

	p.signInPortal(e.link("acme"))
	unused := e.link("acme")
	e.call("DELETE", "/v1/tenants/acme/portal-sessions", "")
	p.do(chromedp.Navigate(e.url + "/portal/endpoints"))
	p.waitFor(`document.querySelector("#signed-out") !== null`)
	require.Contains(t, p.text("#signed-out"), "session has ended")
	p.do(chromedp.Navigate(unused))
	p.waitFor(`!document.querySelector("#signin-error").hidden`)
	require.Contains(t, p.text("#signin-error"), "expired or was already used")

	// acme's link opened at globex's sign-in page: refused, not spent.
	acme := e.link("acme")
	_, token, _ := strings.Cut(acme, "#token=")
	p.do(chromedp.Navigate(e.url + "/portal/signin/globex#token=" + token))
	p.waitFor(`!document.querySelector("#signin-error").hidden`)
	p.signInPortal(acme)

	// A page without the token says what to do.
	p.do(chromedp.Navigate(e.url + "/portal/signin/acme"))
	p.waitFor(`!document.querySelector("#signin-error").hidden`)
	require.Contains(t, p.text("#signin-error"), "open that link again")
}

// TestPortalSessionFindsNothingOfAnotherTenant: acme's session asking for
// globex's endpoint, event or its attempts by id gets 404 or nothing.
func TestPortalSessionFindsNothingOfAnotherTenant(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{})
	e.call("POST", "/v1/tenants/globex/destinations", `{"name":"gonly","url":"`+e.sink.URL+`/gonly"}`)
	e.call("POST", "/v1/tenants/globex/destinations", `{"name":"shared","url":"`+e.sink.URL+`/gshared"}`)
	e.call("POST", "/v1/tenants/acme/destinations", `{"name":"shared","url":"`+e.sink.URL+`/ashared"}`)
	e.call("POST", "/v1/tenants/globex/events", `{"dest":"gonly","id":"evt-globex","data":1}`)
	waitUntil(t, "globex's event delivered", func() bool { n, _ := e.sink.deliveries("evt-globex"); return n == 1 })
	p := openBrowser(t)
	p.signInPortal(e.link("acme", "manage_endpoints", "view_secret", "rotate_secret", "replay"))
	require.NotContains(t, p.text("#endpoints"), "gonly")
	for _, c := range []struct {
		method, path string
	}{
		{"GET", "/portal/endpoints/gonly"},
		{"POST", "/portal/endpoints/gonly/pause"},
		{"POST", "/portal/endpoints/gonly/reveal-secret"},
		{"GET", "/portal/event?id=evt-globex"},
	} {
		require.Equal(t, http.StatusNotFound, p.fetchStatus(c.method, c.path), "%s %s", c.method, c.path)
	}
	p.do(chromedp.Navigate(e.url + "/portal/attempts?endpoint=gonly"))
	p.waitFor(`document.querySelector("main h1") !== null`)
	require.NotContains(t, p.text("main"), "evt-globex")
	// acme's "shared" is acme's own: globex's of the same name is not
	// touched.
	require.Equal(t, http.StatusOK, p.fetchStatus("POST", "/portal/endpoints/shared/pause"))
	g, err := e.st.Get(context.Background(), "globex=shared")
	require.NoError(t, err)
	require.Empty(t, g.PauseReason)
}

// framePage serves a page of another site that frames src, and records
// the messages the portal posts to it.
func framePage(t *testing.T, srcs ...string) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		var frames strings.Builder
		for i, s := range srcs {
			fmt.Fprintf(&frames, `<iframe id="f%d" src="%s" width="900" height="600"></iframe>`, i, s)
		}
		fmt.Fprintf(w, `<!doctype html><title>embedder</title><body>%s<script>
window.heights = [];
window.addEventListener("message", (e) => { if (e.data && e.data.type === "relay-portal:height") window.heights.push(e.origin + " " + e.data.path); });
</script></body>`, frames.String())
	}))
	t.Cleanup(hs.Close)
	// localhost, not 127.0.0.1: another site than the portal's.
	return strings.Replace(hs.URL, "127.0.0.1", "localhost", 1)
}

// inProcessFrames keeps another site's frames in the page's process, so
// that the page's frame tree lists them (frameURLs).
var inProcessFrames = []chromedp.ExecAllocatorOption{
	chromedp.Flag("disable-site-isolation-trials", true),
	chromedp.Flag("disable-features", "IsolateOrigins,site-per-process"),
}

// frameURLs are the URLs of the page's frames, as the browser has them:
// a frame refused by frame-ancestors shows chrome-error://.
func (p *page) frameURLs() []string {
	p.t.Helper()
	tree, err := chromedp.Call(p.ctx, cdpage.GetFrameTree, cdp.Empty{})
	require.NoError(p.t, err)
	var out []string
	for _, c := range tree.FrameTree.ChildFrames {
		out = append(out, c.Frame.URL)
	}
	return out
}

// TestPortalFramedOnlyWhereAllowed: the portal refuses to be framed from
// an origin not configured (globex has none), and is framed from one that
// is (acme's own); the framed page tells its embedder its height.
func TestPortalFramedOnlyWhereAllowed(t *testing.T) {
	t.Parallel()
	// The embedder's origin is known once it listens: acme's setting is
	// written then.
	e := startPortal(t, portalOptions{})
	// Pages without a link's token: they stay as they are, whatever
	// signing in in a frame over plain HTTP would do.
	embedder := framePage(t, e.url+"/portal/signin/acme", e.url+"/portal/signin/globex")
	_, _, err := e.tenants.Put(context.Background(), tenant.Tenant{ID: "acme", Defaults: tenant.Defaults{MaxAttempts: 1}, Portal: tenant.Portal{FrameAncestors: []string{embedder}}})
	require.NoError(t, err)

	p := openBrowser(t, inProcessFrames...)
	p.do(chromedp.Navigate(embedder))
	p.waitFor(`window.heights.length > 0`)
	require.Equal(t, e.url+" /portal/signin/acme", p.eval(`window.heights[0]`))
	waitUntil(t, "both frames loaded", func() bool {
		urls := p.frameURLs()
		return len(urls) == 2 && strings.HasPrefix(urls[1], "chrome-error:")
	})
	urls := p.frameURLs()
	require.True(t, strings.HasPrefix(urls[0], e.url+"/portal/signin/acme"), "acme's portal is framed: %v", urls)
	require.True(t, strings.HasPrefix(urls[1], "chrome-error:"), "globex's is refused: %v", urls)
	require.Equal(t, "true", p.eval(`window.heights.every(h => h === `+jsString(e.url+" /portal/signin/acme")+`)`), "only acme's page told its height: %s", p.eval(`window.heights`))

	for _, c := range []struct{ path, csp string }{
		{"/portal/signin/acme", "frame-ancestors " + embedder},
		{"/portal/signin/globex", "frame-ancestors 'none'"},
	} {
		res, err := http.Get(e.url + c.path)
		require.NoError(t, err)
		res.Body.Close()
		require.Contains(t, res.Header.Get("Content-Security-Policy"), c.csp, c.path)
	}
}

// TestPortalEmbeddedOverTLS: served over TLS, the portal framed by
// another site signs in by link inside the frame and shows the tenant's
// endpoints: its cookie is SameSite=None; Secure; Partitioned there.
func TestPortalEmbeddedOverTLS(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{tls: true})
	e.call("POST", "/v1/tenants/acme/destinations", `{"name":"crm","url":"`+e.sink.URL+`/crm"}`)
	// The embedding page is docs/portal.md's snippet, with a real link
	// and the portal's real origin.
	doc, err := os.ReadFile("../docs/portal.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```html\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/portal.md has an HTML snippet")
	snippet := strings.NewReplacer("PORTAL_LINK", e.link("acme"), "https://hooks.example.com", e.url).Replace(string(m[1]))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><title>Acme's app</title><body><h1>Your webhooks</h1>%s</body>", snippet)
	}))
	t.Cleanup(hs.Close)
	embedder := strings.Replace(hs.URL, "127.0.0.1", "localhost", 1)
	_, _, err = e.tenants.Put(context.Background(), tenant.Tenant{ID: "acme", Portal: tenant.Portal{FrameAncestors: []string{embedder}}})
	require.NoError(t, err)
	p := openBrowser(t, append(inProcessFrames, chromedp.Flag("ignore-certificate-errors", true))...)
	p.do(chromedp.Navigate(embedder))
	waitUntil(t, "signed in inside the frame", func() bool {
		urls := p.frameURLs()
		return len(urls) == 1 && urls[0] == e.url+"/portal/endpoints"
	})
	// The snippet sized the frame to the page it shows.
	p.waitFor(`document.getElementById("relay-portal").style.height !== ""`)
	h, err := strconv.Atoi(strings.TrimSuffix(p.eval(`document.getElementById("relay-portal").style.height`), "px"))
	require.NoError(t, err)
	require.Greater(t, h, 300, "the endpoints page's height")
}

// checkedAPI is h, the HTTP API, checking every request the portal makes
// and every answer against the API's OpenAPI document; what does not match
// fails the test when it ends.
func checkedAPI(t *testing.T, h http.Handler) http.Handler {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	require.NoError(t, err)
	doc.Servers = openapi3.Servers{{URL: "http://relay.internal"}}
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	var mu sync.Mutex
	var problems []string
	checked := 0
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, problems, "the portal's API calls and their answers, against the OpenAPI document")
		t.Logf("%d API calls of the portal checked against the OpenAPI document", checked)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())

		probe := r.Clone(context.Background())
		probe.URL.Scheme, probe.URL.Host = "http", "relay.internal"
		probe.Body = io.NopCloser(bytes.NewReader(body))
		route, params, err := router.FindRoute(probe)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s %s: in no operation of the document (%v)", r.Method, r.URL, err))
			return
		}
		checked++
		in := &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			problems = append(problems, fmt.Sprintf("%s %s: the request is not as the document says: %v", r.Method, r.URL, err))
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		out.SetBodyBytes(rec.Body.Bytes())
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			problems = append(problems, fmt.Sprintf("%s %s answered %d %s, not as the document says: %v", r.Method, r.URL, rec.Code, rec.Body.Bytes(), err))
		}
	})
}

// TestPortalEscapesWhatOthersControl: the tenant's product name, the
// catalog's descriptions and an event's body holding markup are shown as
// text: nothing runs.
func TestPortalEscapesWhatOthersControl(t *testing.T) {
	t.Parallel()
	name := `Acme <img src=x onerror=alert(1)>`
	e := startPortal(t, portalOptions{acme: tenant.Portal{ProductName: name}})
	e.call("PUT", "/v1/event-types/order.created", `{"description":"<script>alert(2)</script>","example":{"note":"<script>alert(3)</script>"}}`)
	e.call("POST", "/v1/tenants/acme/destinations", `{"name":"crm","url":"`+e.sink.URL+`/crm","types":["order.created"]}`)
	id := e.call("POST", "/v1/tenants/acme/events", `{"id":"<img src=x onerror=alert(4)>","type":"order.created","data":{"html":"<script>alert(5)</script>"}}`)["id"].(string)
	waitUntil(t, "the event delivered", func() bool { n, _ := e.sink.deliveries(id); return n == 1 })
	p := openBrowser(t)
	p.signInPortal(e.link("acme", "manage_endpoints"))
	require.Equal(t, name, p.text("#product"))
	require.Contains(t, p.text("#types"), "<script>alert(2)</script>")
	p.do(chromedp.Navigate(e.url + "/portal/endpoints/crm"))
	p.waitFor(`document.querySelector("#data") !== null`)
	require.Contains(t, p.eval(`document.querySelector("#data").value`), "<script>alert(3)</script>")
	p.reloadUntil(e.url+"/portal/attempts", `document.querySelector(".attempts tbody").innerText.includes("onerror")`)
	p.do(chromedp.Navigate(e.url + "/portal/event?id=" + url.QueryEscape(id)))
	p.waitFor(`document.querySelector("pre.body") !== null`)
	require.Contains(t, p.text("pre.body"), "<script>alert(5)</script>")
	require.Contains(t, p.text("h1"), id)
	dialogs, errs := p.problems()
	require.Empty(t, dialogs, "no script ran")
	require.Empty(t, errs)
}

// TestPortalSignInIsRateLimited: link exchanges from one address beyond
// the burst are answered 429, whatever the link.
func TestPortalSignInIsRateLimited(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{})
	statuses := map[int]int{}
	for range 12 {
		res, err := http.Post(e.url+"/portal/session", "application/json", strings.NewReader(`{"token":"rpl_0123456789abcdef_wrong"}`))
		require.NoError(t, err)
		res.Body.Close()
		statuses[res.StatusCode]++
	}
	require.Equal(t, map[int]int{http.StatusUnauthorized: 10, http.StatusTooManyRequests: 2}, statuses)
	// A good link from that address waits too.
	link := e.link("acme")
	_, token, _ := strings.Cut(link, "#token=")
	res, err := http.Post(e.url+"/portal/session", "application/json", strings.NewReader(`{"token":"`+token+`"}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
}

// TestPortalEditKeepsAMaskedURL: the edit form shows the URL with its
// credentials masked; saving other changes keeps the real URL.
func TestPortalEditKeepsAMaskedURL(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{})
	real := e.sink.URL + "/crm?token=s3cret"
	e.call("POST", "/v1/tenants/acme/destinations", `{"name":"crm","url":"`+real+`"}`)
	p := openBrowser(t)
	p.signInPortal(e.link("acme", "manage_endpoints"))
	p.do(chromedp.Navigate(e.url + "/portal/endpoints/crm"))
	p.waitFor(`document.querySelector("#edit-endpoint") !== null`)
	require.NotContains(t, p.eval(`document.querySelector("#url").value`), "s3cret", "masked")
	p.do(chromedp.Click(chromedp.CSS(`#edit-endpoint input[name="type"][value="order.created"]`)), chromedp.Click(chromedp.ID("save")))
	p.waitFor(`document.querySelector("#notice") !== null`)
	d, err := e.st.Get(context.Background(), "acme=crm")
	require.NoError(t, err)
	require.Equal(t, real, d.URL, "the real URL is kept")
	require.Equal(t, []string{"order.created"}, d.Types)
	// A change the API refuses is shown on the page, the form as filled.
	p.do(chromedp.SetValue(chromedp.ID("url"), "http://169.254.169.254/latest"), chromedp.Click(chromedp.ID("save")))
	p.waitFor(`document.querySelector("#endpoint-error") !== null`)
	require.Contains(t, p.text("#endpoint-error"), "public internet addresses only")
	require.Equal(t, "http://169.254.169.254/latest", p.eval(`document.querySelector("#url").value`))
}

// An endpoint signed with Ed25519 shows its public key and kid, links the
// tenant's key set, has no secret to reveal, and rotates its key with an
// overlap during which both public keys show.
func TestPortalShowsEd25519PublicKeys(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{})
	e.call("POST", "/v1/tenants/acme/destinations", `{"name":"edge","url":"`+e.sink.URL+`/edge","signature":"ed25519"}`)
	d, err := e.st.Get(context.Background(), "acme=edge")
	require.NoError(t, err)
	keys := d.PublicKeys(time.Now())
	require.Len(t, keys, 1)
	p := openBrowser(t)
	p.signInPortal(e.link("acme", "view_secret", "rotate_secret"))
	p.do(chromedp.Navigate(e.url + "/portal/endpoints/edge"))
	p.waitFor(`document.querySelector("#endpoint-url") !== null`)
	require.Contains(t, p.text("#signature"), "with an Ed25519 key (v1a)")
	require.Equal(t, keys[0].Key, p.text(".public-key"))
	require.Contains(t, p.eval(`document.body.innerText`), "kid "+keys[0].ID)
	require.False(t, p.has("#reveal"), "no secret to reveal")
	jwks, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`fetch(document.querySelector('a[href$="/jwks.json"]').href).then(r => r.text())`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Contains(t, jwks, keys[0].ID, "the link is the tenant's key set")

	require.Equal(t, "Rotate the signing key", p.text("#rotate"))
	p.do(chromedp.Click(chromedp.ID("rotate")))
	p.waitFor(`document.querySelectorAll(".public-key").length === 2`)
	require.Contains(t, p.text("#notice"), "New signing key")
	require.False(t, p.has("#secret"), "no secret shown")
	shown := p.eval(`Array.from(document.querySelectorAll(".public-key")).map(e => e.innerText).join(" ")`)
	require.Contains(t, shown, keys[0].Key, "the previous key is still shown, until its overlap ends")
}

// A customer adds an endpoint of every kind from the portal's form: the
// kind's fields show when it is chosen, credentials in password inputs; a
// field the kind refuses is explained, the form kept; the endpoint stored
// has the kind, its config and its credentials apart, and its page shows
// the credentials by name only.
func TestPortalAddsEndpointsOfEveryKind(t *testing.T) {
	t.Parallel()
	e := startPortal(t, portalOptions{})
	p := openBrowser(t)
	p.signInPortal(e.link("acme", "manage_endpoints"))
	for _, tc := range []struct {
		kind   string
		config map[string]string
		secret string // the credential among them
	}{
		{"nats", map[string]string{"url": "nats://nats.example.com:4222", "subject": "orders.created", "token": "tok-s3cret"}, "token"},
		{"kafka", map[string]string{"brokers": "kafka.example.com:9092", "topic": "orders", "sasl_mechanism": "plain", "sasl_username": "relay", "sasl_password": "pw-s3cret"}, "sasl_password"},
		{"rabbitmq", map[string]string{"url": "amqp://rabbit.example.com:5672", "exchange": "orders", "username": "relay", "password": "pw-s3cret"}, "password"},
		{"pubsub", map[string]string{"project": "acme-prod", "topic": "orders", "endpoint": "pubsub.example.com:8085"}, ""},
		{"sqs", map[string]string{"queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders", "access_key_id": "AKIAEXAMPLE", "secret_access_key": "sk-s3cret"}, "secret_access_key"},
		{"eventbridge", map[string]string{"region": "eu-west-1", "access_key_id": "AKIAEXAMPLE", "secret_access_key": "sk-s3cret"}, "secret_access_key"},
	} {
		p.do(chromedp.Navigate(e.url + "/portal/endpoints"))
		p.waitFor(`document.querySelector("#add-endpoint") !== null`)
		p.eval(`(() => { const k = document.querySelector("#kind"); k.value = "` + tc.kind + `"; k.dispatchEvent(new Event("change")); return "" })()`)
		require.Equal(t, "true", p.eval(`document.querySelector('fieldset[data-kind="http"]').disabled`), "%s: the URL is not asked for", tc.kind)
		require.Equal(t, "false", p.eval(`document.querySelector('fieldset[data-kind="`+tc.kind+`"]').hidden`), tc.kind)
		if tc.secret != "" {
			require.Equal(t, "password", p.eval(`document.querySelector("#config-`+tc.kind+`-`+tc.secret+`").type`), "%s: a credential is typed unseen", tc.kind)
		}
		name := "q-" + tc.kind
		p.do(chromedp.SetValue(chromedp.ID("name"), name))
		// First without a field it needs: refused, explained.
		first := map[string]string{"nats": "url", "kafka": "brokers", "rabbitmq": "url", "pubsub": "endpoint", "sqs": "queue_url", "eventbridge": "region"}[tc.kind]
		// The field the error names: without an endpoint, a tenant's
		// Pub/Sub endpoint needs its own credentials.
		named := map[string]string{"pubsub": "credentials_json"}[tc.kind]
		if named == "" {
			named = first
		}
		for k, v := range tc.config {
			if k != first {
				p.do(chromedp.SetValue(chromedp.ID("config-"+tc.kind+"-"+k), v))
			}
		}
		p.do(chromedp.Click(chromedp.ID("add")))
		p.waitFor(`document.querySelector("#add-error") !== null`)
		require.Contains(t, p.text("#add-error"), named, "%s: the error names the field", tc.kind)
		require.Equal(t, tc.kind, p.eval(`document.querySelector("#kind").value`), "the form is kept")
		p.do(chromedp.SetValue(chromedp.ID("config-"+tc.kind+"-"+first), tc.config[first]))
		if tc.secret != "" {
			p.do(chromedp.SetValue(chromedp.ID("config-"+tc.kind+"-"+tc.secret), tc.config[tc.secret]))
		}
		p.do(chromedp.Click(chromedp.ID("add")))
		p.waitFor(`document.querySelector("#notice") !== null`)
		require.Contains(t, p.text("#notice"), "Endpoint added", tc.kind)
		require.Equal(t, tc.kind, p.text("#endpoint-kind"))
		if tc.secret != "" {
			require.NotContains(t, p.eval(`document.body.innerText`), tc.config[tc.secret], "%s: a credential is never shown", tc.kind)
		}
		d, err := e.st.Get(context.Background(), "acme="+name)
		require.NoError(t, err, tc.kind)
		require.Equal(t, tc.kind, d.Kind)
		stored := d.KindConfig()
		for k, v := range tc.config {
			require.Equal(t, v, stored[k], "%s: %s", tc.kind, k)
		}
		if tc.secret != "" {
			require.Equal(t, map[string]string{tc.secret: tc.config[tc.secret]}, d.Credentials, "%s: credentials apart", tc.kind)
		}
	}
}
