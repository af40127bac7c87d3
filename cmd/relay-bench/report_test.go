package main

import (
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

// TestThroughputTargetUsesTheMedianRound: with rounds of (a), the 80%
// target is judged on the median of the per-round ratios, and the Redis
// comparison on the median relay rate, so one disturbed round does not
// decide either.
func TestThroughputTargetUsesTheMedianRound(t *testing.T) {
	r := &report{Machine: machine{CPUs: 2}}
	round := func(k int, relay, loop float64) {
		r.Results = append(r.Results,
			&result{Scenario: "a", System: "relay", Round: k, PerSecond: relay, VsLoop: relay / loop, Seconds: 1},
			&result{Scenario: "a", System: "minimal loop", Round: k, PerSecond: loop, Seconds: 1})
	}
	round(1, 17000, 20000) // 85%
	round(2, 9000, 20000)  // 45%: a disturbed round
	round(3, 16400, 20000) // 82%
	r.Results = append(r.Results, &result{Scenario: "f", System: "redis list sequential", PerSecond: 1640, Seconds: 1})
	r.evaluate()

	require.Len(t, r.Targets, 10)
	tp := r.Targets[0]
	require.Equal(t, "PASS", tp.Status, tp.Got)
	require.True(t, strings.HasPrefix(tp.Got, "median of 3 rounds 82% (85%, 45%, 82%)"), tp.Got)
	f := r.Targets[3]
	require.Equal(t, "PASS", f.Status, f.Got)
	require.Contains(t, f.Got, "16400/s (median of (a)) vs 1640/s = 10.0x")

	// The same rounds with the disturbed one the median: a miss.
	r = &report{Machine: machine{CPUs: 2}}
	round(1, 17000, 20000)
	round(2, 9000, 20000)
	round(3, 15000, 20000) // 75%
	r.evaluate()
	require.Equal(t, "MISS", r.Targets[0].Status, r.Targets[0].Got)
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
