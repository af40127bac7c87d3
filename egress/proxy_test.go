package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/egress/proxytest"
)

// names is a resolver that knows only these names.
func names(m map[string]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		a, ok := m[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
}

// loopbackGuard permits loopback (where the test servers are) and
// resolves the names given.
func loopbackGuard(m map[string]string) Guard {
	return Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Lookup: names(m)}
}

func proxyOf(t *testing.T, p *proxytest.Proxy) *Proxy {
	t.Helper()
	px, err := ParseProxyURL(p.URL())
	require.NoError(t, err)
	return px
}

func get(t *testing.T, c *http.Client, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func TestProxySeesOnlyConnectsToVettedAddresses(t *testing.T) {
	t.Parallel()
	tp := proxytest.Start(t, proxytest.Options{User: "relay", Password: "s3cret"})
	hosts := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hosts <- r.Host }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	c := NewClient(Options{Guard: loopbackGuard(map[string]string{"hooks.example.test": "127.0.0.1", "metadata.example.test": "169.254.169.254", "inside.example.test": "10.1.2.3"}), Proxy: proxyOf(t, tp)})

	resp, err := get(t, c, context.Background(), "http://hooks.example.test:"+port+"/in")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "hooks.example.test:"+port, <-hosts, "the Host header stays the name")

	for _, name := range []string{"metadata.example.test", "inside.example.test"} {
		_, err = get(t, c, context.Background(), "http://"+name+":"+port+"/in")
		be, ok := errors.AsType[*BlockedError](err)
		require.True(t, ok, "%s: %v", name, err)
		require.Equal(t, name, be.Host)
	}
	require.Equal(t, []string{"CONNECT 127.0.0.1:" + port}, tp.Requests(),
		"the proxy is asked for a tunnel to the vetted address, never a name, and never for a blocked one")
}

func TestProxyTunnelVerifiesTheDestinationsName(t *testing.T) {
	t.Parallel()
	tp := proxytest.Start(t, proxytest.Options{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Host+" "+r.TLS.ServerName)
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	c := NewClient(Options{Guard: loopbackGuard(map[string]string{"example.com": "127.0.0.1", "impostor.example.test": "127.0.0.1"}), Proxy: proxyOf(t, tp)})
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	pt := c.Transport.(*proxyTransport)
	pt.tunnel.TLSClientConfig = &tls.Config{RootCAs: roots}

	// httptest's certificate is for example.com: through the tunnel, TLS
	// sends that name (SNI) and checks the certificate against it.
	req, err := http.NewRequest(http.MethodGet, "https://example.com:"+port+"/", nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "example.com:"+port+" example.com", string(body))

	// A name the certificate is not for fails, though it resolves to the
	// same address and the proxy tunnels to it.
	_, err = get(t, c, context.Background(), "https://impostor.example.test:"+port+"/")
	var he x509.HostnameError
	require.ErrorAs(t, err, &he)
	_, isProxy := errors.AsType[*ProxyError](err)
	require.False(t, isProxy, "a certificate for another name is the destination's failure")
	require.Equal(t, []string{"CONNECT 127.0.0.1:" + port, "CONNECT 127.0.0.1:" + port}, tp.Requests())
}

func TestProxyFailuresAreTheProxys(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	guard := loopbackGuard(map[string]string{"hooks.example.test": "127.0.0.1"})
	url := "http://hooks.example.test:" + port + "/"

	t.Run("down", func(t *testing.T) {
		t.Parallel()
		tp := proxytest.Start(t, proxytest.Options{})
		tp.Stop()
		_, err := get(t, NewClient(Options{Guard: guard, Proxy: proxyOf(t, tp)}), context.Background(), url)
		pe, ok := errors.AsType[*ProxyError](err)
		require.True(t, ok, "%v", err)
		require.Zero(t, pe.Status)
		require.Contains(t, err.Error(), "egress proxy "+tp.Addr+": dial tcp")
	})
	t.Run("wrong credentials", func(t *testing.T) {
		t.Parallel()
		tp := proxytest.Start(t, proxytest.Options{User: "relay", Password: "s3cret"})
		px := proxyOf(t, tp)
		px.Password = "wrong"
		_, err := get(t, NewClient(Options{Guard: guard, Proxy: px}), context.Background(), url)
		pe, ok := errors.AsType[*ProxyError](err)
		require.True(t, ok, "%v", err)
		// tinyproxy answers a CONNECT without the right credentials 401.
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusProxyAuthRequired}, pe.Status)
		require.Contains(t, err.Error(), "check --egress-proxy's credentials")
		require.NotContains(t, err.Error(), "wrong", "credentials are never printed")
		require.NotContains(t, px.String(), "wrong")
	})
	t.Run("destination unreachable", func(t *testing.T) {
		t.Parallel()
		tp := proxytest.Start(t, proxytest.Options{})
		gone := httptest.NewServer(http.NotFoundHandler())
		_, gonePort, _ := net.SplitHostPort(gone.Listener.Addr().String())
		gone.Close()
		px := proxyOf(t, tp)
		c := NewClient(Options{Guard: guard, Proxy: px})
		// A proxy that has granted no tunnel lately: its 5xx is its own.
		_, err := get(t, c, context.Background(), "http://hooks.example.test:"+gonePort+"/")
		pe, ok := errors.AsType[*ProxyError](err)
		require.True(t, ok, "%v", err)
		require.GreaterOrEqual(t, pe.Status, 500)
		// Once it tunnels to others, its 5xx says this destination could
		// not be reached: the destination's failure.
		_, err = get(t, c, context.Background(), url)
		require.NoError(t, err)
		_, err = get(t, c, context.Background(), "http://hooks.example.test:"+gonePort+"/")
		require.Error(t, err)
		_, ok = errors.AsType[*ProxyError](err)
		require.False(t, ok, "%v", err)
		require.Contains(t, err.Error(), "the egress proxy could not reach hooks.example.test (127.0.0.1:"+gonePort+")")
	})
}

func TestNoProxyGoesDirect(t *testing.T) {
	t.Parallel()
	tp := proxytest.Start(t, proxytest.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	px := proxyOf(t, tp)
	px.NoProxy = []string{"direct.example.test", ".internal.test", "dest:acme=billing", "tenant:globex"}
	c := NewClient(Options{Guard: loopbackGuard(map[string]string{
		"direct.example.test": "127.0.0.1", "a.internal.test": "127.0.0.1", "hooks.example.test": "127.0.0.1", "blocked.internal.test": "10.0.0.1",
	}), Proxy: px})
	for _, tc := range []struct{ dest, host string }{
		{"", "direct.example.test"},
		{"", "a.internal.test"},
		{"acme=billing", "hooks.example.test"},
		{"globex=orders", "hooks.example.test"},
	} {
		_, err := get(t, c, ForDestination(context.Background(), tc.dest), "http://"+tc.host+":"+port+"/")
		require.NoError(t, err, "%+v", tc)
	}
	require.Empty(t, tp.Requests(), "what NO_PROXY names goes direct")
	// Direct, the guard still refuses.
	_, err := get(t, c, context.Background(), "http://blocked.internal.test:"+port+"/")
	_, ok := errors.AsType[*BlockedError](err)
	require.True(t, ok, "%v", err)

	for _, dest := range []string{"", "acme=orders", "billing"} {
		_, err = get(t, c, ForDestination(context.Background(), dest), "http://hooks.example.test:"+port+"/")
		require.NoError(t, err)
	}
	require.Len(t, tp.Requests(), 1, "the rest goes through the proxy (one tunnel, kept alive)")
}

func TestParseProxyURL(t *testing.T) {
	t.Parallel()
	p, err := ParseProxyURL("http://relay:pa%24%24@proxy.internal:3128")
	require.NoError(t, err)
	require.Equal(t, "proxy.internal:3128", p.Addr)
	require.Equal(t, "relay", p.User)
	require.Equal(t, "pa$$", p.Password)
	require.Equal(t, "http://relay:xxxxx@proxy.internal:3128", p.String())
	for _, bad := range []string{"proxy:3128", "https://proxy:3128", "socks5://proxy:1080", "http://proxy", "http://u:topsecret@proxy/x", "http://proxy:3128/?a=b", "://",
		"relay:topsecret@proxy.internal:3128", "socks5://u:topsecret@proxy:1080", "http://u:topsecret@proxy"} {
		_, err := ParseProxyURL(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "topsecret", "credentials are never printed")
		require.True(t, strings.Contains(err.Error(), "http://host:port"), err.Error())
	}
	for _, ok := range []string{"hooks.example.com", ".example.com", "example.com.", "10.0.0.0/8", "192.0.2.7", "::1", "[2001:db8::1]", "dest:billing", "dest:acme=billing", "tenant:acme"} {
		require.NoError(t, ValidateNoProxy(ok), ok)
	}
	for _, bad := range []string{"", "dest:", "tenant:", "10.0.0.0/33", "host with space", "http://x", "*", "*.example.com", ".", "u@host"} {
		require.Error(t, ValidateNoProxy(bad), bad)
	}
	p.NoProxy = []string{".Example.com.", "::1", "hooks.test."}
	for host, want := range map[string]bool{"a.example.com": true, "example.com": true, "badexample.com": false, "EXAMPLE.COM.": true,
		"::1": true, "::2": false, "hooks.test": true, "hooks.test.evil": false} {
		require.Equal(t, want, p.bypass(host, ""), host)
	}
}

// scriptedProxy is a CONNECT proxy that answers answer to every CONNECT
// and, when its last answer is a 2xx, tunnels to the target asked for.
func scriptedProxy(t *testing.T, answer string) (addr string, asked chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	asked = make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				asked <- req.Method + " " + req.Host
				if _, err := io.WriteString(c, answer); err != nil || !strings.Contains(answer[strings.LastIndex(answer, "HTTP/1.1 "):], "HTTP/1.1 2") {
					return
				}
				up, err := net.Dial("tcp", req.Host)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, br) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String(), asked
}

// Interim answers are skipped and any 2xx opens the tunnel (RFC 9110).
func TestProxyTunnelOnAny2xx(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	addr, asked := scriptedProxy(t, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 Tunnel open\r\n\r\n")
	c := NewClient(Options{Guard: loopbackGuard(map[string]string{"hooks.example.test": "127.0.0.1"}), Proxy: &Proxy{Addr: addr}})
	resp, err := get(t, c, context.Background(), "http://hooks.example.test:"+port+"/")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "CONNECT 127.0.0.1:"+port, <-asked)
}

// An answer that may be the proxy's failure or the destination's (403,
// 502) is the proxy's while nothing went through it, for a minute per
// destination; then the destination's. While requests through the proxy
// succeed, it is the destination's at once. Credentials refused are
// always the proxy's.
func TestProxyDoubtfulAnswers(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"403 Forbidden", "502 Bad Gateway"} {
		addr, _ := scriptedProxy(t, "HTTP/1.1 "+status+"\r\nContent-Length: 0\r\n\r\n")
		now := time.Unix(1_900_000_000, 0)
		px := &Proxy{Addr: addr, now: func() time.Time { return now }}
		c := NewClient(Options{Guard: loopbackGuard(map[string]string{"hooks.example.test": "127.0.0.1"}), Proxy: px})
		ctx := ForDestination(context.Background(), "orders")
		// Coming back every 10s (a hand-back's wait), the proxy's failure
		// for a minute.
		for range doubtFor / (10 * time.Second) {
			_, err := get(t, c, ctx, "http://hooks.example.test:9/")
			_, ok := errors.AsType[*ProxyError](err)
			require.True(t, ok, "%s, nothing through the proxy yet: its failure (%v)", status, err)
			now = now.Add(10 * time.Second)
		}
		_, err := get(t, c, ctx, "http://hooks.example.test:9/")
		_, ok := errors.AsType[*ProxyError](err)
		require.False(t, ok, "%s for a minute: the destination's (%v)", status, err)
		require.ErrorContains(t, err, "taken as the destination's failure")
		_, err = get(t, c, ForDestination(context.Background(), "other"), "http://hooks.example.test:9/")
		_, ok = errors.AsType[*ProxyError](err)
		require.True(t, ok, "the doubt is per destination")
		// A doubt that went quiet for a minute starts over.
		now = now.Add(doubtFor)
		_, err = get(t, c, ctx, "http://hooks.example.test:9/")
		_, ok = errors.AsType[*ProxyError](err)
		require.True(t, ok, "a new doubt: the proxy's failure again (%v)", err)

		px.worked("another") // a request through the proxy succeeded
		_, err = get(t, c, ForDestination(context.Background(), "third"), "http://hooks.example.test:9/")
		_, ok = errors.AsType[*ProxyError](err)
		require.False(t, ok, "%s while the proxy works: the destination's (%v)", status, err)
		require.ErrorContains(t, err, "the egress proxy could not reach hooks.example.test (127.0.0.1:9): "+status)
		// The proxy worked since the doubt began: once it is idle again,
		// a failure starts a new doubt, not charged.
		now = now.Add(healthyFor)
		_, err = get(t, c, ctx, "http://hooks.example.test:9/")
		_, ok = errors.AsType[*ProxyError](err)
		require.True(t, ok, "an old doubt does not charge a new outage (%v)", err)
	}
	addr, _ := scriptedProxy(t, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
	px := &Proxy{Addr: addr}
	px.worked("x")
	_, err := get(t, NewClient(Options{Guard: loopbackGuard(map[string]string{"hooks.example.test": "127.0.0.1"}), Proxy: px}), context.Background(), "http://hooks.example.test:9/")
	_, ok := errors.AsType[*ProxyError](err)
	require.True(t, ok, "credentials refused: always the proxy's (%v)", err)
}

// A proxy that takes the connection and never answers CONNECT: the
// exchange ends before the request's own deadline, so that the request
// fails as doubtful (the proxy's, while nothing goes through it), not as
// a plain timeout charged to the destination.
func TestProxySilentWithinTheRequestsDeadline(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held open, unanswered
		}
	}()
	c := NewClient(Options{Guard: loopbackGuard(map[string]string{"hooks.example.test": "127.0.0.1"}), Proxy: &Proxy{Addr: ln.Addr().String()},
		ConnectTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = get(t, c, ForDestination(ctx, "orders"), "http://hooks.example.test:9/")
	pe, ok := errors.AsType[*ProxyError](err)
	require.True(t, ok, "%v", err)
	require.ErrorContains(t, pe, "no answer to CONNECT")
}
