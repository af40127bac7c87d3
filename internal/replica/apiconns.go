package replica

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// The defaults of the API server's bounds (docs/operations.md#the-http-apis-connections).
const (
	// DefaultAPIMaxConns leaves half of a 1,024 open-files limit, the
	// lowest relay is likely to meet, to NATS, Redis and deliveries.
	DefaultAPIMaxConns    = 512
	DefaultAPIIdleTimeout = 2 * time.Minute
	// DefaultAPIBodyTimeout is api.Config.BodyTimeout's default.
	DefaultAPIBodyTimeout = time.Minute
	// longestAPIHandler is the longest an API handler works on a request
	// once it has its body: a dead-letter replay or purge (10 minutes).
	longestAPIHandler = 10 * time.Minute
	// apiWriteMargin is the time an answer has to be written once its
	// handler is done.
	apiWriteMargin = 2 * time.Minute
	// reservedFiles are the descriptors relay needs beside the API's
	// connections and its deliveries' sockets: NATS, Redis, the embedded
	// server's store files, the metrics server.
	reservedFiles = 128
)

// apiLimits bound the HTTP API's server: the connections it holds, how
// long it keeps an idle one, how long a request may take to arrive.
type apiLimits struct {
	// maxConns is the most connections held at once (--api-max-conns).
	maxConns int
	// idleTimeout closes a keep-alive connection with no request
	// (--api-idle-timeout).
	idleTimeout time.Duration
	// bodyTimeout bounds the reading of a request's body, from the end of
	// its headers (--api-body-timeout).
	bodyTimeout time.Duration
	// headerTimeout bounds the reading of a request's headers, and a TLS
	// handshake. Optional: without it, the server's ReadHeaderTimeout
	// stays.
	headerTimeout time.Duration
}

// Validate checks --api-max-conns, --api-idle-timeout and
// --api-body-timeout.
func (l apiLimits) Validate() error {
	if l.maxConns < 1 || l.maxConns > 1_000_000 {
		return invalid("--api-max-conns %d: give 1 to 1000000", l.maxConns)
	}
	if l.idleTimeout < time.Second || l.idleTimeout > time.Hour {
		return invalid("--api-idle-timeout %s: give 1s to 1h", l.idleTimeout)
	}
	if l.bodyTimeout < time.Second || l.bodyTimeout > time.Hour {
		return invalid("--api-body-timeout %s: give 1s to 1h", l.bodyTimeout)
	}
	return nil
}

// bound applies l to srv and returns ln capped at l.maxConns connections,
// for srv to serve. Each request's body must arrive within l.bodyTimeout
// of its headers; the server's write timeout outlasts the longest handler
// (longestAPIHandler) by apiWriteMargin, so that only a client that does
// not read its answer is cut off. It warns when the process's open-files
// limit leaves less than reservedFiles descriptors beside the cap and
// maxInFlight deliveries.
func (l apiLimits) bound(srv *http.Server, ln net.Listener, maxInFlight int, log *slog.Logger) net.Listener {
	if l.headerTimeout > 0 {
		srv.ReadHeaderTimeout = l.headerTimeout
	}
	srv.IdleTimeout = l.idleTimeout
	srv.WriteTimeout = l.bodyTimeout + longestAPIHandler + apiWriteMargin
	srv.Handler = bodyDeadline(srv.Handler, l.bodyTimeout)
	limited := &connLimit{Listener: ln, max: l.maxConns, log: log, idle: map[net.Conn]time.Time{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		limited.track(c, s)
		if prev != nil {
			prev(c, s)
		}
	}
	// Go raises the soft limit to one below the hard one as the process
	// starts (syscall's init: 1024 of 4096 becomes 4095), so what is read
	// here is all relay can have; only the hard limit counts.
	if limit, ok := openFilesLimit(); ok && limit < uint64(l.maxConns+maxInFlight+reservedFiles) {
		log.Warn("the open-files limit leaves little room beside the HTTP API's connections and the deliveries' sockets: raise it (LimitNOFILE in systemd, ulimit -n, docker --ulimit nofile) or lower --api-max-conns", "open_files_limit", limit, "api_max_conns", l.maxConns, "max_in_flight", maxInFlight)
	}
	return limited
}

// bodyDeadline bounds the reading of each request's body to d from the
// time h is called (the end of the headers): a client that stalls gets a
// read error (os.ErrDeadlineExceeded), and the server closes its
// connection rather than wait for the rest. net/http lifts the deadline
// once the body has been read (as it starts its background read), so a
// handler that works longer afterwards is not cancelled.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			// net/http's connections all support it; another
			// goes without.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		h.ServeHTTP(w, r)
	})
}

// connLimit is a listener that holds at most max connections at once. A
// connection accepted at the cap closes the one idle longest (a keep-alive
// connection between requests), or, with none idle, waits until one ends;
// connections beyond it wait in the kernel's listen queue, which takes
// none of relay's descriptors. So idle keep-alive connections, which
// otherwise stay until IdleTimeout, never keep a new client out.
//
// golang.org/x/net/netutil.LimitListener caps the same way, but cannot
// close an idle connection for a new one: it waits for a slot before it
// accepts, without knowing that a client is there.
type connLimit struct {
	net.Listener
	max int
	log *slog.Logger

	mu   sync.Mutex
	open int
	// idle are the connections between two requests, since when; keyed by
	// the connection Accept returned (under TLS, the one under the
	// tls.Conn).
	idle   map[net.Conn]time.Time
	warned time.Time // when the cap was last reached with none idle

	wake      chan struct{} // a connection ended or became idle (buffered: 1)
	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if l.open < l.max {
			l.open++
			l.mu.Unlock()
			return &limitedConn{Conn: c, l: l}, nil
		}
		victim := l.longestIdleLocked()
		warn := victim == nil && time.Since(l.warned) >= time.Minute
		if warn {
			l.warned = time.Now()
		}
		l.mu.Unlock()
		if victim != nil {
			// Its Close frees the slot this loop takes next.
			_ = victim.Close()
			continue
		}
		if warn {
			l.log.Warn("the HTTP API holds --api-max-conns connections and none is idle: new ones wait until one ends", "api_max_conns", l.max)
		}
		select {
		case <-l.wake:
		case <-l.done:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// longestIdleLocked takes the connection idle longest out of l.idle; nil
// when none is idle.
func (l *connLimit) longestIdleLocked() net.Conn {
	var oldest net.Conn
	var since time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		delete(l.idle, oldest)
	}
	return oldest
}

func (l *connLimit) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// track is the server's ConnState hook: it records which connections are
// idle, and wakes an Accept waiting for one.
func (l *connLimit) track(c net.Conn, s http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	l.mu.Lock()
	if s == http.StateIdle {
		l.idle[c] = time.Now()
	} else {
		delete(l.idle, c)
	}
	l.mu.Unlock()
	if s == http.StateIdle {
		l.signal()
	}
}

// signal wakes an Accept waiting at the cap.
func (l *connLimit) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// release frees c's slot.
func (l *connLimit) release(c net.Conn) {
	l.mu.Lock()
	l.open--
	delete(l.idle, c)
	l.mu.Unlock()
	l.signal()
}

// limitedConn is a connection of a connLimit: closing it frees its slot.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
