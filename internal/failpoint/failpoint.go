//go:build failpoints

// Package failpoint lets the fault-injection tests kill a relay process at a
// precise point: a binary built with -tags failpoints dies by SIGKILL at the
// point named by RELAY_FAILPOINT. In an ordinary build Inject does nothing.
package failpoint

import (
	"os"
	"syscall"
)

// Inject kills the process with SIGKILL when RELAY_FAILPOINT is name.
func Inject(name string) {
	if os.Getenv("RELAY_FAILPOINT") == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never resumes
	}
}
