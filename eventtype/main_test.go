package eventtype

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// loop started in a test must stop with it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
