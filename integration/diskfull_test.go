package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
)

// mountTmpfs mounts a tmpfs with opts on a new directory, unmounted when the
// test ends. It needs root (CI runs as root); the test is skipped without.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (CI runs as root)")
	}
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "mount a tmpfs (%s): %s", opts, out)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// The embedded server's data directory is a small filesystem that fills up:
// publishes are refused with an error (never acknowledged and then lost),
// relay keeps running, and every event whose publish was acknowledged is
// delivered.
func TestFaultDiskFull(t *testing.T) {
	t.Parallel()
	dir := mountTmpfs(t, "size=16m")

	var ok atomic.Bool
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		if !ok.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	p := startProc(t, "run", "--data-dir", dir, "--listen", "127.0.0.1:0")
	eventually(t, 20*time.Second, func() bool { return p.logged("relay running") }, "relay up:\n%s", p.output())
	url := regexp.MustCompile(`url=(nats://[0-9.:]+)`).FindStringSubmatch(p.output())
	require.Len(t, url, 2, p.output())

	nc, err := nats.Connect(url[1])
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "full", URL: s.URL, BreakerThreshold: -1,
		Retry: destination.RetryPolicy{Base: destination.Duration(200 * time.Millisecond), Max: destination.Duration(time.Second), MaxAttempts: 1000}})
	require.NoError(t, err)
	prod, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)

	body := make([]byte, 8<<10)
	for i := range body {
		body[i] = 'x'
	}
	acked := map[string]bool{}
	var refused error
	var refusedID string
	for i := range 10000 {
		id := fmt.Sprintf("f-%d", i)
		res, err := prod.Publish(ctx, publish.Event{Dest: "full", ID: id, Data: fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, body)})
		if err != nil {
			refused, refusedID = err, id
			break
		}
		acked[res.ID] = true
	}
	require.Error(t, refused, "the full disk refuses publishes")
	t.Logf("%d events stored before publishes were refused: %v", len(acked), refused)
	require.NotEmpty(t, acked)
	select {
	case <-p.exited:
		t.Fatalf("relay exited:\n%s", p.output())
	default:
	}

	ok.Store(true)
	eventually(t, 60*time.Second, func() bool {
		d := s.delivered()
		for id := range acked {
			if d[id] == 0 {
				return false
			}
		}
		return true
	}, "every acknowledged event delivered (%d of %d)", len(s.delivered()), len(acked))
	// A publish the server refused was not stored; one that failed
	// otherwise (a timeout on a slow machine) may have been.
	var apiErr *jetstream.APIError
	maybeStored := !errors.As(refused, &apiErr)
	for id := range s.delivered() {
		require.True(t, acked[id] || (maybeStored && id == refusedID), "only acknowledged events are delivered: %s", id)
	}
}

// TestFaultReadOnlyDataDir: relay run on a data directory it cannot write
// (a read-only mount) stops at once with an error that says so, instead of
// waiting for an embedded server that never starts listening.
func TestFaultReadOnlyDataDir(t *testing.T) {
	t.Parallel()
	dir := mountTmpfs(t, "size=1m,ro")

	p := startProc(t, "run", "--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-addr", "")
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("relay still running 5s after start on a read-only data directory:\n%s", p.output())
	}
	var exit *exec.ExitError
	require.ErrorAs(t, p.err, &exit)
	require.Equal(t, 1, exit.ExitCode(), p.output())
	require.Contains(t, p.output(), "data directory "+dir+" is not writable")
	require.Contains(t, p.output(), "read-only file system")
}
