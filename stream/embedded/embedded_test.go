package embedded

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/stream"
	"github.com/stretchr/testify/require"
)

func TestStartNeedsADataDir(t *testing.T) {
	t.Parallel()
	_, err := Start(Config{})
	require.ErrorContains(t, err, "data directory")
}

func TestStartSaysWhyItCannotStart(t *testing.T) {
	t.Parallel()

	// A data directory that cannot be made (a file is in the way; root
	// cannot get past that either). The server alone would only never
	// start listening.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	start := time.Now()
	_, err := Start(Config{DataDir: filepath.Join(file, "data"), Port: -1})
	require.ErrorContains(t, err, "data directory "+filepath.Join(file, "data")+" is not writable")
	require.ErrorContains(t, err, "not a directory")
	require.Less(t, time.Since(start), 5*time.Second, "it fails at once, not after the 10s wait")

	// A port in use: the server's own reason, at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	var logged atomic.Int32
	start = time.Now()
	_, err = Start(Config{DataDir: t.TempDir(), Port: port, Logf: func(string, ...any) { logged.Add(1) }})
	require.ErrorContains(t, err, fmt.Sprintf("did not start listening on 127.0.0.1:%d", port))
	require.ErrorContains(t, err, "address already in use")
	require.Less(t, time.Since(start), 5*time.Second, "it fails at once, not after the 10s wait")
	require.Positive(t, logged.Load(), "the server's log still reaches Logf")
}

// recoveringStore makes a data directory whose events stream the server has
// to rebuild from its message blocks when it starts, as after a crash (its
// index is gone), and returns it with the number of events in it.
func recoveringStore(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	s, err := Start(Config{DataDir: dir, Port: -1})
	require.NoError(t, err)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, stream.Ensure(ctx, js, stream.Config{}))
	body := make([]byte, 1024)
	const n = 50_000
	for i := range n {
		_, err := js.PublishAsync(stream.InSubject(fmt.Sprintf("d%d", i%10), ""), body)
		require.NoError(t, err)
		if i%2000 == 1999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	index := filepath.Join(dir, "jetstream", "jetstream", "$G", "streams", stream.EventsStream, "msgs", "index.db")
	require.FileExists(t, index)
	require.NoError(t, os.Remove(index))
	return dir, n
}

// A server recovering a large store is waited for however long that takes
// (here, longer than the wait for it to listen), and reported meanwhile.
func TestStartWaitsForItsStoreToRecover(t *testing.T) {
	t.Parallel()
	dir, n := recoveringStore(t)
	var reported atomic.Int32
	cfg := Config{DataDir: dir, Port: -1, Recovering: func(time.Duration) { reported.Add(1) }}
	s, _, err := start(context.Background(), cfg, startTiming{listen: time.Millisecond, every: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.Positive(t, reported.Load(), "the recovery was reported while it went on")

	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), stream.EventsStream)
	require.NoError(t, err)
	require.Equal(t, uint64(n), st.CachedInfo().State.Msgs, "every event recovered")
}

// The wait for a recovering server ends with its context, with an error
// that says so.
func TestStartGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	dir, _ := recoveringStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{DataDir: dir, Port: -1, Recovering: func(time.Duration) { cancel() }}
	s, down, err := start(ctx, cfg, startTiming{listen: time.Millisecond, every: time.Millisecond})
	require.Nil(t, s)
	require.ErrorContains(t, err, "while it was recovering its JetStream store")
	require.ErrorIs(t, err, context.Canceled)
	// The server it gave up on shuts down once its recovery is over.
	select {
	case <-down:
	case <-time.After(time.Minute):
		t.Fatal("the server given up on did not shut down")
	}
}

// freePort is a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// logLines collects a server's log, and says when a line holding a
// string came.
type logLines struct {
	mu    sync.Mutex
	lines []string
	seen  chan string
}

func (l *logLines) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	select {
	case l.seen <- line:
	default:
	}
}

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// With a cluster secret, the nodes that know it form a cluster and a
// server that does not (a wrong secret, or none) is refused, and the secret
// never reaches the log.
func TestClusterSecretKeepsOutAServerWithoutIt(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef-cluster"
	pa, pb := freePort(t), freePort(t)
	node := func(name string, port int, secret string, routes ...int) (*server.Server, *logLines) {
		logs := &logLines{seen: make(chan string, 1024)}
		cfg := Config{DataDir: t.TempDir(), Port: -1, Name: name, ClusterName: "c", ClusterHost: "127.0.0.1",
			ClusterPort: port, ClusterSecret: secret, Logf: logs.logf}
		for _, r := range routes {
			cfg.Routes = append(cfg.Routes, fmt.Sprintf("nats://127.0.0.1:%d", r))
		}
		s, err := Start(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		return s, logs
	}
	a, alog := node("a", pa, secret, pb)
	b, blog := node("b", pb, secret, pa)
	require.Eventually(t, func() bool { return a.NumRoutes() > 0 && b.NumRoutes() > 0 }, time.Minute, 10*time.Millisecond,
		"the nodes that share the secret form a cluster")

	for i, wrong := range []string{"another-secret-0123456789", ""} {
		c, clog := node(fmt.Sprintf("c%d", i), freePort(t), wrong, pa)
		// a refuses c's route, and c hears why.
		for refused := false; !refused; {
			select {
			case line := <-clog.seen:
				refused = strings.Contains(strings.ToLower(line), "authorization violation")
			case <-time.After(time.Minute):
				t.Fatalf("no refusal in c's log:\n%s", clog.all())
			}
		}
		// c keeps trying (each try is a route connection until refused,
		// with no name: a reads c's name only once c is authenticated).
		for _, s := range []*server.Server{a, b} {
			rz, err := s.Routez(nil)
			require.NoError(t, err)
			for _, r := range rz.Routes {
				require.NotEqual(t, c.Name(), r.RemoteName, "c is no route of %s", s.Name())
			}
		}
		require.NotContains(t, a.JetStreamClusterPeers(), c.Name(), "c is no JetStream peer")
		require.NotContains(t, clog.all(), secret)
	}
	require.NotContains(t, alog.all()+blog.all(), secret, "the secret is not logged")
}
