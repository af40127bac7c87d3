package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	require.Equal(t, 0.0, median(nil))
	require.Equal(t, 5.0, median([]float64{5}))
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.0, median([]float64{4, 1, 3, 2}), "an even count takes the lower middle")
	v := []float64{3, 1, 2}
	median(v)
	require.Equal(t, []float64{3, 1, 2}, v, "the input is left as it was")
}

// TestThroughputTargetUsesTheMedianRound: with rounds of (a), the 95%
// target and the CPU target are judged on the medians of the per-round
// ratios, so one disturbed round does not decide either.
func TestThroughputTargetUsesTheMedianRound(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}}
	round := func(k int, relay, loop, relayCPU, loopCPU float64) {
		r.Results = append(r.Results,
			&result{Scenario: "a", System: "relay", Round: k, PerSecond: relay, VsLoop: relay / loop, ProcCPUPer1: relayCPU, Seconds: 1},
			&result{Scenario: "a", System: "minimal loop", Round: k, PerSecond: loop, ProcCPUPer1: loopCPU, Seconds: 1})
	}
	round(1, 19800, 20000, 0.100, 0.100) // 99%, 1.00x
	round(2, 9000, 20000, 0.200, 0.100)  // 45%, 2.00x: a disturbed round
	round(3, 19400, 20000, 0.104, 0.100) // 97%, 1.04x
	r.evaluate()

	tp := targetNamed(r, "throughput")
	require.Equal(t, "PASS", tp.Status, tp.Got)
	require.True(t, strings.HasPrefix(tp.Got, "median of 3 rounds 97% (99%, 45%, 97%)"), tp.Got)
	cpu := targetNamed(r, "CPU per delivery")
	require.Equal(t, "PASS", cpu.Status, cpu.Got)
	require.True(t, strings.HasPrefix(cpu.Got, "median of 3 rounds 1.04x (1.00x, 2.00x, 1.04x)"), cpu.Got)

	// The same rounds with the disturbed one the median: misses.
	r = &report{Machine: machine{CPUs: 2}}
	round(1, 19800, 20000, 0.100, 0.100)
	round(2, 9000, 20000, 0.200, 0.100)
	round(3, 18000, 20000, 0.110, 0.100) // 90%, 1.10x
	r.evaluate()
	require.Equal(t, "MISS", targetNamed(r, "throughput").Status)
	require.Equal(t, "MISS", targetNamed(r, "CPU per delivery").Status)
}

// TestDeploymentAndManyDestinationTargets: (i) is judged on the median of
// its rounds' ratios to its own loop, (e) against relay's rate with one
// destination in the runs around it (not against (a), minutes before).
func TestDeploymentAndManyDestinationTargets(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}}
	for k, ratio := range []float64{0.95, 0.80, 0.91} {
		r.Results = append(r.Results,
			&result{Scenario: "a", System: "relay", Round: k + 1, PerSecond: 10000, VsLoop: 1, Seconds: 1},
			&result{Scenario: "i", System: "relay", Round: k + 1, VsLoop: ratio, ProcRSSMB: 80, Seconds: 1})
	}
	r.Results = append(r.Results,
		&result{Scenario: "e", Title: refTitle, System: "relay", Round: 1, PerSecond: 9000, Seconds: 1},
		&result{Scenario: "e", Title: "100 destinations, shared", System: "relay", PerSecond: 8900, RefRate: 9000, Seconds: 1},
		&result{Scenario: "e", Title: "100 destinations, a consumer each", System: "relay", PerSecond: 7000, RefRate: 9000, Seconds: 1})
	r.evaluate()
	dep := targetNamed(r, "default deployment")
	require.Equal(t, "PASS", dep.Status, dep.Got)
	require.Contains(t, dep.Got, "median of 3 rounds 91% (95%, 80%, 91%)")
	e := targetNamed(r, "100 destinations, shared")
	require.Equal(t, "PASS", e.Status, e.Got)
	require.Contains(t, e.Got, "8900/s vs 9000/s (one destination, the runs before and after) = 99%")
	require.Contains(t, e.Got, "89% of (a)'s median")
	e = targetNamed(r, "100 destinations, a consumer each")
	require.Equal(t, "MISS", e.Status, e.Got)
	for _, x := range r.Targets {
		require.NotContains(t, x.Want, refTitle, "the reference runs are no target")
	}
}

// TestLatencyTargetsPairEachRateWithTheLoop: each rate of (b) compares
// relay's p99 with the loop's at that rate.
func TestLatencyTargetsPairEachRateWithTheLoop(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}}
	r.Results = []*result{
		{Scenario: "b", Title: "latency at 5,000/s", System: "minimal loop", Rate: 5000, P99ms: 10, Seconds: 1},
		{Scenario: "b", Title: "latency at 5,000/s", System: "relay", Rate: 5000, P99ms: 10.9, Seconds: 1},
		{Scenario: "b", Title: "latency at 50% of the loop's max", System: "minimal loop", Rate: 10000, P99ms: 20, Seconds: 1},
		{Scenario: "b", Title: "latency at 50% of the loop's max", System: "relay", Rate: 10000, P99ms: 22.5, Seconds: 1},
	}
	r.evaluate()
	at5k := targetNamed(r, "latency at 5,000/s")
	require.Equal(t, "PASS", at5k.Status, at5k.Got)
	require.Contains(t, at5k.Got, "1.09x")
	half := targetNamed(r, "latency at 50% of the loop's max")
	require.Equal(t, "MISS", half.Status, half.Got)
	require.Contains(t, half.Want, "10000/s")
}

func TestOrderKeysTarget(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}, Options: optsJSON{KeysN: 1_000_000}}
	r.Results = []*result{
		{Scenario: "k", System: "relay, one key", NATSBaseMB: 20, NATSRSSMB: 150, ProcRSSMB: 60, Seconds: 1},
		{Scenario: "k", System: "relay, a key per event", NATSBaseMB: 22, NATSRSSMB: 200, ProcRSSMB: 70, Seconds: 1},
	}
	r.evaluate()
	k := targetNamed(r, "order keys")
	require.Equal(t, "order keys", k.Name)
	require.Equal(t, "PASS", k.Status, k.Got)
	require.True(t, strings.HasPrefix(k.Got, "+58 MB (NATS server +48 MB"), k.Got)

	r.Results[1].NATSRSSMB = 300 // +148 MB
	r.Targets = nil
	r.evaluate()
	require.Equal(t, "MISS", targetNamed(r, "order keys").Status)
}

// TestReportSaysNATSMessagesPerEvent: the CPU table says how many messages
// went into and out of the NATS server per event delivered, and a dash where
// none were counted (the Redis sender).
func TestReportSaysNATSMessagesPerEvent(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}}
	r.Results = append(r.Results,
		&result{Scenario: "b", System: "relay", Rate: 1000, Seconds: 1, Delivered: 200, NATSMsgs: 810},
		&result{Scenario: "f", System: "redis list sequential", Seconds: 1, Delivered: 100})
	r.evaluate()
	var b strings.Builder
	r.text(&b)
	var rows []string
	for l := range strings.Lines(b.String()) {
		if strings.HasPrefix(l, "(b) latency @ 1000/s: relay") || strings.HasPrefix(l, "(f)") {
			rows = append(rows, strings.Join(strings.Fields(l), " "))
		}
	}
	require.Len(t, rows, 4, b.String()) // the results table and the CPU table
	// The CPU table: the label, then relay/baseline, sink, bench+NATS,
	// redis, other, machine busy %, NATS msgs/event, ...
	require.Equal(t, "4.05", strings.Fields(rows[2])[5+6], "810 messages for 200 events: %s", rows[2])
	require.Equal(t, "-", strings.Fields(rows[3])[4+6], "none counted for the Redis sender: %s", rows[3])
}

// TestFanOutTargetComparesDeliveriesWithRelayA: (g)'s target takes the run
// with 10 subscribers and compares its deliveries/s with (a)'s median relay
// rate; without (a) it is not judged.
func TestFanOutTargetComparesDeliveriesWithRelayA(t *testing.T) {
	for _, tc := range []struct {
		g10    float64
		status string
	}{{16_000, "PASS"}, {15_900, "MISS"}} {
		r := &report{Machine: machine{CPUs: 2}}
		for k, rate := range []float64{19_000, 20_000, 30_000} {
			r.Results = append(r.Results, &result{Scenario: "a", System: "relay", Round: k + 1, PerSecond: rate, VsLoop: 1, Seconds: 1})
		}
		r.Results = append(r.Results,
			&result{Scenario: "g", System: "relay", Subscribers: 1, Events: 50_000, PerSecond: 1_000, Seconds: 1},
			&result{Scenario: "g", System: "relay", Subscribers: 10, Events: 5_000, PerSecond: tc.g10, Seconds: 1},
			&result{Scenario: "g", System: "relay", Subscribers: 100, Events: 500, PerSecond: 1_000, Seconds: 1})
		r.evaluate()
		g := targetNamed(r, "fan-out")
		require.Equal(t, "fan-out", g.Name)
		require.Equal(t, tc.status, g.Status, g.Got)
		require.Contains(t, g.Got, "(5000 events x 10) vs 20000/s (median of (a))")
	}

	r := &report{Machine: machine{CPUs: 2}}
	r.Results = append(r.Results, &result{Scenario: "g", System: "relay", Subscribers: 10, PerSecond: 16_000, Seconds: 1})
	r.evaluate()
	require.Equal(t, "n/a", targetNamed(r, "fan-out").Status, "no (a) to compare with")
}

func TestDeliveryLogTargets(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}}
	r.Results = []*result{
		{Scenario: "l", System: "relay, log off", Round: 1, PerSecond: 10000, Seconds: 1},
		{Scenario: "l", System: "relay, log on", Round: 1, PerSecond: 9200, ProcRSSMB: 60, Seconds: 1},
		{Scenario: "l", System: "relay, log off", Round: 2, PerSecond: 10000, Seconds: 1},
		{Scenario: "l", System: "relay, log on", Round: 2, PerSecond: 8000, ProcRSSMB: 62, Seconds: 1},
		{Scenario: "l", System: "relay, log on", Round: 3, PerSecond: 9100, ProcRSSMB: 58, Seconds: 1},
		{Scenario: "l", System: "relay, log off", Round: 3, PerSecond: 10000, Seconds: 1},
		{Scenario: "l", System: "relay, log on, 4x backlog", Events: 200000, PerSecond: 9000, ProcRSSMB: 70, Seconds: 1},
	}
	lt := r.logTargets()
	require.Equal(t, "PASS", lt[0].Status, lt[0].Got)
	require.Contains(t, lt[0].Got, "9100/s on vs 10000/s off = 91%")
	require.Equal(t, "MISS", lt[1].Status, "70 MB is more than 1.1 x 62 MB: %s", lt[1].Got)
}

// targetNamed is r's target called name.
func targetNamed(r *report, name string) target {
	for _, t := range r.Targets {
		if t.Name == name {
			return t
		}
	}
	return target{}
}

func TestInTurnAlternatesTheOrder(t *testing.T) {
	var got []string
	step := func(s string) func() error { return func() error { got = append(got, s); return nil } }
	for k := 1; k <= 3; k++ {
		require.NoError(t, inTurn(k, step("relay"), step("loop")))
	}
	require.Equal(t, []string{"relay", "loop", "loop", "relay", "relay", "loop"}, got)
	boom := errors.New("boom")
	got = nil
	require.ErrorIs(t, inTurn(1, func() error { return boom }, step("loop")), boom)
	require.Empty(t, got, "stops at the first error")
}

// TestAAReportSaysItsRelayRowsAreTheLoop: an -aa report says at its top
// that its relay rows of (a) and (b) are the minimal loop, and a report
// of relay does not.
func TestAAReportSaysItsRelayRowsAreTheLoop(t *testing.T) {
	var b strings.Builder
	r := &report{Machine: machine{CPUs: 2}, Options: optsJSON{AA: true}}
	r.text(&b)
	require.Contains(t, b.String(), "A/A CHECK (-aa)")

	b.Reset()
	r = &report{Machine: machine{CPUs: 2}}
	r.text(&b)
	require.NotContains(t, b.String(), "A/A")
}
