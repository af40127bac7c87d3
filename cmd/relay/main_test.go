package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// server, loop and browser a test starts must stop with it.
func TestMain(m *testing.M) {
	// The Pub/Sub client's OpenCensus worker, started when its package
	// loads (kind/kinds imports it) and never stopped.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
