// Package awstest is what the in-process AWS services of sqstest and
// eventbridgetest share: a listener that stops and restarts on the same
// address, the checks of a request in an AWS JSON protocol (SigV4
// signature included) and the protocol's answers; and the steps of the
// sqs and eventbridge kinds' tests that do not depend on the service.
package awstest

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Listener serves a handler on a loopback port it keeps across Stop and
// Restart, so that a client configured with its address finds the server
// again.
type Listener struct {
	t    testing.TB
	addr string
	h    http.Handler

	life sync.Mutex // guards srv and done
	srv  *http.Server
	done chan struct{}
}

// Listen serves h on a free loopback port, stopped when the test ends.
func Listen(t testing.TB, h http.Handler) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &Listener{t: t, addr: ln.Addr().String(), h: h}
	l.serve(ln)
	t.Cleanup(l.Stop)
	return l
}

func (l *Listener) serve(ln net.Listener) {
	srv := &http.Server{Handler: l.h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	l.life.Lock()
	l.srv, l.done = srv, done
	l.life.Unlock()
}

// Addr is the listener's host:port.
func (l *Listener) Addr() string { return l.addr }

// Endpoint is the listener's base URL, http://host:port.
func (l *Listener) Endpoint() string { return "http://" + l.addr }

// Stop closes the listener and its connections: connections are refused
// until Restart. Stopping a stopped listener does nothing.
func (l *Listener) Stop() {
	l.life.Lock()
	srv, done := l.srv, l.done
	l.srv, l.done = nil, nil
	l.life.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	<-done
}

// Restart stops the listener if it runs and listens again on the same
// address, waiting up to 10 seconds for the port to be free.
func (l *Listener) Restart() {
	l.t.Helper()
	l.Stop()
	var ln net.Listener
	require.Eventually(l.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", l.addr)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "listening again on %s", l.addr)
	l.serve(ln)
}

// WaitFor waits up to 10 seconds for accepted, a server's list of what it
// accepted, to hold at least n items, and returns them all; what names
// them in the failure ("SQS messages").
func WaitFor[T any](t testing.TB, n int, what string, accepted func() []T) []T {
	t.Helper()
	require.Eventually(t, func() bool { return len(accepted()) >= n }, 10*time.Second, 10*time.Millisecond,
		"waiting for %d %s", n, what)
	return accepted()
}
