package pubsub

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// publisher's client, connections and watchers must stop with Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// OpenCensus, which the Pub/Sub client records its metrics with,
		// starts this worker when its package is loaded and never stops it.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}
