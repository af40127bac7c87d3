package natskind

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// closed publisher leaves no connection or loop behind, nor does a stopped
// test server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
