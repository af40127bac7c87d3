package embedded

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

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
