// Package ui is relay's web dashboard, served at /ui beside the HTTP API.
// Its pages are rendered on the server with html/template (which escapes
// everything that comes from an event or a destination) and made live with
// htmx; the assets are embedded, so the page works offline. It reads and
// acts only through the HTTP API, in process, with the API key the user
// signed in with: what a key may not do through the API, it may not do
// here.
package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

//go:embed static templates
var files embed.FS

// Config configures the dashboard.
type Config struct {
	// API is the HTTP API's handler (api.NewServer): every page reads and
	// acts through it. Required.
	API http.Handler
	// JS stores the secret that seals session cookies, shared by every
	// replica. Required.
	JS jetstream.JetStream
	// Secure marks the session cookie Secure: set it when the dashboard is
	// served over TLS.
	Secure bool
	// SessionTTL is how long a sign-in lasts. Optional, default 12h.
	SessionTTL time.Duration
	// Refresh is how often the overview updates itself. Optional, default
	// 2s.
	Refresh time.Duration
	Logger  *slog.Logger
	// Now is the clock. Optional, default time.Now.
	Now func() time.Time
}

// UI serves the dashboard.
type UI struct {
	cfg      Config
	sessions *sessions
	pages    map[string]*template.Template
	mux      *http.ServeMux
	// origins refuses a form posted from another origin.
	origins *http.CrossOriginProtection
}

// New returns the dashboard's handler, to be served at /ui/.
func New(ctx context.Context, cfg Config) (*UI, error) {
	if cfg.API == nil || cfg.JS == nil {
		return nil, errors.New("ui: Config.API and Config.JS are required")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	secret, err := loadSecret(ctx, cfg.JS)
	if err != nil {
		return nil, err
	}
	ss, err := newSessions(secret, cfg.SessionTTL, cfg.Secure, cfg.Now)
	if err != nil {
		return nil, err
	}
	u := &UI{cfg: cfg, sessions: ss, mux: http.NewServeMux(), origins: http.NewCrossOriginProtection()}
	if err := u.parse(); err != nil {
		return nil, err
	}
	u.routes()
	return u, nil
}

// parse reads each page's template with the layout.
func (u *UI) parse() error {
	u.pages = map[string]*template.Template{}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		page := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if page == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs(u.cfg.Now)).ParseFS(files, "templates/layout.html", n)
		if err != nil {
			return fmt.Errorf("ui: template %s: %w", n, err)
		}
		u.pages[page] = t
	}
	return nil
}

func (u *UI) routes() {
	static, _ := fs.Sub(files, "static")
	u.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticFiles(http.FS(static))))
	u.mux.HandleFunc("GET /ui/login", u.loginPage)
	u.mux.HandleFunc("POST /ui/login", u.login)
	u.mux.Handle("POST /ui/logout", u.signedIn(u.logout))
	u.mux.Handle("GET /ui/{$}", u.signedIn(u.overview))
	u.mux.Handle("GET /ui/live/overview", u.signedIn(u.overviewLive))
	u.mux.Handle("GET /ui/destinations/{name}", u.signedIn(u.destPage))
	u.mux.Handle("POST /ui/destinations/{name}/{action}", u.signedIn(u.destAction))
	u.mux.Handle("POST /ui/destinations/{name}/retrying/{id}/skip", u.signedIn(u.skip))
	u.mux.Handle("GET /ui/dead-letters", u.signedIn(u.letters))
	u.mux.Handle("GET /ui/dead-letters/{seq}", u.signedIn(u.letter))
	u.mux.Handle("POST /ui/dead-letters/{action}", u.signedIn(u.letterAction))
	u.mux.Handle("GET /ui/events", u.signedIn(u.eventPage))
	u.mux.Handle("GET /ui/events/body", u.signedIn(u.eventBody))
	u.mux.Handle("GET /ui/dead-letters/{seq}/body", u.signedIn(u.letterBody))
	u.mux.Handle("GET /ui/send", u.signedIn(u.sendPage))
	u.mux.Handle("POST /ui/send", u.signedIn(u.send))
	u.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
}

// csp forbids every script but the dashboard's own files: no inline
// script, no eval, no other origin.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if err := u.origins.Check(r); err != nil {
		// A POST from a page of another origin (Sec-Fetch-Site, or an
		// Origin that is not this host): on top of the CSRF tokens, which
		// a sibling host able to set cookies could get around at sign-in.
		http.Error(w, "this form was posted from a page of another site or origin ("+err.Error()+"): the dashboard takes forms from its own pages only", http.StatusForbidden)
		return
	}
	if r.Body != nil && r.Method == http.MethodPost {
		// A form: a sign-in, an action, or a test event (at most the
		// API's body); without a bound, ParseForm would take a multipart
		// body of 32 MiB from anyone, signed in or not.
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	}
	u.mux.ServeHTTP(w, r)
}

// maxForm bounds a form's body: a test event of relay run's default
// --max-event-size, and the form around it.
const maxForm = 1<<20 + 64<<10

// staticFiles serves the embedded assets, cached for a day.
func staticFiles(fsys http.FileSystem) http.Handler {
	fh := http.FileServer(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		fh.ServeHTTP(w, r)
	})
}

// user is who a request comes from: the key of their session, what the
// API says of it, and the session's CSRF token.
type user struct {
	key   string
	Name  string
	Scope string
	CSRF  string
}

// CanAct reports whether the key may change anything (admin).
func (u user) CanAct() bool { return u.Scope == "admin" }

// CanPublish reports whether the key may publish.
func (u user) CanPublish() bool { return u.Scope == "admin" || u.Scope == "publish" }

// signedIn runs h for a request with a valid session (else it goes to the
// sign-in page), checking the CSRF token of every POST.
func (u *UI) signedIn(h func(http.ResponseWriter, *http.Request, user)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ss, cookie, ok := u.sessions.open(r)
		if !ok {
			u.toLogin(w, r, "")
			return
		}
		if r.Method == http.MethodPost {
			token := r.Header.Get("X-CSRF-Token")
			if token == "" {
				token = r.PostFormValue("csrf")
			}
			if !u.sessions.csrfOK(cookie, token) {
				http.Error(w, "this form is stale or did not come from the dashboard (CSRF check failed): reload the page and try again", http.StatusForbidden)
				return
			}
		}
		k, err := u.apiFor(r, ss.Key).Key(r.Context())
		if err != nil {
			if statusOf(err) == http.StatusUnauthorized {
				u.sessions.end(w, r)
				u.toLogin(w, r, "Your API key is no longer valid (revoked?): sign in again.")
				return
			}
			u.fail(w, r, user{}, err)
			return
		}
		h(w, r, user{key: ss.Key, Name: k.Name, Scope: k.Scope, CSRF: u.sessions.csrf(cookie)})
	})
}

// toLogin sends the browser to the sign-in page (an htmx request is told
// to go there as a whole page).
func (u *UI) toLogin(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Redirect", "/ui/login")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if msg != "" {
		u.loginForm(w, r, http.StatusUnauthorized, msg)
		return
	}
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// page is what every page's template gets.
type page struct {
	User    user
	Title   string
	Data    any
	Refresh time.Duration
	Now     time.Time
}

// render writes page name with data.
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, name string, usr user, data any) {
	t, ok := u.pages[name]
	if !ok {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	var b strings.Builder
	tmpl := "layout.html"
	if r.Header.Get("HX-Request") == "true" && t.Lookup("partial") != nil {
		tmpl = "partial"
	}
	if err := t.ExecuteTemplate(&b, tmpl, page{User: usr, Data: data, Refresh: u.cfg.Refresh, Now: u.cfg.Now()}); err != nil {
		u.cfg.Logger.Error("dashboard: rendering a page failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail shows what went wrong: a problem the API answered with its status,
// anything else as 502.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, usr user, err error) {
	status := http.StatusBadGateway
	if st := statusOf(err); st != 0 {
		status = st
	}
	u.render(w, r, status, "error", usr, map[string]any{"Status": status, "Error": err.Error()})
}
