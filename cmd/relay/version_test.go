package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildRelay builds this package into a temporary directory with extra go
// build flags and returns the binary's path.
func buildRelay(t *testing.T, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "relay")
	args := append(append([]string{"build"}, flags...), "-o", bin, ".")
	out, err := exec.Command("go", args...).CombinedOutput()
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
	return bin
}

func runVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s version: %s", bin, out)
	return string(out)
}

// TestVersionFromLdflags: what a release build sets with -ldflags -X is what
// 'relay version' and 'relay --version' print.
func TestVersionFromLdflags(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/relaydev/relay/internal/version"
	bin := buildRelay(t, "-ldflags", "-X "+pkg+".Version=9.8.7-test -X "+pkg+".Commit=feedc0de -X "+pkg+".Date=2026-02-03T04:05:06Z")
	require.Equal(t, "relay version 9.8.7-test\ncommit: feedc0de\ndate:   2026-02-03T04:05:06Z\ngo:     "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n", runVersion(t, bin))

	out, err := exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, "relay version 9.8.7-test\n", string(out))
}

// TestVersionWithoutBuildInfo: a plain build with no VCS stamping (as with
// GOFLAGS=-buildvcs=false, or in a git worktree, where Go finds no
// repository: golang/go#58218) says the commit and date are unknown and
// still names the Go version.
func TestVersionWithoutBuildInfo(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t, "-buildvcs=false")
	require.Equal(t, "relay version 0.1.0-dev\ncommit: unknown\ndate:   unknown\ngo:     "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n", runVersion(t, bin))
}
