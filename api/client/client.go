package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Client calls relay's HTTP API. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[/prefix], without the trailing /v1
	key       string
	hc        *http.Client
	userAgent string
	// tenant, when set, is the tenant the tenant's resources are asked
	// of (ForTenant).
	tenant string
}

// ForTenant returns a client like c whose requests of a tenant's
// resources (events, stats, attempts, destinations, dead letters) are for
// tenant id, under /v1/tenants/{id}. A tenant key needs none: its
// requests are its tenant's.
func (c *Client) ForTenant(id string) *Client {
	cp := *c
	cp.tenant = id
	return &cp
}

// tenanted are the paths of a tenant's resources (api's tenantedPrefixes).
var tenanted = []string{"/events", "/stats", "/attempts", "/destinations", "/dead-letters"}

// pathOf is the path of request path (under /v1), for c's tenant.
func (c *Client) pathOf(path string) string {
	if c.tenant == "" {
		return "/v1" + path
	}
	for _, p := range tenanted {
		if path == p || strings.HasPrefix(path, p+"/") || strings.HasPrefix(path, p+":") || strings.HasPrefix(path, p+"?") {
			return "/v1/tenants/" + url.PathEscape(c.tenant) + path
		}
	}
	return "/v1" + path
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends the requests with hc (its transport, timeout,
// TLS settings) instead of http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithUserAgent sends ua as the User-Agent of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client of the API at baseURL, the address relay serves it
// on (http://127.0.0.1:8088; the /v1 that 'relay run' logs may be given
// too), authenticated with key, an API key from 'relay api-key create'.
// key may be empty for OpenAPI, the one request that needs none.
func New(baseURL, key string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("relay client: base URL %q: %w", baseURL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("relay client: base URL %q: give http(s)://host:port, where relay serves the API", baseURL)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("relay client: base URL %q: no query or fragment", baseURL)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.RawPath = ""
	c := &Client{base: u.String(), key: key, hc: http.DefaultClient, userAgent: "relay-go-client"}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	return c, nil
}

// request is one call of the API.
type request struct {
	method string
	path   string // under /v1, with its path parameters escaped
	query  url.Values
	body   any // sent as JSON; nil: no body
	header http.Header
}

// strictDecoding makes the client refuse an answer with a field its type
// lacks. The tests set it, so that a field the server answers and the
// client does not know fails them; a client in use ignores such fields, as
// a newer server may add some.
var strictDecoding bool

// decodeJSON decodes the JSON value of r into v.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	if strictDecoding {
		dec.DisallowUnknownFields()
	}
	return dec.Decode(v)
}

// maxProblemBody bounds what is read of an answer that is not a success.
const maxProblemBody = 1 << 20

// do sends r and decodes a successful answer's JSON into out (unless out
// is nil); any other answer is returned as an *Error.
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := decodeJSON(resp.Body, out); err != nil {
		return fmt.Errorf("relay client: %s %s: decode the answer: %w", r.method, resp.Request.URL.Path, err)
	}
	return nil
}

// bytes sends r and returns the answer's body as it is (not JSON).
func (c *Client) bytes(ctx context.Context, r request) ([]byte, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("relay client: %s %s: read the answer: %w", r.method, resp.Request.URL.Path, err)
	}
	return b, nil
}

// send sends r and returns a successful (2xx) response, whose body the
// caller closes; any other answer is returned as an *Error.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	u := c.base + c.pathOf(r.path)
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("relay client: %s /v1%s: encode the request: %w", r.method, r.path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("relay client: %w", err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("relay client: %w", err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, problemOf(req, resp)
}

// problemOf is the *Error of a response that is not a success: its
// problem, or what can be said of an answer that is none (a proxy's).
func problemOf(req *http.Request, resp *http.Response) *Error {
	e := &Error{Status: resp.StatusCode, Method: req.Method, Path: req.URL.Path}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err == nil && (ct == "application/problem+json" || ct == "application/json") && json.Unmarshal(b, e) == nil {
		e.Status = resp.StatusCode // the status line, whatever the body says
	} else {
		e.Type, e.Detail = "", strings.TrimSpace(string(b))
	}
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
	}
	return e
}

// Error is an answer of the API that is not a success: an RFC 9457
// problem, with the request field at fault when there was one. Match it
// with errors.As, or with IsNotFound and the like.
type Error struct {
	// Status is the HTTP status; Title its text.
	Status int    `json:"status"`
	Title  string `json:"title"`
	Type   string `json:"type"`
	// Detail says what was wrong.
	Detail string `json:"detail"`
	// Field is the request field that was wrong (max_attempts,
	// events[3].dest), when one was.
	Field string `json:"field,omitempty"`
	// Method and Path are the request's.
	Method string `json:"-"`
	Path   string `json:"-"`
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "relay API: %s %s: %d %s", e.Method, e.Path, e.Status, e.Title)
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	return b.String()
}

// statusOf is the HTTP status of err's *Error, 0 if it has none.
func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports whether err is the API's 404: an unknown
// destination, dead letter or event.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsConflict reports whether err is the API's 409: a conflict with what
// exists (a name taken, a layout that is fixed, events still waiting for a
// destination removed).
func IsConflict(err error) bool { return statusOf(err) == http.StatusConflict }

// OpenAPI returns the API's OpenAPI 3.1 document, as the server has it.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/openapi.json"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("relay client: GET /v1/openapi.json: %w", err)
	}
	return b, nil
}

// Key is the API key a client uses, as the server knows it: never the
// key itself.
type Key struct {
	Name  string `json:"name"`
	Scope string `json:"scope"`
	// Tenant is the tenant the key is confined to; "" for none.
	Tenant  string    `json:"tenant,omitempty"`
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	// Session is the customer portal's session, when the key is one's
	// token; Capabilities what it may change (manage_endpoints,
	// view_secret, rotate_secret, replay).
	Session      string   `json:"session,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
}

// Can reports whether the key may change what capability c allows: any
// admin key may, a portal session when it has c.
func (k Key) Can(c string) bool {
	if k.Scope != "admin" {
		return false
	}
	return k.Session == "" || slices.Contains(k.Capabilities, c)
}

// Egress returns the addresses deliveries come from, as the operator
// declared them, for receivers to allowlist (getEgress). Any scope.
func (c *Client) Egress(ctx context.Context) ([]string, error) {
	var out struct {
		Addresses []string `json:"addresses"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/egress"}, &out)
	return out.Addresses, err
}

// DestinationTypes returns the kinds of destination the relay delivers
// to, HTTP first (listDestinationTypes).
func (c *Client) DestinationTypes(ctx context.Context) ([]DestinationType, error) {
	var out struct {
		Types []DestinationType `json:"types"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/destination-types"}, &out)
	return out.Types, err
}

// JWKS returns the public keys that verify the v1a signatures of the
// destinations of no tenant (getJWKS), or of the client's tenant when it
// is for one (ForTenant, getTenantJWKS), as a JSON Web Key Set. It needs
// no key.
func (c *Client) JWKS(ctx context.Context) (JWKSet, error) {
	path := "/jwks.json"
	if c.tenant != "" {
		path = "/tenants/" + url.PathEscape(c.tenant) + "/jwks.json"
	}
	var out JWKSet
	err := c.do(ctx, request{method: http.MethodGet, path: path}, &out)
	return out, err
}

// JWKSet is a JSON Web Key Set (RFC 7517).
type JWKSet struct {
	Keys []JWK `json:"keys"`
}

// JWK is an Ed25519 public key as a JSON Web Key (RFC 8037): Kty OKP, Crv
// Ed25519, X the key in base64url, Kid its RFC 7638 thumbprint.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
}

// Key returns the name and scope of the client's key (getKey). Any scope.
func (c *Client) Key(ctx context.Context) (Key, error) {
	var out Key
	err := c.do(ctx, request{method: http.MethodGet, path: "/key"}, &out)
	return out, err
}
