package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/stretchr/testify/require"
)

// netguardTestServer starts a loopback server that counts the requests it
// receives and answers them with h (200 when h is nil).
func netguardTestServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// netguardTestSender is a Sender delivering through a client with guard g.
func netguardTestSender(t *testing.T, g egress.Guard) *Sender {
	t.Helper()
	c := egress.NewClient(egress.Options{Guard: g})
	t.Cleanup(c.CloseIdleConnections)
	return &Sender{Client: c, Now: time.Now}
}

func netguardTestDest(u string) destination.Destination {
	return destination.Destination{Name: "d", URL: u, Timeout: destination.Duration(2 * time.Second)}.WithDefaults()
}

func netguardTestPort(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname(), "the test server must listen on 127.0.0.1")
	return u.Port()
}

// netguardTestLookup resolves only the names in m and counts its calls.
func netguardTestLookup(m map[string][]netip.Addr, calls *atomic.Int64) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		calls.Add(1)
		if a, ok := m[host]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("test resolver: no such host %q", host)
	}
}

func TestGuardBlocksHostnameResolvingToLoopback(t *testing.T) {
	t.Parallel()
	srv, hits := netguardTestServer(t, nil)
	var lookups atomic.Int64
	s := netguardTestSender(t, egress.Guard{Lookup: netguardTestLookup(map[string][]netip.Addr{
		"evil.test": {netip.MustParseAddr("127.0.0.1")},
	}, &lookups)})
	d := netguardTestDest("http://evil.test:" + netguardTestPort(t, srv) + "/hook")

	res := s.Send(t.Context(), d, Delivery{ID: "evt_1", Body: []byte(`{}`)})
	require.True(t, res.Blocked, "result: %+v", res)
	require.Equal(t, 0, res.Status)
	require.Error(t, res.Err)
	require.Contains(t, res.Err.Error(), "blocked address")
	require.Contains(t, res.Err.Error(), "evil.test")
	require.Contains(t, res.Err.Error(), "127.0.0.1")
	var be *egress.BlockedError
	require.True(t, errors.As(res.Err, &be), "the error must wrap a *BlockedError: %v", res.Err)
	require.Equal(t, "evil.test", be.Host)
	require.Equal(t, netip.MustParseAddr("127.0.0.1"), be.Addr)
	require.Positive(t, lookups.Load(), "the guard's resolver must have been used")
	require.Zero(t, hits.Load(), "no request may reach the server")

	p := destination.RetryPolicy{}.WithDefaults()
	dec := classify(res, 1, p, nil)
	require.Equal(t, DeadLetter, dec.Action)
	require.Equal(t, ReasonBlockedAddress, dec.Reason)
	require.Equal(t, "blocked_address", dec.Reason)
}

func TestGuardBlocksWhenEveryResolvedAddressIsBlocked(t *testing.T) {
	t.Parallel()
	srv, hits := netguardTestServer(t, nil)
	var lookups atomic.Int64
	// Every answer is non-public: nothing may be dialled.
	s := netguardTestSender(t, egress.Guard{Lookup: netguardTestLookup(map[string][]netip.Addr{
		"rebind.test": {
			netip.MustParseAddr("::ffff:127.0.0.1"),
			netip.MustParseAddr("169.254.169.254"),
			netip.MustParseAddr("::1"),
		},
	}, &lookups)})
	d := netguardTestDest("http://rebind.test:" + netguardTestPort(t, srv) + "/")
	res := s.Send(t.Context(), d, Delivery{ID: "evt_1"})
	require.True(t, res.Blocked, "result: %+v", res)
	require.Equal(t, 0, res.Status)
	var be *egress.BlockedError
	require.ErrorAs(t, res.Err, &be)
	require.Equal(t, netip.MustParseAddr("127.0.0.1"), be.Addr, "the reported address is unmapped")
	require.Zero(t, hits.Load())
}

func TestGuardDialsOnlyThePermittedAnswers(t *testing.T) {
	t.Parallel()
	// Two servers on the same port: a "forbidden" one on 127.0.0.2 and the
	// allowed one on 127.0.0.1. The name resolves to the forbidden address
	// first; the guard must skip it and deliver to the allowed one.
	var forbiddenHits, allowedHits atomic.Int64
	_, allowed := netguardTestServerPair(t,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forbiddenHits.Add(1) }),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { allowedHits.Add(1) }))
	var lookups atomic.Int64
	s := netguardTestSender(t, egress.Guard{
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Lookup: netguardTestLookup(map[string][]netip.Addr{
			"mixed.test": {netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("127.0.0.1")},
		}, &lookups),
	})
	for i := range 3 {
		res := s.Send(t.Context(), netguardTestDest("http://mixed.test:"+netguardTestPort(t, allowed)+"/"), Delivery{ID: "evt_1"})
		require.NoError(t, res.Err)
		require.False(t, res.Blocked)
		require.Equal(t, http.StatusOK, res.Status)
		require.Equal(t, int64(i+1), allowedHits.Load())
	}
	require.Zero(t, forbiddenHits.Load(), "the blocked answer was dialled")

	// Without the allowed answer the name is blocked, and the forbidden
	// server still sees nothing.
	s = netguardTestSender(t, egress.Guard{
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Lookup: netguardTestLookup(map[string][]netip.Addr{
			"mixed.test": {netip.MustParseAddr("127.0.0.2")},
		}, &lookups),
	})
	res := s.Send(t.Context(), netguardTestDest("http://mixed.test:"+netguardTestPort(t, allowed)+"/"), Delivery{ID: "evt_1"})
	require.True(t, res.Blocked, "result: %+v", res)
	require.Zero(t, forbiddenHits.Load())
}

// netguardTestServerPair starts one server on 127.0.0.2 and one on 127.0.0.1,
// on the same port.
func netguardTestServerPair(t *testing.T, onTwo, onOne http.Handler) (*httptest.Server, *httptest.Server) {
	t.Helper()
	for range 20 {
		l2, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("cannot listen on 127.0.0.2: %v", err)
		}
		_, port, _ := net.SplitHostPort(l2.Addr().String())
		l1, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			l2.Close()
			continue // port taken on 127.0.0.1: try another
		}
		s2 := &httptest.Server{Listener: l2, Config: &http.Server{Handler: onTwo}}
		s1 := &httptest.Server{Listener: l1, Config: &http.Server{Handler: onOne}}
		s2.Start()
		s1.Start()
		t.Cleanup(s2.Close)
		t.Cleanup(s1.Close)
		return s2, s1
	}
	t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil
}

func TestGuardBlocksIPv4MappedLoopback(t *testing.T) {
	t.Parallel()
	srv, hits := netguardTestServer(t, nil)
	var lookups atomic.Int64
	s := netguardTestSender(t, egress.Guard{Lookup: netguardTestLookup(nil, &lookups)})
	for _, host := range []string{"[::ffff:127.0.0.1]", "127.0.0.1", "[::ffff:7f00:1]"} {
		t.Run(host, func(t *testing.T) {
			d := netguardTestDest("http://" + host + ":" + netguardTestPort(t, srv) + "/")
			res := s.Send(t.Context(), d, Delivery{ID: "evt_1", Body: []byte(`{}`)})
			require.True(t, res.Blocked, "result: %+v", res)
			require.Equal(t, 0, res.Status)
			require.ErrorContains(t, res.Err, "blocked address")
			require.Equal(t, DeadLetter, classify(res, 1, destination.RetryPolicy{}.WithDefaults(), nil).Action)
		})
	}
	require.Zero(t, hits.Load(), "no request may reach the server")
	require.Zero(t, lookups.Load(), "an address literal is not resolved")
}

func TestGuardAllowsAllowedRange(t *testing.T) {
	t.Parallel()
	srv, hits := netguardTestServer(t, nil)
	var lookups atomic.Int64
	s := netguardTestSender(t, egress.Guard{
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Lookup: netguardTestLookup(map[string][]netip.Addr{
			"hook.test": {netip.MustParseAddr("127.0.0.1")},
		}, &lookups),
	})
	port := netguardTestPort(t, srv)
	urls := []string{
		srv.URL + "/hook",
		"http://[::ffff:127.0.0.1]:" + port + "/hook",
		"http://hook.test:" + port + "/hook",
	}
	var want int64
	for _, u := range urls {
		res := s.Send(t.Context(), netguardTestDest(u), Delivery{ID: "evt_1", Body: []byte(`{}`)})
		want++
		require.NoError(t, res.Err, u)
		require.False(t, res.Blocked, u)
		require.Equal(t, http.StatusOK, res.Status, u)
		require.Equal(t, Ack, classify(res, 1, destination.RetryPolicy{}.WithDefaults(), nil).Action, u)
		require.Equal(t, want, hits.Load(), "exactly one request per send: %s", u)
	}
	require.Positive(t, lookups.Load(), "the host name went through the guard's resolver")
}

func TestGuardAllowDoesNotOpenOtherRanges(t *testing.T) {
	t.Parallel()
	srv, hits := netguardTestServer(t, nil)
	var lookups atomic.Int64
	// Only 127.0.0.2 is allowed; the server listens on 127.0.0.1.
	s := netguardTestSender(t, egress.Guard{
		Allow:  []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
		Lookup: netguardTestLookup(nil, &lookups),
	})
	res := s.Send(t.Context(), netguardTestDest(srv.URL+"/"), Delivery{ID: "evt_1"})
	require.True(t, res.Blocked, "result: %+v", res)
	require.Zero(t, hits.Load())
}

func TestRedirectToMetadataIsNotFollowed(t *testing.T) {
	t.Parallel()
	srv, hits := netguardTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	var lookups atomic.Int64
	s := netguardTestSender(t, egress.Guard{
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			lookups.Add(1)
			t.Errorf("no host name may be resolved, got %q", host)
			return nil, errors.New("unexpected lookup")
		},
	})
	res := s.Send(t.Context(), netguardTestDest(srv.URL+"/hook"), Delivery{ID: "evt_1", Body: []byte(`{}`)})
	require.NoError(t, res.Err)
	require.False(t, res.Blocked)
	require.Equal(t, http.StatusFound, res.Status, "the redirect must be reported, not followed")
	require.Equal(t, int64(1), hits.Load(), "exactly one request reached the server")
	require.Zero(t, lookups.Load())

	dec := classify(res, 1, destination.RetryPolicy{}.WithDefaults(), nil)
	require.Equal(t, DeadLetter, dec.Action)
	require.Equal(t, ReasonRedirect, dec.Reason)
	require.Equal(t, "redirect", dec.Reason)
}

func TestRedirectToLoopbackIsNotFollowedEvenWhenAllowed(t *testing.T) {
	t.Parallel()
	// The redirect target is an allowed address on the same server: it is
	// still not followed, the POST is made exactly once.
	srv, hits := netguardTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hook" {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	s := netguardTestSender(t, egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	res := s.Send(t.Context(), netguardTestDest(srv.URL+"/hook"), Delivery{ID: "evt_1"})
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusTemporaryRedirect, res.Status)
	require.Equal(t, int64(1), hits.Load())
}
