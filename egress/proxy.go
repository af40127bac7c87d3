package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is an HTTP proxy deliveries go through, with CONNECT: relay
// resolves the destination's name itself, vets every address with the
// guard, and asks the proxy for a tunnel to a vetted address and port. TLS
// runs inside the tunnel, end to end, and still verifies the destination's
// name; the Host header stays the name. The proxy never resolves a name,
// so no answer it gets can take a delivery past the guard.
type Proxy struct {
	// Addr is the proxy's host:port. Required.
	Addr string
	// User and Password authenticate to it (Basic, Proxy-Authorization).
	// Optional.
	User, Password string
	// NoProxy are what goes direct, not through the proxy, each as
	// NO_PROXY has them: a host name (api.example.com), a domain and its
	// subdomains (.example.com), an address or a CIDR range; and, of
	// relay's own, dest:NAME (a destination, tenant=name for a tenant's)
	// and tenant:ID (every destination of a tenant).
	NoProxy []string
	// health is when a request through the proxy last succeeded: a tunnel
	// granted or a response through one (Unix nanoseconds).
	health atomic.Int64
	// doubts are, per destination, when an answer to CONNECT that may be
	// the proxy's failure or the destination's first came while the proxy
	// had done nothing for a while (see connect).
	doubts sync.Map // dest -> doubt
	// now is the clock of health and doubts (tests move it). Optional:
	// time.Now.
	now func() time.Time
}

func (p *Proxy) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// ParseProxyURL reads a proxy URL, http://[user:password@]host:port.
// Credentials in it are taken, and never printed again (String).
func ParseProxyURL(raw string) (*Proxy, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		// Never the value itself: without its scheme, user:password@host
		// parses as a scheme and an opaque rest, credentials and all.
		what := "the URL given"
		if err == nil && u.Scheme != "" && u.Host != "" {
			what = (&url.URL{Scheme: u.Scheme, Host: u.Host, User: u.User}).Redacted()
		}
		return nil, fmt.Errorf("%s is not an HTTP proxy's URL: give http://host:port (relay speaks CONNECT to it; https:// and socks5:// proxies are not supported)", what)
	}
	p := &Proxy{Addr: u.Host}
	if u.User != nil {
		p.User = u.User.Username()
		p.Password, _ = u.User.Password()
	}
	return p, nil
}

// String is the proxy's address, never its credentials.
func (p *Proxy) String() string {
	if p.User != "" {
		return "http://" + p.User + ":xxxxx@" + p.Addr
	}
	return "http://" + p.Addr
}

// ValidateNoProxy checks a --no-proxy entry.
func ValidateNoProxy(e string) error {
	bad := fmt.Errorf("%q: give a host name, .domain, an address or CIDR range, dest:NAME or tenant:ID", e)
	switch {
	case e == "":
		return errors.New("an empty entry")
	case strings.HasPrefix(e, "dest:") && len(e) > len("dest:"), strings.HasPrefix(e, "tenant:") && len(e) > len("tenant:"):
		return nil
	case strings.Contains(e, "*"):
		return fmt.Errorf("%q: no wildcards: .example.com is example.com and its subdomains", e)
	case strings.Contains(e, "/"):
		if _, err := parsePrefix(e); err != nil {
			return fmt.Errorf("%q: not a CIDR range", e)
		}
		return nil
	case net.ParseIP(strings.Trim(e, "[]")) != nil:
		return nil // an address, IPv6 too
	case strings.ContainsAny(e, " :@?#") || strings.Trim(e, ".") == "":
		return bad
	}
	return nil
}

func parsePrefix(s string) (*net.IPNet, error) {
	_, n, err := net.ParseCIDR(s)
	return n, err
}

// bypass reports whether a request to host, for destination dest (a
// stream.DestRef; "" when not known), goes direct.
func (p *Proxy) bypass(host, dest string) bool {
	tenant, _, hasTenant := strings.Cut(dest, "=")
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	ip := net.ParseIP(host)
	return slices.ContainsFunc(p.NoProxy, func(e string) bool {
		switch {
		case strings.HasPrefix(e, "dest:"):
			return dest != "" && e[len("dest:"):] == dest
		case strings.HasPrefix(e, "tenant:"):
			return hasTenant && e[len("tenant:"):] == tenant
		case strings.Contains(e, "/"):
			n, err := parsePrefix(e)
			return err == nil && ip != nil && n.Contains(ip)
		}
		e = strings.ToLower(strings.TrimSuffix(e, "."))
		if a := net.ParseIP(strings.Trim(e, "[]")); a != nil {
			return ip != nil && a.Equal(ip)
		}
		if strings.HasPrefix(e, ".") {
			return strings.HasSuffix(host, e) || host == e[1:]
		}
		return host == e
	})
}

// ProxyError is a failure of the egress proxy, not of the destination: the
// proxy could not be reached or talked to, refused the credentials (401,
// 407), or gave an answer that may be its own failure (a 5xx, 403, none
// in time) while nothing went through it for a while (see doubtful). A
// delivery that meets one is not charged to its destination.
type ProxyError struct {
	Proxy string
	// Status is the proxy's answer to CONNECT; 0 when it gave none.
	Status int
	Err    error
	// LastTunnel is when the proxy last granted a tunnel (zero: never).
	LastTunnel time.Time
}

func (e *ProxyError) Error() string {
	switch e.Status {
	case 0:
	case http.StatusUnauthorized, http.StatusProxyAuthRequired:
		return fmt.Sprintf("egress proxy %s refused the tunnel: %d %s (check --egress-proxy's credentials)", e.Proxy, e.Status, http.StatusText(e.Status))
	default:
		return fmt.Sprintf("egress proxy %s refused the tunnel: %d %s", e.Proxy, e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("egress proxy %s: %v", e.Proxy, e.Err)
}

func (e *ProxyError) Unwrap() error { return e.Err }

// healthyFor is how recently a request through the proxy must have
// succeeded for an answer to CONNECT that may be the proxy's failure or
// the destination's (a 5xx, 403, no answer in time) to be the
// destination's: the proxy works.
const healthyFor = time.Minute

// doubtFor is how long such an answer is taken as the proxy's failure,
// for one destination, while nothing through the proxy succeeds: after
// that it is the destination's, so that a destination that is down is
// charged, retried and dead-lettered as usual even when it is the only
// one a quiet relay delivers to.
const doubtFor = time.Minute

// connect opens a tunnel through the proxy to target, a vetted ip:port;
// host is the destination's name, for the errors, and ctx carries the
// destination (ForDestination). The exchange takes at most the dialer's
// timeout from the dial's start.
func (p *Proxy) connect(ctx context.Context, d *net.Dialer, target, host string) (net.Conn, error) {
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, &ProxyError{Proxy: p.Addr, Err: err, LastTunnel: p.lastTunnel()}
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	deadline := start.Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if dl, ok := ctx.Value(deadlineKey{}).(time.Time); ok {
		// The request's own deadline, which the transport's dial does not
		// carry: the exchange ends a little before it, so that its
		// failure, the proxy's or doubtful, is what the request reports.
		if dl = dl.Add(-max(time.Until(dl)/10, 10*time.Millisecond)); dl.Before(deadline) {
			deadline = dl
		}
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if p.User != "" {
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User+":"+p.Password)))
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, &ProxyError{Proxy: p.Addr, Err: fmt.Errorf("send CONNECT: %w", err), LastTunnel: p.lastTunnel()}
	}
	dest, _ := ctx.Value(destKey{}).(string)
	br := bufio.NewReader(c)
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(br, req)
		if err != nil {
			c.Close()
			if ctx.Err() != nil {
				return nil, &ProxyError{Proxy: p.Addr, Err: ctx.Err(), LastTunnel: p.lastTunnel()}
			}
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				// The proxy took the connection and did not answer: it
				// may be waiting for the destination.
				return nil, p.doubtful(dest, host, target, 0, fmt.Errorf("no answer to CONNECT within %s", time.Since(start).Round(time.Millisecond)))
			}
			return nil, &ProxyError{Proxy: p.Addr, Err: fmt.Errorf("read its answer to CONNECT: %w", err), LastTunnel: p.lastTunnel()}
		}
		resp.Body.Close()
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			break // not an interim answer
		}
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code <= 299:
	case code == http.StatusUnauthorized, code == http.StatusProxyAuthRequired:
		c.Close()
		return nil, &ProxyError{Proxy: p.Addr, Status: code, LastTunnel: p.lastTunnel()}
	default:
		c.Close()
		return nil, p.doubtful(dest, host, target, code, nil)
	}
	if !stop() {
		// ctx ended as the tunnel opened: its close is under way.
		c.Close()
		return nil, &ProxyError{Proxy: p.Addr, Err: ctx.Err(), LastTunnel: p.lastTunnel()}
	}
	p.worked(dest)
	_ = c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// doubtful is the error of an answer to CONNECT (status, or err without
// one) that may be the proxy's failure or the destination's: the
// destination's while the proxy works for others, or once it has come for
// doubtFor; else a *ProxyError.
func (p *Proxy) doubtful(dest, host, target string, status int, err error) error {
	what := fmt.Sprint(err)
	if status != 0 {
		what = fmt.Sprintf("%d %s", status, http.StatusText(status))
	}
	now := p.clock()
	if now.Sub(p.lastTunnel()) < healthyFor {
		return fmt.Errorf("the egress proxy could not reach %s (%s): %s", host, target, what)
	}
	d := doubt{first: now, last: now}
	if v, ok := p.doubts.Load(dest); ok {
		// The same doubt goes on unless it went quiet for doubtFor, or the
		// proxy worked since it began.
		if old := v.(doubt); now.Sub(old.last) < doubtFor && !old.first.Before(p.lastTunnel()) {
			d.first = old.first
		}
	}
	p.doubts.Store(dest, d)
	if since := now.Sub(d.first); since >= doubtFor {
		return fmt.Errorf("the egress proxy could not reach %s (%s): %s (for %s, while nothing else went through it: taken as the destination's failure)", host, target, what, since.Round(time.Second))
	}
	return &ProxyError{Proxy: p.Addr, Status: status, Err: err, LastTunnel: p.lastTunnel()}
}

// doubt is a run of doubtful answers for a destination: its first and
// last.
type doubt struct{ first, last time.Time }

// worked records that a request to dest through the proxy succeeded.
func (p *Proxy) worked(dest string) {
	p.health.Store(p.clock().UnixNano())
	p.doubts.Delete(dest)
}

// lastTunnel is when the proxy last granted a tunnel (zero: never).
func (p *Proxy) lastTunnel() time.Time {
	if n := p.health.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// bufferedConn is a tunnel whose first bytes were read with the proxy's
// answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// destKey is the context key of the destination a request is for, and
// deadlineKey of the request's deadline (values outlive the
// context.WithoutCancel the transport dials with; deadlines do not).
type (
	destKey     struct{}
	deadlineKey struct{}
)

// ForDestination is ctx for a request to destination dest (a
// stream.DestRef): the proxy's NoProxy entries dest:... and tenant:...
// match it, and a tunnel's CONNECT ends before ctx's deadline.
func ForDestination(ctx context.Context, dest string) context.Context {
	ctx = context.WithValue(ctx, destKey{}, dest)
	if dl, ok := ctx.Deadline(); ok {
		ctx = context.WithValue(ctx, deadlineKey{}, dl)
	}
	return ctx
}

// proxyTransport routes each request through the proxy's transport, or
// the direct one for what bypasses the proxy. They are two: a connection
// opened through the proxy never serves a request that bypasses it, nor
// the reverse.
type proxyTransport struct {
	proxy          *Proxy
	tunnel, direct *http.Transport
}

func (t *proxyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	dest, _ := req.Context().Value(destKey{}).(string)
	if t.proxy.bypass(req.URL.Hostname(), dest) {
		return t.direct.RoundTrip(req)
	}
	resp, err := t.tunnel.RoundTrip(req)
	if err == nil {
		// A response through a tunnel, new or kept alive: the proxy works.
		t.proxy.worked(dest)
	}
	return resp, err
}

// CloseIdleConnections closes both transports' idle connections.
func (t *proxyTransport) CloseIdleConnections() {
	t.tunnel.CloseIdleConnections()
	t.direct.CloseIdleConnections()
}
