package relay

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
)

// destLabels are the dest labels of the series reg gathers.
func destLabels(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "dest" && !slices.Contains(out, l.GetValue()) {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// The series of the tenants' destinations do not grow with tenants: by
// default all of theirs are one label value; asked, each has its own.
func TestMetricsOfTenantsDestinationsAreBounded(t *testing.T) {
	t.Parallel()
	for _, perTenant := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		m.PerTenantDestination = perTenant
		now := time.Now()
		dests := []string{"orders"}
		for i := range 500 {
			dests = append(dests, "t"+string(rune('a'+i%26))+string(rune('a'+i/26))+"=hooks")
		}
		for _, d := range dests {
			m.attemptStarted(d).done()
			m.observe(Outcome{Dest: d, Attempt: 1, Result: Result{Status: 200, Duration: time.Millisecond}, Decision: Decision{Action: Ack}}, false, false, now, now)
			m.paused(d, destination.PauseOperator)
		}
		got := destLabels(t, reg)
		if perTenant {
			require.Len(t, got, len(dests))
		} else {
			require.Equal(t, []string{TenantsLabel, "orders"}, got)
		}
	}
	sum := sumTenants([]DestStats{
		{Dest: "orders", Backlog: 1, Parked: -1},
		{Dest: "a=x", Tenant: "a", Backlog: 2, InFlight: 1, DeadLetters: 3, Parked: -1, State: destination.PauseOperator},
		{Dest: "b=x", Tenant: "b", Backlog: 5, InFlight: 2, DeadLetters: 1, Parked: 4, State: destination.StateActive, OldestUndelivered: time.Unix(100, 0)},
	})
	require.Len(t, sum, 2)
	require.Equal(t, "orders", sum[0].Dest)
	require.Equal(t, DestStats{Dest: TenantsLabel, State: destination.StateActive, Backlog: 7, InFlight: 3, DeadLetters: 4, Parked: 4, OldestUndelivered: time.Unix(100, 0), paused: 1}, sum[1])
}
