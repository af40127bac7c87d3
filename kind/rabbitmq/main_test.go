package rabbitmq_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/relaydev/relay/kind/rabbitmq/rabbittest"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// publisher must release its connections and goroutines on Close. The
// shared broker is killed and its files removed once the tests are over
// (goleak's Cleanup replaces its os.Exit).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		rabbittest.StopShared()
		os.Exit(code)
	}))
}
