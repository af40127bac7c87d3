package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream/streamtest"
)

// dialEnv is an env on the NATS server at url that another process runs
// (relay run's embedded server): it reconnects when that server comes back.
func dialEnv(t *testing.T, url string) *env {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	p, err := publish.NewProducer(ctx, js)
	require.NoError(t, err)
	return &env{t: t, url: url, nc: nc, js: js, store: st, prod: p}
}

// Ctrl-C of 'relay run' with its embedded server, then 'relay run' again on
// the same data directory: the events relay held but had not attempted
// (handed back on the stop) are delivered at once after the restart, not
// once their AckWait (here 10 minutes) has run out, and every event is
// delivered exactly once.
func TestEmbeddedRestartDeliversHandedBackEventsAtOnce(t *testing.T) {
	t.Parallel()
	dir, port := t.TempDir(), streamtest.Port(t)
	args := []string{"run", "--data-dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--ack-wait", "10m"}
	p1 := startProc(t, args...)
	eventually(t, time.Minute, func() bool { return p1.logged("relay running") }, "relay up:\n%s", p1.output())
	e := dialEnv(t, fmt.Sprintf("nats://127.0.0.1:%d", port))

	s, arrived, release := gatedSink(t, 4)
	e.addDest(destination.Destination{Name: "hb", URL: s.URL, Concurrency: 4, Timeout: destination.Duration(5 * time.Minute)})
	acks := e.watchAcks("hb")
	const n = 40
	for range n {
		e.publish("hb", "", `{}`)
	}
	// Four attempts held by the sink, and at least two more events handed
	// to relay, queued.
	eventually(t, time.Minute, func() bool { return arrived.Load() == 4 && e.ackPending("hb") >= 6 },
		"four attempts in flight and more events queued (ack pending %d)", e.ackPending("hb"))
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGINT))
	// The stop hands the queued events back while the attempts are held;
	// then the attempts finish.
	eventually(t, time.Minute, func() bool {
		select {
		case m := <-acks:
			return strings.HasPrefix(string(m.Data), "-NAK")
		default:
			return false
		}
	}, "queued events handed back")
	release()
	select {
	case <-p1.exited:
	case <-time.After(time.Minute):
		t.Fatalf("relay did not stop on SIGINT:\n%s", p1.output())
	}
	require.NoError(t, p1.err, p1.output())
	first := len(s.delivered())
	require.Less(t, first, n, "relay delivered everything before it stopped")

	p2 := startProc(t, args...)
	// Far within AckWait: without the hand-back stored, the events handed
	// back would wait 10 minutes.
	eventually(t, 90*time.Second, func() bool { return len(s.delivered()) == n },
		"all %d delivered after the restart (%d before it)", n, first)
	require.NoError(t, p2.cmd.Process.Signal(syscall.SIGINT))
	<-p2.exited
	require.NoError(t, p2.err, p2.output())
	for id, c := range s.delivered() {
		require.Equal(t, 1, c, "event %s delivered %d times", id, c)
	}
}
