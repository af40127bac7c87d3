package integration

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A second 'relay run' without the first one's --allow-net refuses to start
// (exit 2, naming the flag) instead of dead-lettering the events the first
// delivers; 'dest add' and 'dest update' refuse a URL the relays' policy
// blocks.
func TestReplicasMustAgreeOnTheAddressPolicy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p1 := faultRun(t, e.url) // RELAY_ALLOW_NET=127.0.0.0/8, as every test relay
	require.True(t, p1.logged("address policy"), p1.output())

	p2 := startProcEnv(t, []string{"RELAY_ALLOW_NET="}, "--nats-url", e.url, "run")
	select {
	case <-p2.exited:
	case <-time.After(time.Minute):
		t.Fatalf("a relay with another address policy started:\n%s", p2.output())
	}
	require.Equal(t, 2, p2.cmd.ProcessState.ExitCode(), p2.output())
	require.True(t, p2.logged("--allow-net differs from that of the running replica"), p2.output())
	require.True(t, p2.logged("public addresses and 127.0.0.0/8"), p2.output())

	code, out := e.relayCLI("dest", "add", "local", "--url", "http://127.0.0.1:9/hook", "--no-secret")
	require.Equal(t, 0, code, "the relays may reach loopback: %s", out)

	// With every relay stopped, the policy may change.
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGINT))
	<-p1.exited
	p3 := startProcEnv(t, []string{"RELAY_ALLOW_NET="}, "--nats-url", e.url, "run")
	eventually(t, time.Minute, func() bool { return p3.logged("relay running") }, "relay up:\n%s", p3.output())
	require.True(t, p3.logged("deliveries reach public addresses only"), p3.output())

	code, out = e.relayCLI("dest", "add", "local2", "--url", "http://127.0.0.1:9/hook", "--no-secret")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "--allow-net 127.0.0.1/32")
	code, out = e.relayCLI("dest", "update", "local", "--url", "http://10.1.2.3/hook")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "--allow-net 10.1.2.3/32")
	code, out = e.relayCLI("dest", "update", "local", "--timeout", "5s")
	require.Equal(t, 0, code, "settings other than the URL are not checked: %s", out)
}
