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
	// health is the last CONNECT the proxy granted (Unix nanoseconds).
	health atomic.Int64
}

// ParseProxyURL reads a proxy URL, http://[user:password@]host:port.
// Credentials in it are taken, and never printed again (String).
func ParseProxyURL(raw string) (*Proxy, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		what := raw
		if u != nil && u.User != nil {
			what = u.Redacted()
		}
		if err != nil {
			what = "it"
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
	switch {
	case e == "":
		return errors.New("an empty entry")
	case strings.HasPrefix(e, "dest:") && len(e) > len("dest:"), strings.HasPrefix(e, "tenant:") && len(e) > len("tenant:"):
		return nil
	case strings.ContainsAny(e, " /:") && !strings.Contains(e, "/"):
		return fmt.Errorf("%q: give a host name, .domain, an address or CIDR range, dest:NAME or tenant:ID", e)
	}
	if strings.Contains(e, "/") {
		if _, err := parsePrefix(e); err != nil {
			return fmt.Errorf("%q: not a CIDR range", e)
		}
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
		case strings.HasPrefix(e, "."):
			return strings.HasSuffix(host, strings.ToLower(e)) || host == strings.ToLower(e[1:])
		}
		return host == strings.ToLower(e)
	})
}

// ProxyError is a failure of the egress proxy, not of the destination: the
// proxy could not be reached or talked to, refused the tunnel
// (407, 403...), or failed with a 5xx while it had granted no tunnel for
// a while. A delivery that meets one is not charged to its destination.
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

// healthyFor is how recently the proxy must have granted a tunnel for its
// 5xx answer to CONNECT to be the destination's failure (the proxy could
// not reach it), not the proxy's own.
const healthyFor = time.Minute

// connect opens a tunnel through the proxy to target, a vetted ip:port;
// host is the destination's name, for the errors.
func (p *Proxy) connect(ctx context.Context, d *net.Dialer, target, host string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, &ProxyError{Proxy: p.Addr, Err: err, LastTunnel: p.lastTunnel()}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(d.Timeout))
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if p.User != "" {
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User+":"+p.Password)))
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, &ProxyError{Proxy: p.Addr, Err: fmt.Errorf("send CONNECT: %w", err), LastTunnel: p.lastTunnel()}
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, &ProxyError{Proxy: p.Addr, Err: fmt.Errorf("read its answer to CONNECT: %w", err), LastTunnel: p.lastTunnel()}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		healthy := time.Since(p.lastTunnel()) < healthyFor
		if resp.StatusCode >= 500 && healthy {
			// A proxy that tunnels to other destinations says it could
			// not reach this one: the destination's failure.
			return nil, fmt.Errorf("the egress proxy could not reach %s (%s): %d %s", host, target, resp.StatusCode, http.StatusText(resp.StatusCode))
		}
		return nil, &ProxyError{Proxy: p.Addr, Status: resp.StatusCode, LastTunnel: p.lastTunnel()}
	}
	p.health.Store(time.Now().UnixNano())
	_ = c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
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

// destKey is the context key of the destination a request is for.
type destKey struct{}

// ForDestination is ctx for a request to destination dest (a
// stream.DestRef): the proxy's NoProxy entries dest:... and tenant:...
// match it.
func ForDestination(ctx context.Context, dest string) context.Context {
	return context.WithValue(ctx, destKey{}, dest)
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
	return t.tunnel.RoundTrip(req)
}

// CloseIdleConnections closes both transports' idle connections.
func (t *proxyTransport) CloseIdleConnections() {
	t.tunnel.CloseIdleConnections()
	t.direct.CloseIdleConnections()
}
