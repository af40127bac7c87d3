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
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// OpenAPI is the API's OpenAPI 3.1 document, served at /v1/openapi.json;
// the tests check every handler against it.
//
//go:embed openapi.json
var OpenAPI []byte

// Config configures the API server.
type Config struct {
	JS       jetstream.JetStream
	Keys     *Keys
	Producer *relay.Producer
	Logger   *slog.Logger
	// MaxBody is the largest request body accepted, in bytes. Optional,
	// default 1 MiB + 64 KiB (an event of relay run's default
	// --max-event-size, and its JSON around it).
	MaxBody int64
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
}

// NewServer returns the API's handler.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 1<<20 + 64<<10
	}
	if cfg.FailedAuthRate == 0 {
		cfg.FailedAuthRate, cfg.FailedAuthBurst = 1, 10
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), failed: map[string]*rate.Limiter{}}
	s.mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenAPI)
	})
	s.mux.Handle("POST /v1/events", s.auth(ScopePublish, s.publish))
	s.mux.Handle("GET /v1/stats", s.auth(ScopeRead, s.stats))
	allowed := map[string]string{"/v1/openapi.json": "GET", "/v1/events": "POST", "/v1/stats": "GET"}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow, ok := allowed[r.URL.Path]; ok {
			w.Header().Set("Allow", allow)
			problem(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s %s: use %s (see /v1/openapi.json)", r.Method, r.URL.Path, allow))
			return
		}
		problem(w, http.StatusNotFound, "", fmt.Sprintf("no such resource: %s %s (see /v1/openapi.json)", r.Method, r.URL.Path))
	})
	return s
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

// auth lets through requests with a valid key whose scope allows need.
// Failed attempts are limited per client address and logged with the
// key's name when the key exists (never the key).
func (s *Server) auth(need Scope, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := clientAddr(r)
		if s.throttled(addr) {
			problem(w, http.StatusTooManyRequests, "", "too many requests with a missing or wrong API key from this address; wait and try again")
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			s.fail(addr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="relay"`)
			problem(w, http.StatusUnauthorized, "", "an API key is required: 'Authorization: Bearer <key>' (relay api-key create)")
			return
		}
		key, err := s.cfg.Keys.Verify(r.Context(), strings.TrimSpace(token))
		switch {
		case errors.Is(err, ErrBadKey):
			s.fail(addr)
			s.cfg.Logger.Warn("API request with an invalid key", "client", addr, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="relay", error="invalid_token"`)
			problem(w, http.StatusUnauthorized, "", "invalid API key")
			return
		case err != nil:
			problem(w, http.StatusServiceUnavailable, "", "cannot check the API key now: "+err.Error())
			return
		}
		if !key.Scope.Allows(need) {
			s.cfg.Logger.Warn("API request beyond its key's scope", "key", key.Name, "scope", key.Scope, "client", addr, "method", r.Method, "path", r.URL.Path)
			problem(w, http.StatusForbidden, "", fmt.Sprintf("the key %q has scope %s; this needs %s or admin", key.Name, key.Scope, need))
			return
		}
		h(w, r)
	})
}

// throttled reports whether addr used up its failed attempts.
func (s *Server) throttled(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.failed[addr]
	return l != nil && l.Tokens() < 1
}

// fail counts a failed attempt from addr.
func (s *Server) fail(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.failed[addr]
	if l == nil {
		if len(s.failed) > 10_000 {
			clear(s.failed) // bounded: a flood of addresses starts over
		}
		l = rate.NewLimiter(s.cfg.FailedAuthRate, s.cfg.FailedAuthBurst)
		s.failed[addr] = l
	}
	l.Allow()
}

// readJSON decodes r's JSON body into v: a JSON content type, at most
// MaxBody bytes, no unknown field, nothing after the value. It writes the
// problem and returns false when the body is not that.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "", fmt.Sprintf("send the body as application/json, not %q", r.Header.Get("Content-Type")))
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		problem(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("the body is larger than %d bytes", s.cfg.MaxBody))
		return false
	case err != nil:
		problem(w, http.StatusBadRequest, "", "cannot read the body: "+err.Error())
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := ""
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field = te.Field
		} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(f, `"`)
		}
		problem(w, http.StatusBadRequest, field, "the body is not a valid request: "+err.Error())
		return false
	}
	if dec.More() {
		problem(w, http.StatusBadRequest, "", "the body has more than one JSON value")
		return false
	}
	return true
}

// newEvent is POST /v1/events's body.
type newEvent struct {
	Dest    string            `json:"dest"`
	Type    string            `json:"type"`
	Key     string            `json:"key"`
	ID      string            `json:"id"`
	Headers map[string]string `json:"headers"`
	Data    json.RawMessage   `json:"data"`
}

func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	var ev newEvent
	if !s.readJSON(w, r, &ev) {
		return
	}
	if idem := r.Header.Get("Idempotency-Key"); idem != "" {
		if ev.ID != "" && ev.ID != idem {
			problem(w, http.StatusUnprocessableEntity, "id", fmt.Sprintf("the body's id %q and the Idempotency-Key %q differ: give one, or the same", ev.ID, idem))
			return
		}
		ev.ID = idem
	}
	switch {
	case len(ev.Data) == 0:
		problem(w, http.StatusUnprocessableEntity, "data", "data is required: the body to POST to the destination (any JSON value)")
		return
	case ev.Dest == "" && ev.Type == "":
		problem(w, http.StatusUnprocessableEntity, "dest", "give dest (one destination) or type (every destination subscribed to it)")
		return
	case ev.Dest != "" && ev.Type != "":
		problem(w, http.StatusUnprocessableEntity, "type", "give dest or type, not both")
		return
	}
	for _, c := range []struct {
		field, value string
		check        func(string) error
	}{{"dest", ev.Dest, stream.ValidateDestName}, {"type", ev.Type, stream.ValidateEventType}, {"id", ev.ID, relay.ValidateEventID}} {
		if c.value == "" {
			continue
		}
		if err := c.check(c.value); err != nil {
			problem(w, http.StatusUnprocessableEntity, c.field, err.Error())
			return
		}
	}
	for k, v := range ev.Headers {
		if err := relay.ValidateEventHeader(k, v); err != nil {
			problem(w, http.StatusUnprocessableEntity, "headers", err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	res, err := s.cfg.Producer.Publish(ctx, relay.Event{Dest: ev.Dest, Type: ev.Type, Key: ev.Key, ID: ev.ID, Headers: ev.Headers, Data: ev.Data})
	switch {
	case errors.Is(err, relay.ErrUnknownDestination):
		problem(w, http.StatusNotFound, "dest", err.Error())
	case errors.Is(err, relay.ErrEventTooLarge):
		problem(w, http.StatusRequestEntityTooLarge, "data", err.Error())
	case err != nil:
		problem(w, http.StatusServiceUnavailable, "", "the event was not stored: "+err.Error())
	default:
		writeJSON(w, http.StatusAccepted, map[string]any{"id": res.ID, "seq": res.Seq, "duplicate": res.Duplicate})
	}
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	all, err := relay.Stats(ctx, s.cfg.JS, nil)
	if err != nil {
		problem(w, http.StatusServiceUnavailable, "", "cannot read the destinations' state now: "+err.Error())
		return
	}
	if all == nil {
		all = []relay.DestStats{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"destinations": all})
}
