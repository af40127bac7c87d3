package integration

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress/proxytest"
)

// proxyFailures is p's relay_egress_proxy_failures_total.
func proxyFailures(t *testing.T, p *proc) float64 {
	t.Helper()
	resp, err := opsGet(t, p, "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^relay_egress_proxy_failures_total (\S+)$`).FindSubmatch(page)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// The egress proxy killed (SIGKILL) in the middle of a run, events
// published while it is down, then started again: every event is
// delivered, none is lost or dead-lettered. Each destination allows two
// attempts: the proxy's failures while it is down (many per event, one
// every 5s) use none; an attempt cut by the kill itself, inside a tunnel
// the proxy had opened, is charged as the destination's (relay cannot tell
// who closed it) and is retried once.
func TestFaultEgressProxyKilledMidRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tp := proxytest.Start(t, proxytest.Options{})
	const first, second, killAt = 300, 100, 100
	reached := make(chan struct{})
	var answered atomic.Int32
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		time.Sleep(5 * time.Millisecond)
		if answered.Add(1) == killAt {
			close(reached)
		}
		return faultOK(w)
	})
	e.addDest(destination.Destination{Name: "proxied", URL: s.URL, Timeout: destination.Duration(2 * time.Second), Concurrency: 4,
		Retry: destination.RetryPolicy{MaxAttempts: 2, Base: destination.Duration(100 * time.Millisecond), Max: destination.Duration(time.Second)}})
	p := faultRun(t, e.url, "--egress-proxy", tp.URL())
	published := map[string]string{}
	for i := range first {
		b := fmt.Sprintf(`{"n":%d}`, i)
		published[e.publish("proxied", "", b).ID] = b
	}
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("deliveries through the proxy never got going:\n%s", p.output())
	}
	tp.Stop() // SIGKILL
	for i := range second {
		b := fmt.Sprintf(`{"n":%d}`, first+i)
		published[e.publish("proxied", "", b).ID] = b
	}
	eventually(t, 30*time.Second, func() bool { return p.logged("egress proxy failing") }, "the proxy's failures logged:\n%s", p.output())
	before := len(s.delivered())
	require.Less(t, before, first+second, "the kill came before the work was done")
	// Down until the events waiting have failed through the proxy twice
	// each on average: charged, those would be dead-lettered.
	waiting := first + second - before
	eventually(t, 60*time.Second, func() bool { return proxyFailures(t, p) >= float64(2*waiting) },
		"the proxy's failures counted (%v so far)", proxyFailures(t, p))
	tp.Start()
	eventually(t, 90*time.Second, func() bool { return len(s.delivered()) == first+second && e.settled("proxied") },
		"all %d delivered once the proxy is back (%d so far):\n%s", first+second, len(s.delivered()), p.output())
	require.True(t, faultRunning(p), "the relay survived:\n%s", p.output())
	require.Empty(t, e.deadLetters("proxied"), "no event charged with the proxy's failures")
	dups := faultLedger(t, e, s, "proxied", published, 2)
	t.Logf("delivered %d before the proxy came back, %d duplicates", before, dups)
}
