package replica

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// apiServer is an HTTP server bounded by apiLimits.bound, as relay run's
// API, serving a test's handler.
type apiServer struct {
	addr string
	ln   *connLimit
	logs *syncLog
	// tls is set when it serves over TLS (startAPIServerTLS).
	tls *tls.Config
}

// syncLog is a log's text, written and read concurrently.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func startAPIServer(t *testing.T, limits apiLimits, h http.Handler) apiServer {
	t.Helper()
	return startServing(t, limits, h, nil)
}

// startAPIServerTLS is startAPIServer over TLS, as with --api-tls-cert.
func startAPIServerTLS(t *testing.T, limits apiLimits, h http.Handler) apiServer {
	t.Helper()
	// httptest's certificate, for 127.0.0.1.
	ts := httptest.NewTLSServer(h)
	cert := ts.TLS.Certificates[0]
	ts.Close()
	return startServing(t, limits, h, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

func startServing(t *testing.T, limits apiLimits, h http.Handler, tlsConfig *tls.Config) apiServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := &syncLog{}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
	bounded := limits.bound(srv, ln, 1, slog.New(slog.NewTextHandler(logs, nil)))
	if tlsConfig != nil {
		go func() { _ = srv.ServeTLS(bounded, "", "") }()
	} else {
		go func() { _ = srv.Serve(bounded) }()
	}
	t.Cleanup(func() { _ = srv.Close() })
	s := apiServer{addr: ln.Addr().String(), ln: bounded.(*connLimit), logs: logs}
	if tlsConfig != nil {
		s.tls = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}} // the test's own certificate
	}
	return s
}

// dial opens a connection to s that fails the test's reads and writes
// after a minute: far longer than any bound the tests configure.
func (s apiServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	if s.tls != nil {
		c = tls.Client(c, s.tls)
	}
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
	return c
}

// waitIdle waits until the server has marked client connection c idle
// later than after, and returns when.
func (s apiServer) waitIdle(t *testing.T, c net.Conn, after time.Time) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.ln.mu.Lock()
		for sc, since := range s.ln.idle {
			if sc.RemoteAddr().String() == c.LocalAddr().String() && since.After(after) {
				s.ln.mu.Unlock()
				return since
			}
		}
		s.ln.mu.Unlock()
		require.True(t, time.Now().Before(deadline), "the server did not mark %s idle", c.LocalAddr())
		time.Sleep(5 * time.Millisecond)
	}
}

// request sends one request on c and reads its answer.
func request(t *testing.T, c net.Conn, br *bufio.Reader, method, path string) *http.Response {
	t.Helper()
	_, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: relay\r\nContent-Length: 0\r\n\r\n", method, path)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// requireClosedByServer fails unless the server closes c (the read ends
// with EOF or a reset, not with the test's own deadline).
func requireClosedByServer(t *testing.T, br *bufio.Reader, what string) {
	t.Helper()
	_, err := br.ReadByte()
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%s: the server did not close the connection within a minute", what)
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "ok")
})

func testLimits() apiLimits {
	return apiLimits{maxConns: 100, idleTimeout: time.Minute, bodyTimeout: time.Minute}
}

func TestAPIServerClosesAnIdleConnection(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.idleTimeout = 200 * time.Millisecond
	s := startAPIServer(t, limits, okHandler)
	c := s.dial(t)
	br := bufio.NewReader(c)
	require.Equal(t, http.StatusOK, request(t, c, br, "GET", "/").StatusCode)
	requireClosedByServer(t, br, "idle after one request")
}

func TestAPIServerCutsASlowHeader(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.headerTimeout = 200 * time.Millisecond
	s := startAPIServer(t, limits, okHandler)
	c := s.dial(t)
	// Headers that never end.
	_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: relay\r\nX-Slow: ")
	require.NoError(t, err)
	requireClosedByServer(t, bufio.NewReader(c), "headers not finished")
}

func TestAPIServerCutsAStalledBody(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.bodyTimeout = 200 * time.Millisecond
	var readErr atomic.Value
	s := startAPIServer(t, limits, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			readErr.Store(err)
			http.Error(w, "stalled", http.StatusRequestTimeout)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	c := s.dial(t)
	// 10 of the 100 bytes announced, then nothing.
	_, err := io.WriteString(c, "POST /ui/login HTTP/1.1\r\nHost: relay\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nkey=relay_")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no answer to a stalled body")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	got, _ := readErr.Load().(error)
	require.ErrorIs(t, got, os.ErrDeadlineExceeded)
	requireClosedByServer(t, br, "a body cut off")
}

// The body's deadline ends with the body: a handler that works longer than
// it afterwards is not cancelled.
func TestAPIServerLetsAHandlerOutlastTheBodyTimeout(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.bodyTimeout = 100 * time.Millisecond
	s := startAPIServer(t, limits, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		select {
		case <-time.After(10 * limits.bodyTimeout):
			_, _ = io.WriteString(w, "done")
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusServiceUnavailable)
		}
	}))
	c := s.dial(t)
	_, err := io.WriteString(c, "POST /replay HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
}

// At the cap, a new connection closes the one idle longest; the others
// stay. With TLS too.
func TestAPIConnLimitClosesTheLongestIdleForANewOne(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		testClosesTheLongestIdle(t, startAPIServer)
	})
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		testClosesTheLongestIdle(t, startAPIServerTLS)
	})
}

func testClosesTheLongestIdle(t *testing.T, start func(*testing.T, apiLimits, http.Handler) apiServer) {
	limits := testLimits()
	limits.maxConns = 3
	s := start(t, limits, okHandler)
	var conns []net.Conn
	var readers []*bufio.Reader
	// The server marks a connection idle after the client has its answer:
	// each is waited for, so that they fell idle in this order.
	var last time.Time
	for range limits.maxConns {
		c := s.dial(t)
		br := bufio.NewReader(c)
		require.Equal(t, http.StatusOK, request(t, c, br, "GET", "/").StatusCode)
		last = s.waitIdle(t, c, last)
		conns, readers = append(conns, c), append(readers, br)
	}
	// The first is idle longest: a second request on the second makes it
	// the newest idle one.
	require.Equal(t, http.StatusOK, request(t, conns[1], readers[1], "GET", "/").StatusCode)
	s.waitIdle(t, conns[1], last)

	c := s.dial(t)
	br := bufio.NewReader(c)
	require.Equal(t, http.StatusOK, request(t, c, br, "GET", "/").StatusCode, "a connection beyond the cap")
	requireClosedByServer(t, readers[0], "the longest idle connection")
	require.Equal(t, http.StatusOK, request(t, conns[1], readers[1], "GET", "/").StatusCode, "another idle connection stays")
	require.Equal(t, http.StatusOK, request(t, conns[2], readers[2], "GET", "/").StatusCode, "another idle connection stays")
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	require.LessOrEqual(t, s.ln.open, limits.maxConns)
	require.LessOrEqual(t, len(s.ln.idle), limits.maxConns, "idle connections tracked")
}

// At the cap with no connection idle, a new one waits for one to end: the
// handler never serves more than the cap at once.
func TestAPIConnLimitMakesANewConnectionWaitWhileNoneIsIdle(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.maxConns = 2
	release := make(chan struct{})
	var running, most atomic.Int32
	started := make(chan struct{}, 10)
	s := startAPIServer(t, limits, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- struct{}{}
		if r.URL.Path == "/block" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	answers := make(chan int, 3)
	for range limits.maxConns {
		c := s.dial(t)
		go func() {
			_, _ = io.WriteString(c, "GET /block HTTP/1.1\r\nHost: relay\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
		<-started
	}
	c := s.dial(t)
	br := bufio.NewReader(c)
	_, err := io.WriteString(c, "GET /next HTTP/1.1\r\nHost: relay\r\n\r\n")
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.logs.String(), "none is idle") {
		require.True(t, time.Now().Before(deadline), "the listener did not report waiting at the cap:\n%s", s.logs.String())
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "the waiting connection is served once a slot frees")
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for range limits.maxConns {
		require.Equal(t, http.StatusOK, <-answers)
	}
	require.EqualValues(t, limits.maxConns, most.Load(), "requests served at once")
}
