package integration

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
)

// rssKB reads a process's resident set size from /proc.
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestSoak runs steady load for RELAY_SOAK (e.g. 10m; `make soak`) against a
// destination failing 5% of requests, restarting one of two replicas every
// minute: nothing is lost, and the replica that runs throughout keeps a flat
// memory footprint. Without RELAY_SOAK it does not run: it is a separate
// target, too long for `make test`.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("RELAY_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set RELAY_SOAK=10m (make soak) to run the soak test")
	}
	e := setup(t)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		f := fnv.New32a()
		fmt.Fprintf(f, "%s/%d", h.ID, h.N)
		if f.Sum32()%20 == 0 { // 5%
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	e.addDest(destination.Destination{Name: "soak", URL: s.URL, Concurrency: 16,
		Retry: destination.RetryPolicy{Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(2 * time.Second), MaxAttempts: 20}})
	steady := startProc(t, "--nats-url", e.url, "--log-level", "warn", "run")
	restarted := startProc(t, "--nats-url", e.url, "--log-level", "warn", "run")

	const rate = 200 // events per second
	ids := map[string]bool{}
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	start := time.Now()
	var baseline int
	// After warm-up: relay's heap first grows to its floor (--gc-heap-floor,
	// 24 MiB), which takes about half a minute at this rate.
	warmUp := max(30*time.Second, d/3)
	lastRestart := start
	for time.Since(start) < d {
		<-tick.C
		ids[e.publish("soak", "", `{"soak":true}`).ID] = true
		if baseline == 0 && time.Since(start) > warmUp {
			baseline = rssKB(t, steady.cmd.Process.Pid)
		}
		if time.Since(lastRestart) >= time.Minute {
			require.NoError(t, restarted.cmd.Process.Signal(syscall.SIGTERM))
			<-restarted.exited
			require.NoError(t, restarted.err, "graceful exit:\n%s", restarted.output())
			restarted = startProc(t, "--nats-url", e.url, "--log-level", "warn", "run")
			lastRestart = time.Now()
		}
	}
	eventually(t, 2*time.Minute, func() bool { return len(s.delivered()) == len(ids) && e.settled("soak") }, "all %d delivered (have %d)", len(ids), len(s.delivered()))
	require.Empty(t, e.deadLetters("soak"))
	end := rssKB(t, steady.cmd.Process.Pid)
	t.Logf("%d events over %s; steady replica RSS %d KB after warm-up, %d KB at the end", len(ids), d, baseline, end)
	if baseline > 0 {
		require.Less(t, end, baseline*3/2+20*1024, "memory stays flat")
	}
}
