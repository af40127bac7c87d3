package integration

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
)

// Redis replication is asynchronous. Here the replica is killed, the
// primary is killed after it, and Sentinel promotes the replica when it
// comes back with what its append-only file had: no parked event is lost.
// relay acks an event it parked only once a replica confirmed it
// (--redis-replicas, 1 by default with sentinel); one that no replica
// confirmed waits in JetStream instead. With --redis-replicas 0 the events
// parked while the replica was down are lost here (only the primary had
// them).
func TestFaultRedisFailoverLosesNoParkedEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{ReplicaOf: primary, AppendOnly: true})
	replica.WaitReplicating(primary)
	sentinel := redistest.StartSentinel(t, primary, replica)

	s := newSink(t, failing(1)) // every event's first attempt fails
	// Waits of 20s: the parked events are due after the failover, however
	// slow the machine.
	e.addDest(destination.Destination{Name: "failover", URL: s.URL, BreakerThreshold: -1, Retry: destination.RetryPolicy{
		Base: destination.Duration(20 * time.Second), Max: destination.Duration(30 * time.Second), NoJitter: true, MaxAttempts: 5}})
	p := faultRun(t, e.url, "--redis-mode", "sentinel", "--redis-url", sentinel.URL(),
		"--park-threshold", "500ms", "--redis-replica-wait", "1s")
	require.True(t, p.logged("replicas_confirming=1"), p.output())

	onPrimary := schedule.NewStore(primary.Client())
	parked := func() int64 {
		ps, err := onPrimary.Stats(context.Background(), "failover")
		if err != nil {
			return -1
		}
		return ps.Parked
	}
	const n = 20
	published := map[string]string{}
	for range n {
		res := e.publish("failover", "", `{"batch":"confirmed"}`)
		published[res.ID] = `{"batch":"confirmed"}`
	}
	eventually(t, 15*time.Second, func() bool { return parked() == n }, "the first %d parked", n)

	// No replica confirms now: what fails cannot be parked safely.
	replica.Kill()
	for range n {
		res := e.publish("failover", "", `{"batch":"unconfirmed"}`)
		published[res.ID] = `{"batch":"unconfirmed"}`
	}
	eventually(t, 15*time.Second, func() bool {
		return metricValue(t, p, `relay_park_failures_total{dest="failover"}`) == n
	}, "the next %d stay in JetStream", n)
	// The metric is read over HTTP, the log through a pipe: the warning may
	// come a moment after the count.
	eventually(t, 5*time.Second, func() bool { return p.logged("cannot park the event in Redis") }, "the warning")
	require.Equal(t, 1, strings.Count(p.output(), "cannot park the event in Redis"), "one warning for them all:\n%s", p.output())
	require.Equal(t, int64(n), parked(), "none of them left parked on the primary")
	require.Len(t, s.all(), 2*n, "one attempt each so far")

	primary.Kill()
	replica.Restart()
	sentinel.WaitPrimary(replica.Addr, 45*time.Second)

	eventually(t, 60*time.Second, func() bool {
		d := s.delivered()
		for id := range published {
			if d[id] == 0 {
				return false
			}
		}
		return e.settled("failover")
	}, "all %d delivered after the failover", 2*n)
	faultLedger(t, e, s, "failover", published, 1)
	ps, err := schedule.NewStore(replica.Client()).Stats(context.Background(), "failover")
	require.NoError(t, err)
	require.Zero(t, ps.Parked, "nothing left parked on the new primary")
}

// relay run --redis-mode cluster parks long waits in a Redis Cluster, with
// the shard's replica confirming each, and promotes them when due.
func TestRedisClusterParksAndPromotes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	primary, replica := redistest.StartCluster(t)
	s := newSink(t, failing(1))
	e.addDest(destination.Destination{Name: "rc", URL: s.URL, Retry: destination.RetryPolicy{
		Base: destination.Duration(time.Second), Max: destination.Duration(10 * time.Second), NoJitter: true, MaxAttempts: 5}})
	p := faultRun(t, e.url, "--redis-mode", "cluster", "--redis-url", redistest.ClusterURL(primary, replica), "--park-threshold", "500ms")
	require.True(t, p.logged("replicas_confirming=1"), p.output())
	const n = 10
	published := map[string]string{}
	for range n {
		res := e.publish("rc", "", `{}`)
		published[res.ID] = `{}`
	}
	eventually(t, 20*time.Second, func() bool {
		return len(s.delivered()) == n && e.settled("rc")
	}, "all %d delivered on their second attempt", n)
	require.Equal(t, n, strings.Count(p.output(), "parked=true"), "each parked once:\n%s", p.output())
	faultLedger(t, e, s, "rc", published, 1)
	ps, err := schedule.NewStore(primary.Client()).Stats(context.Background(), "rc")
	require.NoError(t, err)
	require.Zero(t, ps.Parked)
}

// metricValue reads one series (name and labels as /metrics prints them)
// from relay process p's /metrics; -1 when it is not there.
func metricValue(t *testing.T, p *proc, series string) int {
	t.Helper()
	resp, err := opsGet(t, p, "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return int(f)
		}
	}
	return -1
}
