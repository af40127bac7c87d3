package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/tenant"
)

// OpenAPI is the API's OpenAPI 3.1 document, served at /v1/openapi.json;
// the tests check every handler against it. It is openapi.json with each
// tenant's resources under /v1/tenants/{tenant} (withTenantPaths).
var OpenAPI = withTenantPaths(openAPISource)

//go:embed openapi.json
var openAPISource []byte

// Config configures the API server.
type Config struct {
	// JS, Keys and Producer are required.
	JS       jetstream.JetStream
	Keys     *Keys
	Producer *publish.Producer
	// Dests is the destination store, opened with relay's secret key (if
	// it has one) so that the secrets it stores are sealed like the
	// CLI's. Optional: without it the destination resources answer 503.
	Dests *destination.Store
	// DeadLetters is the dead-letter store. Optional: without it the
	// dead-letter resources answer 503.
	DeadLetters *dlq.Store
	// Tenants is the tenant store. Optional: without it the tenant
	// resources answer 503.
	Tenants *tenant.Store
	// EventTypes is the event-type catalog's store. Optional: without it
	// the event-type resources answer 503.
	EventTypes *eventtype.Store
	// Catalog checks typed events against their type's schema as they are
	// published. Optional: without it nothing is checked.
	Catalog *eventtype.Catalog
	// Policies are the tenants' limits, enforced as events are published
	// (PublishRate) and destinations added (MaxDestinations). Optional:
	// without it no tenant is limited.
	Policies *tenant.Policies
	// Portal is the customer portal's session store. Optional: without
	// it the portal-session resources answer 503.
	Portal *portal.Store
	// PortalURL is where the customer portal is served, for the links
	// minted. Optional: this server's own /portal/.
	PortalURL string
	// EgressIPs are the addresses deliveries come from, as the operator
	// declared them (--egress-ips), for receivers to allowlist: GET
	// /v1/egress. Optional.
	EgressIPs []string
	// Replicas is how many relay replicas serve the API, each enforcing
	// an equal share of a tenant's publish rate. Optional: 1.
	Replicas func() int
	Logger   *slog.Logger
	// MaxBody is the largest request body accepted, in bytes. Optional,
	// default 1 MiB + 64 KiB (an event of relay run's default
	// --max-event-size, and its JSON around it).
	MaxBody int64
	// MaxBatchBody is the largest body of POST /v1/events:batch, in
	// bytes. Optional, default 8 MiB.
	MaxBatchBody int64
	// BodyTimeout bounds the reading of a request body, from the end of
	// its headers: a client that stalls gets 408. Optional, default 1m.
	BodyTimeout time.Duration
	// FailedAuthRate and FailedAuthBurst bound the requests with a wrong
	// key per client address: beyond, 429 until the bucket refills.
	// Optional, default 1 a second with a burst of 10.
	FailedAuthRate  rate.Limit
	FailedAuthBurst int
}

// Server serves the HTTP API.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu     sync.Mutex
	failed map[string]*rate.Limiter // by client address
	// known are tenants seen to exist, and when (see knows).
	known map[string]time.Time
	// rates are the tenants' publish rate limiters (see allowPublish).
	rates map[string]*tenantRate
	// testEvents limit the test events of each portal session.
	testEvents map[string]*rate.Limiter
	// audits bounds the audit events being published at once.
	audits chan struct{}
	// jwks are the key sets GET /v1/jwks.json serves.
	jwks jwksCache
}

// NewServer returns the API's handler.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 1<<20 + 64<<10
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = time.Minute
	}
	if cfg.FailedAuthRate == 0 {
		cfg.FailedAuthRate, cfg.FailedAuthBurst = 1, 10
	}
	if cfg.MaxBatchBody == 0 {
		cfg.MaxBatchBody = 8 << 20
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), failed: map[string]*rate.Limiter{}, known: map[string]time.Time{}, rates: map[string]*tenantRate{},
		testEvents: map[string]*rate.Limiter{}, audits: make(chan struct{}, 64)}
	s.mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenAPI)
	})
	// Public keys are public: no API key.
	s.mux.HandleFunc("GET /v1/jwks.json", s.serveJWKS)
	s.mux.HandleFunc("GET /v1/tenants/{tenant}/jwks.json", s.serveJWKS)
	// Each route: the key's scope it needs and who may call it (auth),
	// then what its handler works on (handle).
	for _, rt := range []struct {
		pattern string
		scope   Scope
		ten     tenancy
		needs   needs
		h       func(*call)
	}{
		{"POST /v1/events", ScopePublish, tenanted, 0, s.publish},
		{"POST /v1/events:batch", ScopePublish, tenanted, 0, s.publishBatch},
		{"GET /v1/stats", ScopeRead, tenanted, 0, s.stats},
		{"GET /v1/key", scopeAny, anyKey, 0, s.whoami},
		{"GET /v1/egress", scopeAny, anyKey, 0, s.egress},
		{"GET /v1/destination-types", scopeAny, anyKey, 0, s.destinationTypes},
		{"GET /v1/destinations/{name}/retrying", ScopeRead, tenanted, needName, s.listRetrying},
		{"POST /v1/destinations/{name}/retrying/{id}/skip", ScopeAdmin, tenanted, needName, s.skipRetrying},
		{"GET /v1/attempts", ScopeRead, tenanted, 0, s.attempts},
		{"GET /v1/events/{id}", ScopeRead, tenanted, needEventID, s.event},
		{"GET /v1/events/{id}/body", ScopeRead, tenanted, needEventID, s.eventBody},
		{"GET /v1/destinations", ScopeRead, tenanted, needDests, s.listDests},
		{"POST /v1/destinations", ScopeAdmin, tenanted, needDests, s.createDest},
		{"GET /v1/destinations/{name}", ScopeRead, tenanted, needName, s.getDest},
		{"PATCH /v1/destinations/{name}", ScopeAdmin, tenanted, needName, s.updateDest},
		{"DELETE /v1/destinations/{name}", ScopeAdmin, tenanted, needName, s.removeDest},
		{"POST /v1/destinations/{name}/pause", ScopeAdmin, tenanted, needName, s.pauseDest},
		{"POST /v1/destinations/{name}/resume", ScopeAdmin, tenanted, needName, s.resumeDest},
		{"POST /v1/destinations/{name}/rotate-secret", ScopeAdmin, tenanted, needName, s.rotateSecret},
		{"GET /v1/dead-letters", ScopeRead, tenanted, needLetters, s.listLetters},
		{"GET /v1/dead-letters/{seq}", ScopeRead, tenanted, needSeq, s.getLetter},
		{"GET /v1/dead-letters/{seq}/body", ScopeRead, tenanted, needSeq, s.letterBody},
		{"POST /v1/dead-letters/replay", ScopeAdmin, tenanted, needLetters, s.replayLetters},
		{"POST /v1/dead-letters/purge", ScopeAdmin, tenanted, needLetters, s.purgeLetters},
		{"GET /v1/event-types", ScopeRead, anyKey, needTypes, s.listEventTypes},
		{"PUT /v1/event-types/{type}", ScopeAdmin, globalKey, needTypes, s.putEventType},
		{"GET /v1/event-types/{type}", ScopeRead, anyKey, needTypes, s.getEventType},
		{"DELETE /v1/event-types/{type}", ScopeAdmin, globalKey, needTypes, s.deleteEventType},
		{"GET /v1/tenants", ScopeRead, ownTenant, needTenants, s.listTenants},
		{"PUT /v1/tenants/{tenant}", ScopeAdmin, globalKey, needTenants, s.putTenant},
		{"GET /v1/tenants/{tenant}", ScopeRead, ownTenant, needTenant, s.getTenant},
		{"DELETE /v1/tenants/{tenant}", ScopeAdmin, globalKey, needTenant, s.deleteTenant},
		{"GET /v1/tenants/{tenant}/keys", ScopeAdmin, globalKey, needTenant, s.listTenantKeys},
		{"POST /v1/tenants/{tenant}/keys", ScopeAdmin, globalKey, needTenant, s.createTenantKey},
		{"DELETE /v1/tenants/{tenant}/keys/{key}", ScopeAdmin, globalKey, needTenant, s.revokeTenantKey},
		{"POST /v1/tenants/{tenant}/portal-sessions", ScopeAdmin, ownTenant, needTenant, s.createPortalSession},
		{"DELETE /v1/tenants/{tenant}/portal-sessions", ScopeAdmin, ownTenant, needTenant, s.endPortalSessions},
		{"GET /v1/destinations/{name}/secret", ScopeAdmin, tenanted, needName, s.revealSecret},
		{"POST /v1/filters:test", ScopeRead, anyKey, 0, s.testFilter},
	} {
		s.mux.Handle(rt.pattern, s.auth(rt.pattern, rt.scope, rt.ten, s.handle(rt.needs, rt.h)))
		if _, path, _ := strings.Cut(rt.pattern, " "); tenantedPath(path) != (rt.ten == tenanted) {
			panic("api: route " + rt.pattern + ": its tenancy and tenantedPrefixes disagree")
		}
		if rt.ten == tenanted {
			// The same, for a tenant named in the path.
			method, path, _ := strings.Cut(rt.pattern, " ")
			s.mux.Handle(method+" "+TenantPath("{tenant}", strings.TrimPrefix(path, "/v1")), s.auth(rt.pattern, rt.scope, rt.ten, s.handle(rt.needs|needScope, rt.h)))
		}
	}
	s.mux.HandleFunc("/", s.notFound)
	return s
}

// tenantKnownFor is how long the server trusts that a tenant it saw
// exists.
const tenantKnownFor = 5 * time.Second

// knows reports whether tenant id was seen to exist within tenantKnownFor.
func (s *Server) knows(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.known[id]
	return ok && time.Since(at) < tenantKnownFor
}

func (s *Server) seen(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) > 10_000 {
		clear(s.known)
	}
	s.known[id] = time.Now()
}

func (s *Server) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, id)
}

// notFound answers a request no route takes: 405 with the methods the
// path has, when it has some, else 404.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		a := strings.Join(allow, ", ")
		w.Header().Set("Allow", a)
		problem(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s %s: use %s (see /v1/openapi.json)", r.Method, r.URL.Path, a))
		return
	}
	problem(w, http.StatusNotFound, "", fmt.Sprintf("no such resource: %s %s (see /v1/openapi.json)", r.Method, r.URL.Path))
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// problem writes an RFC 9457 problem: status, the request field at fault
// (if any) and what was wrong.
func problem(w http.ResponseWriter, status int, field, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	body := map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail}
	if field != "" {
		body["field"] = field
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// clientAddr is the request's client address, without the port.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// portalCaps are the capabilities a customer portal's session needs for
// the routes that change something: a session may read its tenant's
// resources, and change nothing else (403), whatever its capabilities.
var portalCaps = map[string]portal.Capability{
	"POST /v1/events":                            portal.ManageEndpoints, // a test event (portalTestEvent)
	"POST /v1/destinations":                      portal.ManageEndpoints, // url, types, filter (portalAllows)
	"PATCH /v1/destinations/{name}":              portal.ManageEndpoints,
	"POST /v1/destinations/{name}/pause":         portal.ManageEndpoints,
	"POST /v1/destinations/{name}/resume":        portal.ManageEndpoints,
	"GET /v1/destinations/{name}/secret":         portal.ViewSecret,
	"POST /v1/destinations/{name}/rotate-secret": portal.RotateSecret,
	"POST /v1/dead-letters/replay":               portal.Replay,
}

// auth lets through requests with a valid key whose scope allows need.
// A customer portal's session token (portal.IsSessionToken) is a key of
// its tenant, scope admin, limited to the routes and capabilities of
// portalCaps; what it changes is audited (audit). pattern is the route's.
// Failed attempts are limited per client address (beyond the limit they
// get 429, not 401) and logged with the key's name when the key exists
// (never the key). A valid key always gets through: clients behind one
// proxy share its address, and one of them sending wrong keys must not
// lock the others out.
func (s *Server) auth(pattern string, need Scope, ten tenancy, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := clientAddr(r)
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			if s.fail(w, addr) {
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="relay"`)
			problem(w, http.StatusUnauthorized, "", "an API key is required: 'Authorization: Bearer <key>' (relay api-key create)")
			return
		}
		token = strings.TrimSpace(token)
		var key Key
		var err error
		if portal.IsSessionToken(token) && s.cfg.Portal != nil {
			key, err = s.portalKey(r.Context(), token)
		} else {
			key, err = s.cfg.Keys.Verify(r.Context(), token)
		}
		switch {
		case errors.Is(err, ErrBadKey):
			if s.fail(w, addr) {
				return
			}
			attrs := []any{"client", addr, "method", r.Method, "path", r.URL.Path}
			if key.Name != "" {
				attrs = append(attrs, "key", key.Name) // its id is right, its secret wrong
			}
			s.cfg.Logger.Warn("API request with an invalid key", attrs...)
			w.Header().Set("WWW-Authenticate", `Bearer realm="relay", error="invalid_token"`)
			problem(w, http.StatusUnauthorized, "", "invalid API key")
			return
		case err != nil:
			problem(w, http.StatusServiceUnavailable, "", "cannot check the API key now: "+err.Error())
			return
		}
		// A tenant key learns nothing of another tenant: whatever of
		// another's it names is not found, before its scope is looked at.
		if key.Tenant != "" {
			if pt := r.PathValue("tenant"); pt != "" && pt != key.Tenant && ten != anyKey {
				problem(w, http.StatusNotFound, "", fmt.Sprintf("%v: %s", tenant.ErrNotFound, pt))
				return
			}
			if ten == globalKey {
				problem(w, http.StatusForbidden, "", fmt.Sprintf("the key %q is tenant %s's; this needs a key of no tenant", key.Name, key.Tenant))
				return
			}
		}
		if !key.Scope.Allows(need) {
			s.cfg.Logger.Warn("API request beyond its key's scope", "key", key.Name, "scope", key.Scope, "client", addr, "method", r.Method, "path", r.URL.Path)
			needs := string(need)
			if need != ScopeAdmin {
				needs += " or admin"
			}
			problem(w, http.StatusForbidden, "", fmt.Sprintf("the key %q has scope %s; this needs %s", key.Name, key.Scope, needs))
			return
		}
		if key.Session != "" && ten == ownTenant {
			// The tenant's record is the sender's: its metadata, limits
			// and settings are not shown to its customers.
			problem(w, http.StatusForbidden, "", "a customer portal session may not read the tenant's record")
			return
		}
		if key.Session != "" && need != ScopeRead && need != scopeAny {
			c, ok := portalCaps[pattern]
			if !ok {
				s.audit(pattern, key, refuse("a customer portal session may not do this"))(w, r)
				return
			}
			if !slices.Contains(key.Capabilities, c) {
				s.audit(pattern, key, refuse(fmt.Sprintf("this portal session does not have the %s capability", c)))(w, r)
				return
			}
			h = s.audit(pattern, key, h)
		}
		h(w, r.WithContext(context.WithValue(r.Context(), keyOfRequest{}, key)))
	})
}

// tenancy is who may call a route (auth), as far as tenants go.
type tenancy uint8

const (
	// tenanted: a tenant's resources, at /v1/... for the request's
	// key's tenant (none for a key of no tenant), and at
	// /v1/tenants/{tenant}/... (TenantPath) for the tenant named, which
	// a tenant key may only name its own of.
	tenanted tenancy = iota
	// ownTenant: the tenants themselves; a tenant key sees its own only.
	ownTenant
	// anyKey: what every key may read (the event-type catalog).
	anyKey
	// globalKey: keys of no tenant only (a tenant key gets 404 for
	// another tenant's, 403 else).
	globalKey
)

// TenantPath is the path of resource (such as /destinations/orders) of
// tenant id.
func TenantPath(id, resource string) string { return "/v1/tenants/" + id + resource }

// keyOfRequest is the context key of the request's API key (a Key,
// without its hash), set by auth.
type keyOfRequest struct{}

// fail counts a failed attempt from addr. Beyond the address's budget it
// answers 429 itself, without a log line (a flood does not flood the log),
// and returns true.
func (s *Server) fail(w http.ResponseWriter, addr string) bool {
	s.mu.Lock()
	l := s.failed[addr]
	if l == nil {
		if len(s.failed) > 10_000 {
			clear(s.failed) // bounded: a flood of addresses starts over
		}
		l = rate.NewLimiter(s.cfg.FailedAuthRate, s.cfg.FailedAuthBurst)
		s.failed[addr] = l
	}
	ok := l.Allow()
	s.mu.Unlock()
	if !ok {
		problem(w, http.StatusTooManyRequests, "", "too many requests with a missing or wrong API key from this address; wait and try again")
	}
	return !ok
}

// readJSON decodes r's JSON body into v: a JSON content type, at most
// MaxBody bytes, no unknown field, nothing after the value. It writes the
// problem and returns false when the body is not that.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	return s.readJSONUpTo(w, r, s.cfg.MaxBody, v)
}

// readJSONUpTo is readJSON with a body of at most limit bytes.
func (s *Server) readJSONUpTo(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "", fmt.Sprintf("send the body as application/json, not %q", r.Header.Get("Content-Type")))
		return false
	}
	// A client that stalls in its body does not hold the connection (and
	// the buffer) for ever. Not every connection supports it (HTTP/2 in
	// tests); the error is then ignored.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	stalled := false
	defer func() {
		if !stalled { // else the server would wait for the rest of it
			_ = rc.SetReadDeadline(time.Time{})
		}
	}()
	// Read into a buffer of the announced length, up to preallocMax:
	// io.ReadAll would grow one step by step, copying a large batch
	// several times; beyond preallocMax the buffer grows as bytes come, so
	// an announced length alone reserves little.
	var buf bytes.Buffer
	if n := r.ContentLength; n > 0 && n <= limit {
		buf.Grow(int(min(n, preallocMax)) + bytes.MinRead)
	}
	_, err = buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	body := buf.Bytes()
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		problem(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("the body is larger than %d bytes", limit))
		return false
	case errors.Is(err, os.ErrDeadlineExceeded):
		stalled = true
		w.Header().Set("Connection", "close")
		problem(w, http.StatusRequestTimeout, "", fmt.Sprintf("the body did not arrive within %s (%d bytes came)", s.cfg.BodyTimeout, len(body)))
		return false
	case err != nil:
		problem(w, http.StatusBadRequest, "", "cannot read the body: "+err.Error())
		return false
	}
	if f, ok := v.(fastDecoder); ok && f.fastDecode(body) {
		return true
	}
	if len(bytes.TrimLeft(body, jsonSpace)) == 0 {
		problem(w, http.StatusBadRequest, "", "the body is empty: send a JSON object")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field, detail := "", err.Error()
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			field = te.Field
			detail = fmt.Sprintf("%s must be %s, not a JSON %s", te.Field, jsonKind(te.Type), te.Value)
		case errors.As(err, &se):
			detail = fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
		case errors.Is(err, io.ErrUnexpectedEOF):
			detail = "it ends before its JSON value does"
		default:
			if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				field = strings.Trim(f, `"`)
				detail = fmt.Sprintf("unknown field %q", field)
			}
		}
		problem(w, http.StatusBadRequest, field, "the body is not a valid request: "+detail)
		return false
	}
	// Nothing but white space after the value (Decoder.More would let a
	// stray '}' or ']' pass).
	if rest := bytes.TrimLeft(body[dec.InputOffset():], jsonSpace); len(rest) > 0 {
		problem(w, http.StatusBadRequest, "", fmt.Sprintf("the body has more after its JSON value, at byte %d", len(body)-len(rest)+1))
		return false
	}
	return true
}

// preallocMax is the most readJSON reserves for a body before it comes.
const preallocMax = 256 << 10

// jsonSpace is what JSON counts as white space.
const jsonSpace = " \t\r\n"

// jsonKind names what a field of Go type t takes, in JSON's words.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another type"
}

func (s *Server) stats(c *call) {
	all, err := relay.Stats(c.within(30*time.Second), s.cfg.JS, nil)
	if err != nil {
		c.problem(http.StatusServiceUnavailable, "", "cannot read the destinations' state now: "+err.Error())
		return
	}
	out := []relay.DestStats{}
	for _, st := range all {
		if c.all {
			out = append(out, st) // every tenant's, named tenant=name
		} else if st.Tenant == c.scope {
			st.Dest = strings.TrimPrefix(st.Dest, stream.DestRef(st.Tenant, ""))
			out = append(out, st)
		}
	}
	c.json(http.StatusOK, map[string]any{"destinations": out})
}
