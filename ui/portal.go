package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/relaydev/relay/api/client"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/tenant"
)

// PortalConfig configures the customer portal: the pages a tenant's
// customer opens with a link the sender's backend minted (POST
// /v1/tenants/{id}/portal-sessions), served at /portal/.
type PortalConfig struct {
	// API is the HTTP API's handler: every page reads and acts through
	// it, with the session's token, which the API takes as a key of the
	// session's tenant limited by its capabilities. Required.
	API http.Handler
	// JS stores the secret the CSRF tokens are derived from (the
	// dashboard's). Required.
	JS jetstream.JetStream
	// Sessions are the portal's sessions: links are exchanged there for
	// session cookies. Required.
	Sessions *portal.Store
	// Tenants are read for each tenant's branding and the origins that
	// may frame its portal. Required.
	Tenants *tenant.Store
	// FrameAncestors are the origins that may embed every tenant's portal
	// in an iframe (each tenant may add its own); none: framing is
	// denied.
	FrameAncestors []string
	// Secure: the portal is served over TLS (cookies Secure; framing
	// cookies SameSite=None).
	Secure bool
	// ExchangeRate and ExchangeBurst bound the link exchanges per client
	// address. Optional: one every 6 seconds, a burst of 10.
	ExchangeRate  rate.Limit
	ExchangeBurst int
	Logger        *slog.Logger
	Now           func() time.Time
}

// Portal serves the customer portal.
type Portal struct {
	cfg     PortalConfig
	keys    *sessions // derives CSRF tokens, and says whether a request is Secure
	pages   map[string]*template.Template
	mux     *http.ServeMux
	origins *http.CrossOriginProtection

	mu        sync.Mutex
	exchanges map[string]*rate.Limiter // by client address
}

// portalCookie is the portal session's cookie: its token (rps_...), which
// the browser never shows to a script (HttpOnly).
const portalCookie = "relay_portal"

// NewPortal returns the customer portal's handler, to be served at
// /portal/.
func NewPortal(ctx context.Context, cfg PortalConfig) (*Portal, error) {
	if cfg.API == nil || cfg.JS == nil || cfg.Sessions == nil || cfg.Tenants == nil {
		return nil, errors.New("ui: PortalConfig.API, JS, Sessions and Tenants are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ExchangeRate == 0 {
		cfg.ExchangeRate, cfg.ExchangeBurst = rate.Every(6*time.Second), 10
	}
	for i, o := range cfg.FrameAncestors {
		n, err := tenant.ValidateOrigin(o)
		if err != nil {
			return nil, fmt.Errorf("ui: portal frame ancestor %q: %w", o, err)
		}
		cfg.FrameAncestors[i] = n
	}
	secret, err := loadSecret(ctx, cfg.JS)
	if err != nil {
		return nil, err
	}
	keys, err := newSessions(secret, time.Hour, cfg.Secure, cfg.Now)
	if err != nil {
		return nil, err
	}
	p := &Portal{cfg: cfg, keys: keys, mux: http.NewServeMux(), origins: http.NewCrossOriginProtection(), exchanges: map[string]*rate.Limiter{}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	p.routes()
	return p, nil
}

func (p *Portal) parse() error {
	p.pages = map[string]*template.Template{}
	names, err := fs.Glob(files, "templates/portal/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		page := strings.TrimSuffix(strings.TrimPrefix(n, "templates/portal/"), ".html")
		if page == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs(p.cfg.Now)).ParseFS(files, "templates/portal/layout.html", n)
		if err != nil {
			return fmt.Errorf("ui: template %s: %w", n, err)
		}
		p.pages[page] = t
	}
	return nil
}

func (p *Portal) routes() {
	static, _ := fs.Sub(files, "static")
	p.mux.Handle("GET /portal/static/", http.StripPrefix("/portal/static/", staticFiles(http.FS(static))))
	p.mux.HandleFunc("GET /portal/theme/{tenant}", p.theme)
	p.mux.HandleFunc("GET /portal/signin/{tenant}", p.signinPage)
	p.mux.HandleFunc("POST /portal/session", p.exchange)
	p.mux.Handle("POST /portal/signout", p.signedIn(p.signout))
	p.mux.Handle("GET /portal/{$}", p.signedIn(func(w http.ResponseWriter, r *http.Request, _ *visitor) {
		http.Redirect(w, r, "/portal/endpoints", http.StatusSeeOther)
	}))
	p.mux.Handle("GET /portal/endpoints", p.signedIn(p.endpoints))
	p.mux.Handle("POST /portal/endpoints", p.signedIn(p.addEndpoint))
	p.mux.Handle("GET /portal/endpoints/{name}", p.signedIn(p.endpoint))
	p.mux.Handle("POST /portal/endpoints/{name}/{action}", p.signedIn(p.endpointAction))
	p.mux.Handle("POST /portal/filter-test", p.signedIn(p.filterTest))
	p.mux.Handle("GET /portal/attempts", p.signedIn(p.attempts))
	p.mux.Handle("GET /portal/event", p.signedIn(p.event))
	p.mux.Handle("GET /portal/dead-letters", p.signedIn(p.letters))
	p.mux.Handle("POST /portal/dead-letters/replay", p.signedIn(p.replay))
	p.mux.HandleFunc("/portal/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
}

// portalCSP is the dashboard's policy; frame-ancestors is set per tenant
// (frameFor).
const portalCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'"

func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", portalCSP+"; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if err := p.origins.Check(r); err != nil {
		http.Error(w, "this form was posted from a page of another site or origin ("+err.Error()+"): the portal takes forms from its own pages only", http.StatusForbidden)
		return
	}
	if r.Body != nil && r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	}
	p.mux.ServeHTTP(w, r)
}

// brand is how the portal presents itself to a tenant's customer.
type brand struct {
	Tenant  string
	Product string
	// Themed: the tenant has an accent colour (its theme's stylesheet).
	Themed bool
	// ancestors may frame the portal: the configured ones and the
	// tenant's own.
	ancestors []string
}

// brandOf reads tenant id's settings. An unknown tenant has the default
// brand and only the configured ancestors.
func (p *Portal) brandOf(ctx context.Context, id string) brand {
	b := brand{Tenant: id, Product: "Webhooks", ancestors: p.cfg.FrameAncestors}
	if tenant.ValidateID(id) != nil {
		return b
	}
	t, err := p.cfg.Tenants.Get(ctx, id)
	if err != nil {
		if !errors.Is(err, tenant.ErrNotFound) {
			p.cfg.Logger.Warn("portal: cannot read the tenant's settings", "tenant", id, "err", err)
		}
		return b
	}
	if t.Portal.ProductName != "" {
		b.Product = t.Portal.ProductName
	}
	b.Themed = t.Portal.AccentColor != ""
	b.ancestors = append(append([]string{}, p.cfg.FrameAncestors...), t.Portal.FrameAncestors...)
	return b
}

// Origins are the exact origins that may frame the portal, space
// separated: where the page tells its embedder its height.
func (b brand) Origins() string {
	var out []string
	for _, o := range b.ancestors {
		if !strings.Contains(o, "*") {
			out = append(out, o)
		}
	}
	return strings.Join(out, " ")
}

// frameFor lets the origins b allows frame the answer, if any.
func (p *Portal) frameFor(w http.ResponseWriter, b brand) {
	if len(b.ancestors) == 0 {
		return
	}
	w.Header().Set("Content-Security-Policy", portalCSP+"; frame-ancestors "+strings.Join(b.ancestors, " "))
	w.Header().Del("X-Frame-Options")
}

// theme is a tenant's accent colour as a stylesheet (the CSP allows no
// inline style): validated as #rrggbb when the tenant was saved.
func (p *Portal) theme(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSuffix(r.PathValue("tenant"), ".css")
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=60")
	if tenant.ValidateID(id) != nil {
		return
	}
	t, err := p.cfg.Tenants.Get(r.Context(), id)
	if err != nil || t.Portal.AccentColor == "" || !accentRE.MatchString(t.Portal.AccentColor) {
		return
	}
	c := t.Portal.AccentColor
	// On body: pico sets its colours on the root element, with selectors
	// this one could not outweigh; body's own values are what its
	// descendants inherit.
	fmt.Fprintf(w, "body { --pico-primary: %[1]s; --pico-primary-background: %[1]s; --pico-primary-border: %[1]s; --pico-primary-hover: %[1]s; --pico-primary-hover-background: %[1]s; --pico-primary-underline: %[1]s; }\nheader .brand { color: %[1]s; }\n", c)
}

// accentRE is an accent colour as the theme takes it.
var accentRE = regexp.MustCompile(`^#[0-9a-fA-F]{6}$`)

// clientAddr is r's client address, without the port.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// visitor is who a signed-in request comes from: its session's token,
// what the API says of it, the page's CSRF token and the tenant's brand.
type visitor struct {
	token string
	Key   client.Key
	CSRF  string
	Brand brand
}

// Can reports whether the session has capability c.
func (v *visitor) Can(c string) bool { return v.Key.Can(c) }

// api is the HTTP API's client with the session's token.
func (p *Portal) api(r *http.Request, v *visitor) *client.Client {
	return inProcessClient(p.cfg.API, r, v.token)
}

// signinPage is where a link lands: its script takes the token from the
// fragment (which no server, log or Referer sees), removes it from the
// address bar and history, and exchanges it (exchange).
func (p *Portal) signinPage(w http.ResponseWriter, r *http.Request) {
	b := p.brandOf(r.Context(), r.PathValue("tenant"))
	p.frameFor(w, b)
	p.render(w, r, http.StatusOK, "signin", &visitor{Brand: b}, nil)
}

// exchange spends a link's token (a JSON body {"token": "rpl_..."}) for
// the session cookie, once; limited per client address.
func (p *Portal) exchange(w http.ResponseWriter, r *http.Request) {
	addr := clientAddr(r)
	if p.exchangesSpent(addr) {
		portalProblem(w, http.StatusTooManyRequests, "Too many failed sign-ins from this address: wait a minute and open the link again.")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		portalProblem(w, http.StatusUnsupportedMediaType, "send the link's token as JSON")
		return
	}
	var body struct {
		Token string `json:"token"`
		// Tenant is the sign-in page's: a link of another tenant's is
		// refused, so that a page never signs in as a tenant other than
		// the one whose branding and framing it showed.
		Tenant string `json:"tenant"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		p.exchangeFailed(addr)
		portalProblem(w, http.StatusBadRequest, "the sign-in request could not be read")
		return
	}
	cookie, sess, err := p.cfg.Sessions.ExchangeFor(r.Context(), strings.TrimSpace(body.Token), body.Tenant)
	if errors.Is(err, portal.ErrBadToken) {
		p.exchangeFailed(addr)
		p.cfg.Logger.Warn("portal: a link was refused (unknown, used, expired, ended, or another tenant's)", "client", r.RemoteAddr)
		portalProblem(w, http.StatusUnauthorized, "This link has expired or was already used. Ask for a new one where you got it.")
		return
	}
	if err != nil {
		portalProblem(w, http.StatusServiceUnavailable, "Cannot sign in now: try again in a moment.")
		p.cfg.Logger.Error("portal: exchanging a link failed", "err", err)
		return
	}
	b := p.brandOf(r.Context(), sess.Tenant)
	c := &http.Cookie{Name: portalCookie, Value: cookie, Path: "/portal/", Expires: sess.Expires, HttpOnly: true,
		Secure: p.keys.secureFor(r), SameSite: http.SameSiteLaxMode}
	if len(b.ancestors) > 0 && c.Secure {
		// Embedded in another site's page, the cookie goes only if it is
		// SameSite=None, which browsers accept only Secure; Partitioned
		// keeps it to that embedding site (CHIPS).
		c.SameSite, c.Partitioned = http.SameSiteNoneMode, true
	}
	http.SetCookie(w, c)
	p.cfg.Logger.Info("portal: signed in", "tenant", sess.Tenant, "session", sess.ID, "client", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]string{"next": "/portal/endpoints"})
}

// exchangesSpent reports whether addr used up its failed exchanges:
// only failures count, so that the customers behind one proxy are not
// locked out by signing in, only by someone guessing.
func (p *Portal) exchangesSpent(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.exchanges[addr]
	return l != nil && l.Tokens() < 1
}

// exchangeFailed counts a failed exchange from addr.
func (p *Portal) exchangeFailed(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.exchanges[addr]
	if l == nil {
		if len(p.exchanges) > 10_000 {
			clear(p.exchanges)
		}
		l = rate.NewLimiter(p.cfg.ExchangeRate, p.cfg.ExchangeBurst)
		p.exchanges[addr] = l
	}
	l.Allow()
}

func portalProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "detail": detail})
}

// signedIn runs h for a request with a live session, checking the CSRF
// token of every POST; else it shows why there is none.
func (p *Portal) signedIn(h func(http.ResponseWriter, *http.Request, *visitor)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(portalCookie)
		if err != nil || !portal.IsSessionToken(c.Value) {
			p.signedOut(w, r, "Open the portal with the link you were given.")
			return
		}
		v := &visitor{token: c.Value, CSRF: p.keys.csrf("portal:" + c.Value)}
		if r.Method == http.MethodPost {
			token := r.Header.Get("X-CSRF-Token")
			if token == "" {
				token = r.PostFormValue("csrf")
			}
			if !p.keys.csrfOK("portal:"+c.Value, token) {
				http.Error(w, "this form is stale or did not come from the portal (CSRF check failed): reload the page and try again", http.StatusForbidden)
				return
			}
		}
		k, err := p.api(r, v).Key(r.Context())
		if err != nil {
			if statusOf(err) == http.StatusUnauthorized {
				p.forget(w, r)
				p.signedOut(w, r, "Your session has ended or expired. Open a new link to sign in again.")
				return
			}
			p.fail(w, r, v, err)
			return
		}
		v.Key = k
		v.Brand = p.brandOf(r.Context(), k.Tenant)
		p.frameFor(w, v.Brand)
		h(w, r, v)
	})
}

// forget removes the session cookie: the one of a page of the portal's
// own, and over TLS the partitioned one of a framed portal (a cookie is
// removed only with the attributes it was set with).
func (p *Portal) forget(w http.ResponseWriter, r *http.Request) {
	secure := p.keys.secureFor(r)
	http.SetCookie(w, &http.Cookie{Name: portalCookie, Value: "", Path: "/portal/", MaxAge: -1, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	if secure {
		http.SetCookie(w, &http.Cookie{Name: portalCookie, Value: "", Path: "/portal/", MaxAge: -1, HttpOnly: true, Secure: true,
			SameSite: http.SameSiteNoneMode, Partitioned: true})
	}
}

func (p *Portal) signedOut(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Refresh", "true")
	}
	p.render(w, r, http.StatusUnauthorized, "signed-out", &visitor{Brand: brand{Product: "Webhooks"}}, map[string]any{"Message": msg})
}

func (p *Portal) signout(w http.ResponseWriter, r *http.Request, v *visitor) {
	if err := p.cfg.Sessions.End(r.Context(), v.token); err != nil && !errors.Is(err, portal.ErrBadToken) {
		p.fail(w, r, v, err)
		return
	}
	p.forget(w, r)
	p.render(w, r, http.StatusOK, "signed-out", v, map[string]any{"Message": "You are signed out."})
}

// portalPage is what every portal page's template gets.
type portalPage struct {
	V    *visitor
	Data any
	Now  time.Time
}

func (p *Portal) render(w http.ResponseWriter, r *http.Request, status int, name string, v *visitor, data any) {
	t, ok := p.pages[name]
	if !ok {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	var b strings.Builder
	tmpl := "layout.html"
	if r.Header.Get("HX-Request") == "true" && t.Lookup("partial") != nil {
		tmpl = "partial"
	}
	if err := t.ExecuteTemplate(&b, tmpl, portalPage{V: v, Data: data, Now: p.cfg.Now()}); err != nil {
		p.cfg.Logger.Error("portal: rendering a page failed", "page", name, "err", err)
		http.Error(w, "the page could not be shown: try again in a moment", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail shows what went wrong: a problem the API answered with its status
// (404 for what is not the tenant's), anything else as 502.
func (p *Portal) fail(w http.ResponseWriter, r *http.Request, v *visitor, err error) {
	status := http.StatusBadGateway
	if st := statusOf(err); st != 0 {
		status = st
	}
	// What the API says of the customer's request is theirs to read;
	// anything else (a store or a server that failed, the relays' own
	// settings) is the operator's: logged, not shown.
	msg := "Something went wrong on our side: try again in a moment."
	var e *client.Error
	switch {
	case errors.As(err, &e) && slices.Contains([]int{400, 403, 404, 409, 422, 429}, e.Status) && e.Detail != "":
		msg = e.Detail
	default:
		p.cfg.Logger.Warn("portal: a page failed", "path", r.URL.Path, "status", status, "err", err)
	}
	p.render(w, r, status, "error", v, map[string]any{"Status": status, "Error": msg})
}
