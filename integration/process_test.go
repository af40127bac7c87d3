package integration

import (
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
)

// A relay killed with SIGKILL while the destination is still answering has
// acked nothing: the next relay delivers the event, with the same webhook-id.
func TestKilledRelayLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	arrived := make(chan string, 1)
	var once sync.Once
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		first := false
		once.Do(func() { first = true })
		if first {
			arrived <- h.ID
			<-h.Ctx.Done() // hang until the client is gone
			return 0
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "crash", URL: s.URL, Timeout: destination.Duration(time.Second)})

	// AckWait 7s: the killed relay's event comes back within the test's wait.
	p1 := startProc(t, "--nats-url", e.url, "run", "--ack-wait", "7s")
	eventually(t, 10*time.Second, func() bool { return p1.logged("relay running") }, "first relay up")
	res := e.publish("crash", "", `{"order":42}`)
	var id string
	select {
	case id = <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first relay never sent the event")
	}
	require.Equal(t, res.ID, id)
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	<-p1.exited

	p2 := startProc(t, "--nats-url", e.url, "run", "--ack-wait", "7s")
	eventually(t, 30*time.Second, func() bool { return s.delivered()[res.ID] == 1 }, "the second relay delivers the event")
	eventually(t, 10*time.Second, func() bool { return p2.logged("outcome=delivered") }, "the second relay logs the delivery")
	require.Equal(t, 2, s.received(), "one interrupted attempt, one delivery")
	for _, h := range s.all() {
		require.Equal(t, res.ID, h.ID, "same webhook-id on the redelivery")
	}
	eventually(t, 10*time.Second, func() bool { return e.settled("crash") }, "the event is acked")
	require.Empty(t, e.deadLetters("crash"))
}

// SIGTERM under load: relay lets in-flight deliveries finish, hands the rest
// back, and exits 0; a second relay delivers the rest. Every event is
// delivered exactly once: nothing lost, nothing sent twice.
func TestSigtermUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		time.Sleep(10 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	e.addDest(destination.Destination{Name: "load", URL: s.URL, Concurrency: 8})
	const n = 600
	ids := map[string]bool{}
	for range n {
		ids[e.publish("load", "", `{"x":true}`).ID] = true
	}

	p1 := startProc(t, "--nats-url", e.url, "run")
	eventually(t, 20*time.Second, func() bool { return s.received() >= 100 }, "deliveries under way")
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p1.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not exit after SIGTERM")
	}
	require.NoError(t, p1.err, "exit status 0 after SIGTERM:\n%s", p1.output())
	require.True(t, p1.logged("relay stopped"))
	first := len(s.delivered())
	require.Less(t, first, n, "SIGTERM came before the work was done")

	startProc(t, "--nats-url", e.url, "run")
	eventually(t, 60*time.Second, func() bool { return len(s.delivered()) == n && e.settled("load") }, "all delivered")
	for id, c := range s.delivered() {
		require.True(t, ids[id], "unexpected id %s", id)
		require.Equal(t, 1, c, "event %s delivered %d times", id, c)
	}
	require.Equal(t, n, s.received(), "no request was made twice")
	require.Empty(t, e.deadLetters("load"))
}
