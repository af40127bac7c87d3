package embedded

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Clients of relay (the producer and the engine, api/client, receivers'
// webhook package) never link nats-server: only this package does.
func TestOnlyThisPackageLinksTheServer(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"../../stream", "../../relay", "../../api/client", "../../webhook"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.NotContains(t, string(out), "nats-server", "%s links nats-server", pkg)
	}
}
