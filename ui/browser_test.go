package ui_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/api"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/history"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream/streamtest"
	"github.com/relaydev/relay/tenant"
	"github.com/relaydev/relay/ui"
)

// dashEnv is a real NATS server, a relay delivering to a sink, the HTTP API
// and the dashboard on a free port, and keys of each scope.
type dashEnv struct {
	t     *testing.T
	js    jetstream.JetStream
	url   string
	st    *destination.Store
	prod  *publish.Producer
	admin string
	read  string
	sink  *sink
}

// sink answers each request as its answer says (200 by default) and
// counts the 2xx answers per event id.
type sink struct {
	*httptest.Server
	mu        sync.Mutex
	answer    func(r *http.Request) int
	delivered map[string]int
	at        map[string]time.Time // when each event was last delivered
}

func (s *sink) setAnswer(f func(r *http.Request) int) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

func (s *sink) deliveries(id string) (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered[id], s.at[id]
}

func startDash(t *testing.T) *dashEnv {
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
	apiSrv := api.NewServer(api.Config{JS: srv.JS, Keys: keys, Producer: prod, Dests: st, DeadLetters: letters, Tenants: tenants, Logger: quiet})
	dash, err := ui.New(ctx, ui.Config{API: apiSrv, JS: srv.JS, Logger: quiet, Refresh: 500 * time.Millisecond})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ui/", dash)
	mux.Handle("/", apiSrv)
	hs := httptest.NewServer(mux)
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
	}))
	t.Cleanup(s.Close)

	rctx, cancel := context.WithCancel(ctx)
	r, err := relay.New(rctx, relay.Config{JS: srv.JS, Logger: quiet, SecretKey: secret,
		HTTPClient: egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	e := &dashEnv{t: t, js: srv.JS, url: hs.URL, st: st, prod: prod, sink: s}
	e.admin, _, err = keys.Create(ctx, "ops", api.ScopeAdmin)
	require.NoError(t, err)
	e.read, _, err = keys.Create(ctx, "viewer", api.ScopeRead)
	require.NoError(t, err)
	return e
}

func (e *dashEnv) addDest(d destination.Destination) {
	e.t.Helper()
	if d.URL == "" {
		d.URL = e.sink.URL + "/" + d.Name
	}
	_, err := e.st.Add(context.Background(), d)
	require.NoError(e.t, err)
}

func (e *dashEnv) publish(ev publish.Event) string {
	e.t.Helper()
	res, err := e.prod.Publish(context.Background(), ev)
	require.NoError(e.t, err)
	return res.ID
}

// page is a browser tab, with the dialogs it opened and the errors its
// console reported.
type page struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	dialogs []string
	errors  []string
}

// chromium finds Debian's chromium: 'make deps' installs it. Without it the
// browser tests are skipped, unless CI is set, where they fail.
func chromium(t *testing.T) string {
	for _, p := range []string{os.Getenv("RELAY_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: 'make deps' installs it (Debian package chromium)")
	}
	t.Skip("chromium is not installed: 'make deps' installs it (Debian package chromium)")
	return ""
}

// openBrowser starts a headless chromium for the test, 1280x900, with
// extra options.
func openBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	p := &page{t: t, ctx: ctx}
	dialogs := chromedp.Events(ctx, cdpage.JavascriptDialogOpening)
	console := chromedp.Console(ctx)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.dialogs = append(p.dialogs, ev.Message)
			p.mu.Unlock()
			_, _ = chromedp.Call(ctx, cdpage.HandleJavaScriptDialog, cdpage.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				p.mu.Lock()
				p.errors = append(p.errors, m.String())
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// do runs actions, failing the test on an error.
func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	require.NoError(p.t, chromedp.Do(p.ctx, actions...))
}

// text is the text of the element sel selects.
// It is read in the page's script, not through the DOM's node ids, which
// a page still loading invalidates ("No node with given id").
func (p *page) text(sel string) string {
	p.t.Helper()
	p.waitFor(`document.querySelector(` + jsString(sel) + `) !== null`)
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector(`+jsString(sel)+`).innerText`))
	require.NoError(p.t, err, "text of %s", sel)
	return s
}

// waitFor waits until the JavaScript expression is true (the page updates
// itself, or a form's answer loaded).
// A page that navigates meanwhile is asked again.
func (p *page) waitFor(expr string) {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`(() => { try { return !!(`+expr+`) } catch (e) { return false } })()`))
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	loc, _ := chromedp.Run(p.ctx, chromedp.Location())
	html, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").outerHTML : document.documentElement.outerHTML`))
	dialogs, errs := p.problems()
	p.t.Fatalf("waiting for %s: not true after 60s (page %s, last error %v; dialogs %q, console errors %q)\n%s", expr, loc, last, dialogs, errs, html)
}

// reloadUntil loads url until the JavaScript expression is true of the
// page: for what the page shows as it loads, not live.
func (p *page) reloadUntil(url, expr string) {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p.do(chromedp.Navigate(url))
		ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`(() => { try { return !!(`+expr+`) } catch (e) { return false } })()`))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: %s not true after 60s (last error %v)", url, expr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// has reports whether sel selects something now.
func (p *page) has(sel string) bool {
	p.t.Helper()
	ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`document.querySelector(`+jsString(sel)+`) !== null`))
	require.NoError(p.t, err)
	return ok
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func (p *page) signIn(base, key string) {
	p.t.Helper()
	p.do(chromedp.Navigate(base+"/ui/login"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), key),
		chromedp.Click(chromedp.CSS(`form[action="/ui/login"] button`)))
	p.waitFor(`location.pathname !== "/ui/login" || document.querySelector(".error") !== null`)
}

// problems are the dialogs opened and the console errors.
func (p *page) problems() ([]string, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dialogs...), append([]string(nil), p.errors...)
}

// screenshot writes the page as name.png into RELAY_SCREENSHOTS, when set
// ('make screenshots' sets it to docs/images).
func (p *page) screenshot(name string) {
	p.t.Helper()
	dir := os.Getenv("RELAY_SCREENSHOTS")
	if dir == "" {
		return
	}
	buf, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	require.NoError(p.t, err)
	require.NoError(p.t, os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644))
}

func TestSignInWithAKeyAndFailWithAWrongOne(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	p := openBrowser(t)

	p.do(chromedp.Navigate(e.url + "/ui/"))
	p.waitFor(`location.pathname === "/ui/login"`)
	p.screenshot("login")
	p.signIn(e.url, e.admin+"x")
	p.waitFor(`document.querySelector(".error") !== null`)
	require.Contains(t, p.text(".error"), "not valid")

	p.signIn(e.url, e.admin)
	p.waitFor(`location.pathname === "/ui/" && document.querySelector("h1").textContent === "Overview"`)
	require.Contains(t, p.text("nav"), "Sign out ops")

	// Signing out ends the session: the overview asks for a key again.
	p.do(chromedp.Click(chromedp.CSS(`form[action="/ui/logout"] button`)))
	p.waitFor(`location.pathname === "/ui/login"`)
	p.do(chromedp.Navigate(e.url + "/ui/"))
	p.waitFor(`location.pathname === "/ui/login"`)
	dialogs, errs := p.problems()
	require.Empty(t, dialogs)
	require.Empty(t, errs, "no console error (a CSP violation is one)")
}

// TestOverviewShowsCountsAndABreakerOpening: after deliveries the overview
// shows the destination's rate and success; when another destination's
// sink fails, its breaker opens and the overview shows it without a
// reload.
func TestOverviewShowsCountsAndABreakerOpening(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.sink.setAnswer(func(r *http.Request) int {
		if r.URL.Path == "/flaky" {
			return 503
		}
		return 200
	})
	e.addDest(destination.Destination{Name: "orders"})
	e.addDest(destination.Destination{Name: "flaky", BreakerThreshold: 3, BreakerPause: destination.Duration(time.Minute),
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(200 * time.Millisecond), MaxAttempts: 100}})
	p := openBrowser(t)
	p.signIn(e.url, e.admin)
	p.waitFor(`document.querySelector('tr[data-dest="orders"]') !== null`)
	require.Equal(t, "healthy", p.text(`tr[data-dest="orders"] .state`))

	for range 20 {
		e.publish(publish.Event{Dest: "orders", Data: []byte(`{"n":1}`)})
	}
	// The page updates itself: no reload.
	p.waitFor(`document.querySelector('tr[data-dest="orders"] [data-col="success"]').textContent === "100.0%"`)
	p.waitFor(`parseFloat(document.querySelector('tr[data-dest="orders"] [data-col="rate"]').textContent) > 0`)

	for range 5 {
		e.publish(publish.Event{Dest: "flaky", Data: []byte(`{"n":2}`)})
	}
	p.waitFor(`document.querySelector('tr[data-dest="flaky"] .state').textContent === "breaker open"`)
	p.waitFor(`document.querySelector('tr[data-dest="flaky"] [data-col="success"]').textContent === "0.0%"`)
	p.screenshot("overview")

	// At a phone's width the page does not scroll sideways: the tables
	// scroll within their boxes.
	p.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	p.waitFor(`document.documentElement.clientWidth === 390 && document.documentElement.scrollWidth <= 390`)
	p.screenshot("overview-phone")
	dialogs, errs := p.problems()
	require.Empty(t, dialogs)
	require.Empty(t, errs)
}

// TestDeadLetterReplayedFromThePageIsDelivered: a dead letter selected on
// the page, replayed after the dry run's count is confirmed, is delivered.
func TestDeadLetterReplayedFromThePageIsDelivered(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.sink.setAnswer(func(*http.Request) int { return 400 }) // permanent: dead-lettered at once
	e.addDest(destination.Destination{Name: "billing"})
	id := e.publish(publish.Event{Dest: "billing", Data: []byte(`{"invoice":7}`)})
	p := openBrowser(t)
	p.signIn(e.url, e.admin)
	p.reloadUntil(e.url+"/ui/dead-letters?dest=billing", `document.querySelectorAll('#letters input[name="seq"]').length === 1`)
	p.screenshot("dead-letters")

	e.sink.setAnswer(func(*http.Request) int { return 200 }) // fixed
	p.do(chromedp.Click(chromedp.CSS(`#letters input[name="seq"]`)), chromedp.Click(chromedp.ID("replay-selected")))
	p.waitFor(`document.querySelector("#confirm") !== null`)
	require.Contains(t, p.text("#confirm h2"), "Replay 1 dead letter?")
	n, _ := e.sink.deliveries(id)
	require.Zero(t, n, "nothing replayed before the confirmation")
	p.screenshot("dead-letters-confirm")
	p.do(chromedp.Click(chromedp.ID("confirm-replay")))
	p.waitFor(`document.querySelector("#replay-result") !== null`)
	require.Contains(t, p.text("#replay-result"), "Replayed 1 of 1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := e.sink.deliveries(id); n == 1 {
			break
		}
		require.False(t, time.Now().After(deadline), "the replayed event was never delivered")
		time.Sleep(20 * time.Millisecond)
	}
	dialogs, errs := p.problems()
	require.Empty(t, dialogs)
	require.Empty(t, errs)
}

// TestPauseAndResumeFromThePage: pausing from the destination's page stops
// deliveries (an event published meanwhile waits in the backlog), and
// resuming delivers it.
func TestPauseAndResumeFromThePage(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.addDest(destination.Destination{Name: "crm"})
	p := openBrowser(t)
	p.signIn(e.url, e.admin)
	p.do(chromedp.Navigate(e.url + "/ui/destinations/crm"))
	p.waitFor(`document.querySelector("#pause") !== null`)
	p.do(chromedp.Click(chromedp.ID("pause")))
	p.waitFor(`document.querySelector("#resume") !== null`)
	require.Contains(t, p.text("#dest-state"), "paused")

	id := e.publish(publish.Event{Dest: "crm", Data: []byte(`{"contact":1}`)})
	// It waits in the backlog: the consumer is paused in JetStream, so it
	// is not handed out.
	deadline := time.Now().Add(30 * time.Second)
	for {
		all, err := relay.Stats(context.Background(), e.js, nil)
		require.NoError(t, err)
		var d []relay.DestStats
		for _, s := range all {
			if s.Dest == "crm" {
				d = append(d, s)
			}
		}
		if len(d) == 1 && d[0].Backlog == 1 {
			break
		}
		require.False(t, time.Now().After(deadline), "the event never showed in the backlog: %+v", d)
		time.Sleep(20 * time.Millisecond)
	}
	n, _ := e.sink.deliveries(id)
	require.Zero(t, n, "not delivered while paused")
	p.screenshot("destination")

	p.do(chromedp.Navigate(e.url + "/ui/destinations/crm"))
	p.waitFor(`document.querySelector("#resume") !== null`)
	resumed := time.Now()
	p.do(chromedp.Click(chromedp.ID("resume")))
	p.waitFor(`document.querySelector("#pause") !== null`)
	deadline = time.Now().Add(30 * time.Second)
	for {
		n, at := e.sink.deliveries(id)
		if n == 1 {
			require.True(t, at.After(resumed), "delivered after the resume")
			break
		}
		require.False(t, time.Now().After(deadline), "not delivered after the resume")
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadKeyHasNoActionThatWorks: a read key's pages offer no action, and
// an action posted anyway (with the session's own CSRF token) is refused
// by the API and changes nothing.
func TestReadKeyHasNoActionThatWorks(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.sink.setAnswer(func(*http.Request) int { return 400 })
	e.addDest(destination.Destination{Name: "crm"})
	e.publish(publish.Event{Dest: "crm", Data: []byte(`{}`)})
	p := openBrowser(t)
	p.signIn(e.url, e.read)
	p.do(chromedp.Navigate(e.url + "/ui/destinations/crm"))
	p.waitFor(`document.querySelector("h1") !== null`)
	require.False(t, p.has("#pause"))
	require.False(t, p.has("#rotate"))
	require.Contains(t, p.text("main"), "can look, not act")
	p.reloadUntil(e.url+"/ui/dead-letters", `document.querySelectorAll("#letters tbody tr td").length > 1`)
	require.False(t, p.has("#replay-selected"))
	require.False(t, p.has(`#letters input[name="seq"]`))

	// Posted anyway, from the page, with its CSRF token: refused.
	status, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`(async () => {
		const token = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRF-Token"];
		const r = await fetch("/ui/destinations/crm/pause", {method: "POST", headers: {"X-CSRF-Token": token}});
		return r.status;
	})()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status)
	d, err := e.st.Get(context.Background(), "crm")
	require.NoError(t, err)
	require.Empty(t, d.PauseReason, "not paused")
	status, err = chromedp.Run(p.ctx, chromedp.Evaluate[int](`(async () => {
		const token = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRF-Token"];
		const body = new URLSearchParams({all: "1", confirm: "1", csrf: token});
		const r = await fetch("/ui/dead-letters/purge", {method: "POST", body});
		return r.status;
	})()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status)
	letters, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll("#letters tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 1, letters, "the dead letter is still there")

	// And without the token, the dashboard refuses before the API is asked.
	status, err = chromedp.Run(p.ctx, chromedp.Evaluate[int](`fetch("/ui/destinations/crm/pause", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status)
}

// TestScriptInAnEventRunsNothing: a dead letter whose body, header and id
// hold script and javascript: URLs is shown as text on every page; nothing
// runs (no dialog, no console error: the CSP would report a blocked
// script).
func TestScriptInAnEventRunsNothing(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.sink.setAnswer(func(*http.Request) int { return 400 })
	e.addDest(destination.Destination{Name: "crm"})
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	id := e.publish(publish.Event{Dest: "crm", ID: "evt-<b>x</b>", Key: `"><script>alert(3)</script>`,
		Headers: map[string]string{"X-Link": "javascript:alert(4)"}, Data: []byte(`{"note":"` + strings.ReplaceAll(evil, `"`, `\"`) + `"}`)})
	p := openBrowser(t)
	p.signIn(e.url, e.admin)
	p.reloadUntil(e.url+"/ui/dead-letters", `document.querySelectorAll("#letters tbody a").length === 1`)
	p.do(chromedp.Click(chromedp.CSS("#letters tbody a")))
	p.waitFor(`document.querySelector("pre.body") !== null`)
	require.Contains(t, p.text("pre.body"), "<script>alert(1)</script>", "the body is shown as text")
	require.Contains(t, p.text("main"), "javascript:alert(4)")
	require.False(t, p.has("main script"), "no script element from the event")
	require.False(t, p.has("main img"))
	p.screenshot("dead-letter")

	p.do(chromedp.Navigate(e.url + "/ui/events?id=" + url.QueryEscape(id)))
	p.waitFor(`document.querySelector(".timeline") !== null`)
	require.Contains(t, p.text("pre.body"), "<script>alert(1)</script>")
	p.screenshot("event")
	p.do(chromedp.Navigate(e.url + "/ui/"))
	p.waitFor(`document.querySelector("#destinations") !== null`)
	dialogs, errs := p.problems()
	require.Empty(t, dialogs, "no script ran")
	require.Empty(t, errs, "no console error")
}

// TestSendATestEvent: the form publishes through the API and the event is
// delivered; a read key is told it cannot publish.
func TestSendATestEvent(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.addDest(destination.Destination{Name: "orders"})
	p := openBrowser(t)
	p.signIn(e.url, e.admin)
	p.do(chromedp.Navigate(e.url+"/ui/send"),
		chromedp.WaitVisible(chromedp.ID("target")),
		chromedp.SendKeys(chromedp.ID("target"), "orders"),
		chromedp.SetValue(chromedp.ID("data"), `{"hello":"world"}`))
	p.screenshot("send")
	p.do(chromedp.Click(chromedp.ID("send")))
	p.waitFor(`document.querySelector("#sent") !== null`)
	id := p.text("#sent code")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := e.sink.deliveries(id); n == 1 {
			break
		}
		require.False(t, time.Now().After(deadline), "the test event %q was never delivered", id)
		time.Sleep(20 * time.Millisecond)
	}

	r := openBrowser(t)
	r.signIn(e.url, e.read)
	r.do(chromedp.Navigate(e.url+"/ui/send"),
		chromedp.WaitVisible(chromedp.ID("target")),
		chromedp.SendKeys(chromedp.ID("target"), "orders"),
		chromedp.Click(chromedp.ID("send")))
	r.waitFor(`document.querySelector(".error") !== null`)
	require.Contains(t, r.text(".error"), "scope read")
	dialogs, errs := p.problems()
	require.Empty(t, dialogs)
	require.Empty(t, errs)
}

// TestSkipAnEventWhoseIDLooksLikeAPath: an event ID may hold '/', '?' and
// '#'. Its Skip button skips that event, and cannot be made to post to
// another action (here: pausing another destination).
func TestSkipAnEventWhoseIDLooksLikeAPath(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.sink.setAnswer(func(r *http.Request) int {
		if strings.HasSuffix(r.URL.Path, "/crm") {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "crm", Retry: destination.RetryPolicy{Base: destination.Duration(time.Minute), Max: destination.Duration(time.Minute), MaxAttempts: 5}})
	e.addDest(destination.Destination{Name: "victim"})
	const id = "../../victim/pause?x=1#y"
	e.publish(publish.Event{Dest: "crm", ID: id, Data: []byte(`{"n":1}`)})

	p := openBrowser(t)
	p.signIn(e.url, e.admin)
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.do(chromedp.Navigate(e.url + "/ui/destinations/crm"))
		p.waitFor(`document.querySelector("#pause") !== null`)
		n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[action$="/skip"] button').length`))
		require.NoError(t, err)
		if n == 1 {
			break
		}
		require.False(t, time.Now().After(deadline), "the failed event never showed as retrying")
		time.Sleep(100 * time.Millisecond)
	}
	action, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector('form[action$="/skip"]').getAttribute("action")`))
	require.NoError(t, err)
	require.Equal(t, "/ui/destinations/crm/retrying/..%2F..%2Fvictim%2Fpause%3Fx=1%23y/skip", action)
	p.do(chromedp.Click(chromedp.CSS(`form[action$="/skip"] button`)))
	p.waitFor(`document.body.innerText.includes("skipped:")`)

	victim, err := e.st.Get(context.Background(), "victim")
	require.NoError(t, err)
	require.True(t, victim.PausedUntil.IsZero(), "the other destination was not paused")
	rs, err := history.ListRetrying(context.Background(), e.st, "crm", 10)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, id, rs[0].EventID)
	require.NotEmpty(t, rs[0].Skip, "the event itself was marked skipped")
}

// TestOversizedSignInFormIsRefused: the sign-in form, open to anyone, is
// read up to a bound (413 beyond it), not up to net/http's 32 MiB.
func TestOversizedSignInFormIsRefused(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	body := "key=" + strings.Repeat("x", 2<<20)
	resp, err := http.Post(e.url+"/ui/login", "application/x-www-form-urlencoded", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(page), "could not be read")
	require.Contains(t, string(page), "request body too large")
}

// TestBodyTemplateTextIsForAdminKeysOnly: a destination's page shows its
// body template's text to an admin key, and to a read key only that one is
// set, its size and digest (a template may embed a credential).
func TestBodyTemplateTextIsForAdminKeysOnly(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	const tmpl = `{"routing_key":"rk-s3cret-42","summary":{{json .Type}}}`
	e.addDest(destination.Destination{Name: "pd", BodyTemplate: tmpl})
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(tmpl)))
	p := openBrowser(t)
	p.signIn(e.url, e.read)
	p.do(chromedp.Navigate(e.url + "/ui/destinations/pd"))
	p.waitFor(`document.querySelector("#body-template") !== null`)
	shown := p.text("#body-template")
	require.Contains(t, shown, fmt.Sprintf("%d bytes", len(tmpl)))
	require.Contains(t, shown, sum)
	require.Contains(t, shown, "admin keys only")
	html, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	require.NoError(t, err)
	require.NotContains(t, html, "rk-s3cret-42", "a read key's page holds no template text")

	_, err = chromedp.Call(p.ctx, network.ClearBrowserCookies, cdp.Empty{})
	require.NoError(t, err, "sign out: forget the read key's session")
	p.signIn(e.url, e.admin)
	p.do(chromedp.Navigate(e.url + "/ui/destinations/pd"))
	p.waitFor(`document.querySelector("#body-template") !== null`)
	require.Contains(t, p.text("#body-template"), tmpl, "an admin key sees the text")
}

// A tenant's destination on the pages: the overview lists it by
// tenant=name beside the destination of no tenant of the same name, its
// page says whose it is, and pausing it there pauses it, not the other.
func TestATenantsDestinationOnThePages(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	ctx := context.Background()
	ts, err := tenant.Open(ctx, e.js, nil)
	require.NoError(t, err)
	_, _, err = ts.Put(ctx, tenant.Tenant{ID: "acme"})
	require.NoError(t, err)
	e.addDest(destination.Destination{Name: "orders"})
	e.addDest(destination.Destination{Name: "acme=orders"})
	p := openBrowser(t)
	p.signIn(e.url, e.admin)
	p.do(chromedp.Navigate(e.url + "/ui/"))
	p.waitFor(`document.querySelector('a[href="/ui/destinations/acme=orders"]') !== null`)
	p.waitFor(`document.querySelector('a[href="/ui/destinations/orders"]') !== null`)
	p.do(chromedp.Navigate(e.url + "/ui/destinations/acme=orders"))
	p.waitFor(`document.querySelector("#pause") !== null`)
	require.Contains(t, p.text("h1"), "of tenant acme")
	p.do(chromedp.Click(chromedp.ID("pause")))
	p.waitFor(`document.querySelector("#resume") !== null`)
	st, err := destination.NewStore(ctx, e.js)
	require.NoError(t, err)
	d, err := st.Get(ctx, "acme=orders")
	require.NoError(t, err)
	require.Equal(t, destination.PauseOperator, d.PauseReason)
	d, err = st.Get(ctx, "orders")
	require.NoError(t, err)
	require.Empty(t, d.PauseReason, "the destination of no tenant is not paused")
}
