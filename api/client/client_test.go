package client

import (
	"bytes"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
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
)

// env is a real NATS server with relay's streams, the API over it, a relay
// delivering to a sink, and a client for each key scope.
type env struct {
	t       *testing.T
	url     string
	sink    *sink
	admin   *Client
	read    *Client
	publish *Client
	// keys by scope, to build other clients.
	keys map[api.Scope]string
	// indexed are the events whose delivery-log records the relay indexed.
	indexed *indexedIDs
}

// indexedIDs are the event ids relay signalled indexed in the delivery log
// (TestSignals.LogIndexed).
type indexedIDs struct {
	mu      sync.Mutex
	seen    map[string]bool
	changed chan struct{} // closed, and replaced, at each add
}

func (x *indexedIDs) add(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seen[id] = true
	close(x.changed)
	x.changed = make(chan struct{})
}

// waitIndexed waits until relay indexed records of each of ids: a lookup
// by event id (Event) finds them from then on.
func (e *env) waitIndexed(ids ...string) {
	e.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		e.indexed.mu.Lock()
		missing := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return e.indexed.seen[id] })
		changed := e.indexed.changed
		e.indexed.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			e.t.Fatalf("delivery-log records of %v not indexed within 30s", missing)
		}
	}
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := streamtest.Start(t)
	ctx := context.Background()
	keys, err := api.OpenKeys(ctx, srv.JS)
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, srv.JS)
	require.NoError(t, err)
	dests, err := destination.NewStore(ctx, srv.JS)
	require.NoError(t, err)
	letters, err := dlq.Open(ctx, srv.JS)
	require.NoError(t, err)
	tenants, err := tenant.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	types, err := eventtype.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	catalog, err := eventtype.WatchCatalog(ctx, srv.JS, logger)
	require.NoError(t, err)
	t.Cleanup(catalog.Stop)
	sessions, err := portal.Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	hs := httptest.NewServer(api.NewServer(api.Config{JS: srv.JS, Keys: keys, Producer: prod, Dests: dests, DeadLetters: letters, Tenants: tenants, EventTypes: types, Catalog: catalog, Portal: sessions,
		MaxBody: 64 << 10, MaxBatchBody: 256 << 10, Logger: logger}))
	t.Cleanup(hs.Close)

	runCtx, cancel := context.WithCancel(context.Background())
	indexed := &indexedIDs{seen: map[string]bool{}, changed: make(chan struct{})}
	var sigs relay.TestSignals
	sigs.LogIndexed.Notify(indexed.add)
	r, err := relay.New(runCtx, relay.Config{JS: srv.JS, Logger: logger, TestSignals: &sigs,
		HTTPClient: egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	e := &env{t: t, url: hs.URL, sink: newSink(t), keys: map[api.Scope]string{}, indexed: indexed}
	for _, s := range []api.Scope{api.ScopePublish, api.ScopeRead, api.ScopeAdmin} {
		e.keys[s], _, err = keys.Create(ctx, "key-"+string(s), s)
		require.NoError(t, err)
	}
	e.publish, e.read, e.admin = e.client(e.keys[api.ScopePublish]), e.client(e.keys[api.ScopeRead]), e.client(e.keys[api.ScopeAdmin])
	return e
}

// client is a Client of e's server with key, whose every request and
// answer is checked against the OpenAPI document.
func (e *env) client(key string) *Client {
	e.t.Helper()
	c, err := New(e.url, key, WithHTTPClient(&http.Client{Transport: newCheckingTransport(e.t, e.url)}))
	require.NoError(e.t, err)
	return c
}

// checkingTransport checks each request and answer against api.OpenAPI,
// with kin-openapi, and records the operation called.
type checkingTransport struct {
	t      *testing.T
	router routers.Router
	next   http.RoundTripper
}

func newCheckingTransport(t *testing.T, serverURL string) *checkingTransport {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context), "the OpenAPI document is valid")
	// The document's server is "/": routes are found relative to this one.
	doc.Servers = openapi3.Servers{{URL: serverURL}}
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	return &checkingTransport{t: t, router: router, next: http.DefaultTransport}
}

// wrongOnPurpose marks the context of a request a test sends against the
// document on purpose (a required field left out), to see the server's
// problem: its request is not checked, its answer is.
type wrongOnPurpose struct{}

func badRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, wrongOnPurpose{}, true)
}

func (ct *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	withBody := func() *http.Request {
		r := req.Clone(req.Context())
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		return r
	}
	fail := func(format string, args ...any) error {
		err := fmt.Errorf(format, args...)
		ct.t.Error(err)
		return err
	}

	check := withBody()
	route, params, err := ct.router.FindRoute(check)
	if err != nil {
		return nil, fail("%s %s is in no operation of api/openapi.json: %v", req.Method, req.URL, err)
	}
	exercised(route.Operation.OperationID)
	in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if req.Context().Value(wrongOnPurpose{}) == nil {
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			return nil, fail("the client sent %s %s %s, not as the document says: %v", req.Method, req.URL, body, err)
		}
	}

	resp, err := ct.next.RoundTrip(withBody())
	if err != nil {
		return nil, err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(got))
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		return nil, fail("%s %s answered %d %s, not as the document says: %v", req.Method, req.URL, resp.StatusCode, got, err)
	}
	return resp, nil
}

// sink is an HTTP receiver relay delivers to: 200; 400 (a permanent
// failure) while reject is set; 503 always on a path ending in /down.
type sink struct {
	*httptest.Server
	mu        sync.Mutex
	reject    bool
	delivered map[string]int // 2xx answers by webhook-id
}

func newSink(t *testing.T) *sink {
	s := &sink{delivered: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/down") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if s.reject {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"rejected"}`))
			return
		}
		s.delivered[r.Header.Get("webhook-id")]++
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) setReject(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject = v
}

// addDest adds destination name, unsigned, delivering to the sink, with a
// quick retry.
func (e *env) addDest(name string, mods ...func(*NewDestination)) Destination {
	e.t.Helper()
	nd := NewDestination{Name: name, DestinationSettings: DestinationSettings{URL: new(e.sink.URL + "/" + name), NoSecret: true,
		BackoffBase: new(Duration(20 * time.Millisecond)), BackoffMax: new(Duration(50 * time.Millisecond))}}
	for _, m := range mods {
		m(&nd)
	}
	d, err := e.admin.CreateDestination(context.Background(), nd)
	require.NoError(e.t, err)
	return d
}

// waitAttempts polls the delivery log until q selects n records, and
// returns them.
func (e *env) waitAttempts(q AttemptQuery, n int) []AttemptRecord {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		page, err := e.read.Attempts(context.Background(), q)
		require.NoError(e.t, err)
		if len(page.Attempts) >= n {
			require.Len(e.t, page.Attempts, n, "%+v", q)
			return page.Attempts
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("attempts %+v: %d records, want %d", q, len(page.Attempts), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewTakesTheAPIAddress(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:8088":           "http://127.0.0.1:8088",
		"http://127.0.0.1:8088/":          "http://127.0.0.1:8088",
		"http://127.0.0.1:8088/v1":        "http://127.0.0.1:8088",
		"https://relay.example.com/r/v1/": "https://relay.example.com/r",
	} {
		c, err := New(in, "k")
		require.NoError(t, err, in)
		require.Equal(t, want, c.base, in)
	}
	for _, in := range []string{"", "127.0.0.1:8088", "ftp://relay.example.com", "http://", "http://h/?x=1", "http://h/#f", "http://h/%zz"} {
		_, err := New(in, "k")
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "relay client: base URL", in)
	}
	c, err := New("http://h", "k", WithHTTPClient(nil), WithUserAgent("me/1"))
	require.NoError(t, err)
	require.Equal(t, http.DefaultClient, c.hc)
	require.Equal(t, "me/1", c.userAgent)
}

// The client is for programs that talk to relay, not run it: it must not
// pull NATS, Redis or relay's engine into them.
func TestClientImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range parsed.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			require.NotContains(t, strings.SplitN(path, "/", 2)[0], ".", "%s imports %s, which is not in the standard library", f, path)
		}
	}
	require.Positive(t, n)
}
