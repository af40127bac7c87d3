package kafka_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// publisher's kgo client and every kfake broker must stop with its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
