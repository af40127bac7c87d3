//go:build !failpoints

// Package failpoint lets the fault-injection tests kill a relay process at a
// precise point: a binary built with -tags failpoints dies by SIGKILL at the
// point named by RELAY_FAILPOINT. In an ordinary build Inject does nothing.
package failpoint

// Inject does nothing: this binary was built without -tags failpoints.
func Inject(string) {}
