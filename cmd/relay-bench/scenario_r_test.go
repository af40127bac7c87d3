package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// series is n bins of v each.
func series(n int, v int64) []int64 { return slices.Repeat([]int64{v}, n) }

func TestDipOfSteadyDeliveries(t *testing.T) {
	bins := series(150, 100) // 15s at 1,000/s
	d := dipOf(bins, 100, 40, 150)
	require.Equal(t, dipFigures{StartMs: -1, LowestPerSec: 1000}, d)
	require.Contains(t, d.String(), "never fell below half")

	// Below the rate, but never below half: no dip.
	bins[45], bins[46] = 51, 50
	require.Equal(t, -1.0, dipOf(bins, 100, 40, 150).StartMs)
}

func TestDipOfANodeLoss(t *testing.T) {
	// 1,000/s (100 per 100 ms); the kill in bin 40. Two bins later the
	// deliveries stop for 1.5s, come back slowly, catch up, then run at
	// the rate.
	bins := series(40, 100)
	bins = append(bins, 100, 80)            // 40, 41: still at half or more
	bins = append(bins, series(15, 0)...)   // 42..56: nothing
	bins = append(bins, 10, 30, 49)         // 57..59: below half
	bins = append(bins, 60, 40)             // 60 above, 61 below again
	bins = append(bins, 300, 250)           // 62, 63: the backlog
	bins = append(bins, series(86, 100)...) // 64..149
	require.Len(t, bins, 150)

	d := dipOf(bins, 100, 40, 150)
	require.Equal(t, 200.0, d.StartMs, "the first bin below half is 42, 2 after the kill")
	require.Equal(t, 2000.0, d.LastsMs, "recovered at bin 62, the first of 10 bins at half or more")
	require.Equal(t, 1900.0, d.BelowHalfMs, "15 + 3 + 1 bins below half")
	require.Equal(t, 0.0, d.LowestPerSec, "a second with no delivery at all")
	require.Contains(t, d.String(), "fell below half the publish rate 200 ms after the kill and recovered 2000 ms later")

	// The same loss near the end: no whole second at half before
	// publishing ended.
	d = dipOf(bins, 100, 40, 70)
	require.Equal(t, 200.0, d.StartMs)
	require.Equal(t, -1.0, d.LastsMs)
	require.Contains(t, d.String(), "did not recover before publishing ended")
}

func TestDipOfShortAndMissingSeries(t *testing.T) {
	// Bins past the end of the series count as no deliveries; a run shorter
	// than a second after the kill has no lowest second.
	d := dipOf(series(45, 100), 100, 40, 48)
	require.Equal(t, 500.0, d.StartMs)
	require.Equal(t, 300.0, d.BelowHalfMs)
	require.Equal(t, -1.0, d.LastsMs)
	require.Equal(t, -1.0, d.LowestPerSec)
	require.NotContains(t, d.String(), "fewest")

	// A kill bin before the first bin (clock skew) starts at 0.
	d = dipOf(series(20, 100), 100, -3, 20)
	require.Equal(t, -1.0, d.StartMs)
	require.Equal(t, 1000.0, d.LowestPerSec)
}

// TestSinkDeliveryHistogram: /stats?bins=1 counts new deliveries per
// 100 ms since the reset (a duplicate is not one) and the longest gap
// between two; /stats without it leaves the bins out.
func TestSinkDeliveryHistogram(t *testing.T) {
	s := newSinkServer()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.mu.Lock()
	s.resetAt = 1_000 * int64(time.Second)
	t0 := s.resetAt
	for _, at := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 120 * time.Millisecond, 450 * time.Millisecond, 460 * time.Millisecond} {
		s.newDelivery(t0 + int64(at))
	}
	s.mu.Unlock()
	get := func(q string) sinkStats {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/stats" + q)
		require.NoError(t, err)
		defer resp.Body.Close()
		var st sinkStats
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		return st
	}
	st := get("?bins=1")
	require.Equal(t, []int64{2, 1, 0, 0, 2}, st.Bins)
	require.Equal(t, t0, st.BinsStartNs)
	require.InDelta(t, 330.0, st.MaxGapMs, 1e-9, "from 120 to 450 ms")
	require.Equal(t, t0+int64(450*time.Millisecond), st.MaxGapEndNs)
	require.Nil(t, get("").Bins)

	// A reset starts over; a delivery and its duplicate make one.
	resp, err := srv.Client().Post(srv.URL+"/reset", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	for range 2 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/d/r", strings.NewReader(`{"ts":1}`))
		require.NoError(t, err)
		req.Header.Set("webhook-id", "e1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	st = get("?bins=1")
	require.Equal(t, int64(1), st.Duplicates)
	require.Equal(t, int64(1), slices.Max(st.Bins))
	var sum int64
	for _, v := range st.Bins {
		sum += v
	}
	require.Equal(t, int64(1), sum)
	require.Zero(t, st.MaxGapMs, "one delivery: no gap")
}

func TestClusterFlags(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)

	o, err := parseFlags([]string{"-relay", exe})
	require.NoError(t, err)
	require.NotContains(t, o.scenarios, "r", "(r) runs on purpose only")
	require.Equal(t, 100_000, o.rN)
	require.Equal(t, 5, o.rRounds, "the issue's five rounds")
	require.Equal(t, 0.5, o.rRateShare, "half the loop's throughput")
	require.Equal(t, 15*time.Second, o.rDuration)
	require.Equal(t, 3*time.Second, o.rDown)

	o, err = parseFlags([]string{"-relay", exe, "-scenarios", "r,a", "-r-n", "5000", "-r-duration", "12s", "-r-down", "5s"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "r"}, o.scenarios, "(r) after (a), whose figures it is set beside")
	require.Equal(t, 5000, o.rN)
	require.Equal(t, 12*time.Second, o.rDuration)
	require.Equal(t, 5*time.Second, o.rDown)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-r-n", "0"}, "-r-n 0"},
		{[]string{"-r-rounds", "0"}, "-r-rounds 0: give 1 to 20"},
		{[]string{"-r-rounds", "21"}, "-r-rounds 21: give 1 to 20"},
		{[]string{"-r-rate-share", "0"}, "-r-rate-share 0: give more than 0, up to 1"},
		{[]string{"-r-rate-share", "1.5"}, "-r-rate-share 1.5: give more than 0, up to 1"},
		{[]string{"-r-down", "500ms"}, "-r-down 500ms: give 1s to 1m"},
		{[]string{"-r-duration", "9s"}, "-r-duration 9s: give 10s (the kill at 4s, -r-down, then 3s)"},
		{[]string{"-r-down", "10s", "-r-duration", "15s"}, "-r-duration 15s: give 17s"},
	} {
		_, err := parseFlags(append([]string{"-relay", exe}, tc.args...))
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
}

func TestNATSNodeFlags(t *testing.T) {
	err := runNATSNode([]string{"-name", "r0"})
	require.ErrorContains(t, err, "-name, -dir, -port, -cluster-port, -routes and -stats-addr are required")
	err = runNATSNode([]string{"-name", "r0", "-dir", t.TempDir(), "-port", "1", "-cluster-port", "2", "-routes", "nats://127.0.0.1:2", "-stats-addr", "10.0.0.1:3"})
	require.ErrorContains(t, err, "give a loopback address")
}

// TestClusterBesideR1: (r)'s table sets the cluster's figures beside (a)'s
// medians and (b) on one server.
func TestClusterBesideR1(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}, Options: optsJSON{RDuration: "15s", RDown: "3s"}}
	require.Nil(t, r.clusterRows(), "no (r): no table")
	for _, x := range []struct {
		sys       string
		rate, cpu float64
	}{{"relay", 10000, 1.0}, {"minimal loop", 10000, 0.8}, {"relay", 9000, 0.9}, {"minimal loop", 8000, 0.9}, {"relay", 11000, 1.1}, {"minimal loop", 9000, 0.7}} {
		r.Results = append(r.Results, &result{Scenario: "a", System: x.sys, PerSecond: x.rate, Delivered: 1000, ProcCPU: x.cpu / 10, BenchCPU: 0.05, Seconds: 1})
	}
	r.Results = append(r.Results,
		&result{Scenario: "b", System: "relay", Rate: 5000, P50ms: 1.5, P99ms: 9.25, Seconds: 1},
		// Rounds: the table has their medians.
		&result{Scenario: "r", Title: "cluster throughput", System: "relay, 2 replicas", Round: 1, PerSecond: 4000, Delivered: 1000, ProcCPU: 0.2, NodesCPU: 0.4, Seconds: 1},
		&result{Scenario: "r", Title: "cluster throughput", System: "relay, 2 replicas", Round: 2, PerSecond: 3000, Delivered: 1000, ProcCPU: 0.3, NodesCPU: 0.5, Seconds: 1},
		&result{Scenario: "r", Title: "cluster throughput", System: "relay, 2 replicas", Round: 3, PerSecond: 5000, Delivered: 1000, ProcCPU: 0.1, NodesCPU: 0.3, Seconds: 1},
		&result{Scenario: "r", Title: "cluster latency", System: "relay, 2 replicas", Round: 1, Rate: 2000, P50ms: 3, P99ms: 20.5, Seconds: 1},
		&result{Scenario: "r", Title: "cluster latency", System: "relay, 2 replicas", Round: 2, Rate: 2000, P50ms: 4, P99ms: 30, Seconds: 1},
		&result{Scenario: "r", Title: "cluster node restart", System: "relay, 2 replicas", Rate: 2000, Duplicates: 7, Seconds: 1,
			Restart: &restartFigures{MaxGapMs: 2345, ElectedSecs: 2.25, AllDeliveredSecs: 1.25, LongestMs: 17_250, Dip: dipFigures{StartMs: 100, LastsMs: 2600, BelowHalfMs: 2700}}},
		&result{Scenario: "r", Title: "cluster throughput", System: "minimal loop", Round: 1, PerSecond: 4500, Delivered: 1000, ProcCPU: 0.1, NodesCPU: 0.3, Seconds: 1},
		&result{Scenario: "r", Title: "cluster node restart", System: "minimal loop", Rate: 2000, Seconds: 1,
			Restart: &restartFigures{Lost: 0, MaxGapMs: 900, ElectedSecs: -1, Dip: dipFigures{StartMs: -1, LastsMs: 0}}},
	)
	rows := r.clusterRows()
	require.Equal(t, []string{"relay, R1", "10000", "", "0.100", "0.050", "1.50", "9.25", "5000", "", "", "", "", "", "", "", ""}, rows[1])
	require.Equal(t, []string{"minimal loop, R1", "9000", "", "0.080", "0.050", "-", "-", "-", "", "", "", "", "", "", "", ""}, rows[2])
	require.Equal(t, []string{"relay, 2 replicas, R3", "4000", "0.40", "0.200", "0.400", "3.00", "20.50", "2000", "0", "7", "2345", "2.2", "2700", "2600", "1.2", "17.2"}, rows[3],
		"the medians of the rounds (the lower middle one of two)")
	require.Equal(t, []string{"minimal loop, R3", "4500", "0.50", "0.100", "0.300", "-", "-", "-", "0", "0", "900", "-", "0", "no dip", "0.0", "0.0"}, rows[4])
	var buf bytes.Buffer
	r.clusterText(&buf)
	require.Contains(t, buf.String(), "the consumer SIGKILLed 4s into the run and started again 3s later, -r-duration 15s in all")
}

// TestFirstLogAfter finds, in the nodes' logs, when the events stream's new
// leader was elected after a kill: the earliest such line after it, in any
// log.
func TestFirstLogAfter(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		path := dir + "/" + name
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
		return path
	}
	const needle = "new stream leader for '$G > RELAY_EVENTS'"
	a := write("nats-r0.log",
		"2026/12/02 03:11:03.799074 nats: JetStream cluster new stream leader for '$G > RELAY_EVENTS'",
		"2026/12/02 03:11:38.792826 nats: JetStream cluster new stream leader for '$G > RELAY_EVENTS'")
	b := write("nats-r1.log",
		"short",
		"2026/12/02 03:11:36.328076 nats: JetStream cluster new stream leader for '$G > KV_relay_destinations'",
		"2026/12/02 03:11:37.500000 nats: JetStream cluster new stream leader for '$G > RELAY_EVENTS'")
	kill := time.Date(2026, 12, 2, 3, 11, 32, 0, time.Local)
	got, ok := firstLogAfter([]string{a, b, dir + "/missing.log"}, needle, kill)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 12, 2, 3, 11, 37, 500_000_000, time.Local), got)

	_, ok = firstLogAfter([]string{a, b}, needle, kill.Add(time.Minute))
	require.False(t, ok, "nothing after")
}

// TestClusterTargets judges (r) by the medians of the rounds' ratios, and
// the node restart by what was lost and the longest wait.
func TestClusterTargets(t *testing.T) {
	r := &report{}
	got := r.clusterTargets()
	require.Len(t, got, 3)
	for _, x := range got {
		require.Equal(t, "n/a", x.Status, x.Name)
		require.Equal(t, "(r) not run", x.Got)
	}

	const relay, loop = "relay, 2 replicas", "minimal loop"
	for k, v := range []struct{ vs, p99, loopP99 float64 }{{0.80, 30, 20}, {0.90, 12, 10}, {0.86, 14, 10}} {
		r.Results = append(r.Results,
			&result{Scenario: "r", Title: "cluster throughput", System: relay, Round: k + 1, VsLoop: v.vs},
			&result{Scenario: "r", Title: "cluster throughput", System: loop, Round: k + 1},
			&result{Scenario: "r", Title: "cluster latency", System: relay, Round: k + 1, P99ms: v.p99},
			&result{Scenario: "r", Title: "cluster latency", System: loop, Round: k + 1, P99ms: v.loopP99})
	}
	kill := &result{Scenario: "r", Title: "cluster node restart", System: relay, Duplicates: 40,
		Restart: &restartFigures{LongestMs: 21_500, LastCopySecs: 19.5}}
	r.Results = append(r.Results, kill, &result{Scenario: "r", Title: "cluster node restart", System: loop,
		Restart: &restartFigures{LongestMs: 36_000, LastCopySecs: 34}})
	got = r.clusterTargets()
	require.Equal(t, "PASS", got[0].Status)
	require.Equal(t, "median of 3 rounds 86% (80%, 90%, 86%)", got[0].Got)
	require.Equal(t, "PASS", got[1].Status, "ratios 1.5, 1.2, 1.4: median 1.4")
	require.Equal(t, "median of 3 rounds 1.40x (1.50x, 1.20x, 1.40x)", got[1].Got)
	require.Equal(t, "PASS", got[2].Status)
	require.Equal(t, "lost 0, 40 copies, the longest publish-to-2xx 21.5 s (the last copy 19.5s after the kill); the loop (AckWait 30 s): lost 0, the longest 36.0 s", got[2].Got)

	kill.Restart.LongestMs = 30_000
	require.Equal(t, "MISS", r.clusterTargets()[2].Status, "30 s is not under 30 s")
	kill.Restart.LongestMs, kill.Restart.Lost = 1000, 1
	require.Equal(t, "MISS", r.clusterTargets()[2].Status, "an event lost")
	r.Results[0].VsLoop, r.Results[4].VsLoop = 0.5, 0.6
	require.Equal(t, "MISS", r.clusterTargets()[0].Status, "median 60%")

	// At another rate than half the loop's, latency is information.
	r.Options.RRateShare = 0.35
	got = r.clusterTargets()
	require.Equal(t, "n/a", got[1].Status)
	require.Contains(t, got[1].Got, "at 35% of the loop's throughput, not the target's 50%")
}
