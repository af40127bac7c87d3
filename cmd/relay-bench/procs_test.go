package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitReadySaysWhatTheChildDid: a child that prints something else is
// stopped and quoted; one that dies without a line is reported with its
// exit and the end of its log.
func TestWaitReadySaysWhatTheChildDid(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	p, out, err := startProc("talker", filepath.Join(dir, "talker.log"), nil, true, "/bin/sh", "-c", "echo nope; exec sleep 30")
	require.NoError(t, err)
	err = waitReady(ctx, p, out)
	require.ErrorContains(t, err, `talker printed "nope" instead of ready`)
	require.True(t, p.exited(), "stopped")

	p, out, err = startProc("crasher", filepath.Join(dir, "crasher.log"), nil, true, "/bin/sh", "-c", "echo 'cannot connect' >&2; exit 3")
	require.NoError(t, err)
	err = waitReady(ctx, p, out)
	require.ErrorContains(t, err, "crasher exited early (exit status 3)")
	require.ErrorContains(t, err, "cannot connect")

	p, out, err = startProc("ready", filepath.Join(dir, "ready.log"), nil, true, "/bin/sh", "-c", "echo ready; exec sleep 30")
	require.NoError(t, err)
	require.NoError(t, waitReady(ctx, p, out))
	_ = p.stop(5 * time.Second) // sleep dies of the SIGTERM, which stop reports
	require.True(t, p.exited())
}

func TestLogErrorsCountsRelaysErrorLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.log")
	require.NoError(t, os.WriteFile(path, []byte("time=1 level=WARN msg=a\n"), 0o644))
	require.Equal(t, "", logErrors(path))
	require.NoError(t, os.WriteFile(path, []byte("time=1 level=WARN msg=a\ntime=2 level=ERROR msg=\"router stopped\"\ntime=3 level=ERROR msg=again\n"), 0o644))
	require.Equal(t, "relay logged 2 ERROR lines ("+path+`); the first: time=2 level=ERROR msg="router stopped"`, logErrors(path))
}
