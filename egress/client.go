package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"
)

// Options shape the client relay delivers with. The zero value is the
// safe default.
type Options struct {
	// Guard decides which addresses may be dialled. The zero value refuses
	// loopback, private, link-local and other non-public addresses.
	Guard Guard
	// ConnectTimeout bounds a TCP connect. Optional, default 10s.
	ConnectTimeout time.Duration
	// TLSHandshakeTimeout bounds a TLS handshake. Optional, default 10s.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response headers once
	// the request is sent. Optional, default none (the destination's total
	// timeout still applies).
	ResponseHeaderTimeout time.Duration
	// InsecureSkipVerify turns off TLS certificate verification. Dangerous.
	InsecureSkipVerify bool
	// Proxy is the HTTP CONNECT proxy deliveries go through, the guard
	// kept (Proxy). Optional: none, deliveries connect directly.
	Proxy *Proxy
}

// NewClient returns the client relay delivers with: the address guard,
// no redirects followed, no proxy from the environment (it would bypass the
// guard), no cookies, keep-alive connections per destination host.
func NewClient(o Options) *http.Client {
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.TLSHandshakeTimeout == 0 {
		o.TLSHandshakeTimeout = 10 * time.Second
	}
	transport := func(proxy *Proxy) *http.Transport {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Go's own proxy support sends CONNECT with the name, which the
		// proxy would resolve past the guard: the tunnel is the dialer's.
		t.Proxy = nil
		// Keep every connection a destination's workers use: many
		// destinations on one host (a shared ingress) must not churn
		// connections. Idle ones close after 90s.
		t.MaxIdleConns = 0 // no total limit
		t.MaxIdleConnsPerHost = 4096
		t.IdleConnTimeout = 90 * time.Second
		t.DialContext = o.Guard.dialContext(&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}, proxy)
		t.TLSHandshakeTimeout = o.TLSHandshakeTimeout
		t.ResponseHeaderTimeout = o.ResponseHeaderTimeout
		if o.InsecureSkipVerify {
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the operator asked, loudly
		}
		return t
	}
	var rt http.RoundTripper = transport(nil)
	if o.Proxy != nil {
		rt = &proxyTransport{proxy: o.Proxy, tunnel: transport(o.Proxy), direct: rt.(*http.Transport)}
	}
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// DNSFailure is a failed lookup of a destination's host name. Its text
// names the host and what failed (not found, a timeout), not the resolver
// that answered: attempt errors are shown to read keys (the delivery log,
// the dashboard, dead letters), and the resolver's address belongs to the
// network relay runs in. The relay's log line of the attempt has the
// lookup's own error (Detail).
type DNSFailure struct {
	Host string
	// IsNotFound: the name does not exist; IsTimeout: the resolver did not
	// answer in time.
	IsNotFound, IsTimeout bool
	err                   *net.DNSError
}

func (e *DNSFailure) Error() string {
	switch {
	case e.IsNotFound:
		return "DNS lookup failed: host " + e.Host + " not found"
	case e.IsTimeout:
		return "DNS lookup failed: timeout looking up " + e.Host
	}
	return "DNS lookup failed for " + e.Host
}

// Detail is the lookup's own error, resolver included: for the relay's log.
func (e *DNSFailure) Detail() string { return e.err.Error() }

// Timeout reports a lookup that timed out (url.Error and net.Error ask).
func (e *DNSFailure) Timeout() bool { return e.err.Timeout() }

func (e *DNSFailure) Unwrap() error { return e.err }

// WithoutResolver is err with a failed DNS lookup in it told as a
// *DNSFailure, and err itself otherwise.
func WithoutResolver(err error) error {
	if _, ok := errors.AsType[*ProxyError](err); ok {
		return err // the proxy's name, not the destination's: it says which proxy
	}
	de, ok := errors.AsType[*net.DNSError](err)
	if !ok {
		return err
	}
	return &DNSFailure{Host: de.Name, IsNotFound: de.IsNotFound, IsTimeout: de.IsTimeout, err: de}
}

// NewDialer returns the dial function of relay's publishers of non-HTTP
// kinds (a broker's address, say): the address guard as NewClient's,
// and, with a proxy, a tunnel through it to each permitted address
// (CONNECT ip:port), except for what the proxy's NoProxy lets go direct
// (ForDestination says which destination a dial is for).
func NewDialer(o Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	d := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
	direct := o.Guard.dialContext(d, nil)
	if o.Proxy == nil {
		return direct
	}
	tunnel := o.Guard.dialContext(d, o.Proxy)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		dest, _ := ctx.Value(destKey{}).(string)
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if o.Proxy.bypass(host, dest) {
			return direct(ctx, network, addr)
		}
		c, err := tunnel(ctx, network, addr)
		if err == nil {
			o.Proxy.worked(dest)
		}
		return c, err
	}
}
