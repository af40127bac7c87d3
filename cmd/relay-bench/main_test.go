package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTickFlag(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)

	o, err := parseFlags([]string{"-relay", exe})
	require.NoError(t, err)
	require.Equal(t, 10*time.Millisecond, o.tick, "default tick")

	o, err = parseFlags([]string{"-relay", exe, "-tick", "1ms"})
	require.NoError(t, err)
	require.Equal(t, time.Millisecond, o.tick)

	for _, bad := range []string{"50us", "2s"} {
		d, _ := time.ParseDuration(bad)
		_, err := parseFlags([]string{"-relay", exe, "-tick", bad})
		require.ErrorContains(t, err, "-tick "+d.String(), "a tick of %s", bad)
	}
}

func TestLoopRunsAsLongAsRelayInScenarioB(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 10 * time.Second},
		{[]string{"-duration", "7s"}, 7 * time.Second},
		{[]string{"-duration", "7s", "-loop-duration", "3s"}, 3 * time.Second},
		{[]string{"-loop-duration", "0"}, 0},
	} {
		o, err := parseFlags(append([]string{"-relay", exe}, tc.args...))
		require.NoError(t, err)
		require.Equal(t, tc.want, o.loopDuration, "%q", tc.args)
	}
}

func TestFanOutFlags(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)

	o, err := parseFlags([]string{"-relay", exe})
	require.NoError(t, err)
	require.Equal(t, []int{10}, o.gSubscribers, "the count with a target; 1 and 100 on request")
	require.Equal(t, 50_000, o.gDeliveries, "as many deliveries as (a)'s events")
	require.Contains(t, o.scenarios, "g")

	o, err = parseFlags([]string{"-relay", exe, "-n", "2000", "-g-subscribers", "10, 3,10"})
	require.NoError(t, err)
	require.Equal(t, []int{10, 3}, o.gSubscribers)
	require.Equal(t, 2000, o.gDeliveries)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-g-subscribers", "0"}, `-g-subscribers: "0" is not a subscriber count`},
		{[]string{"-g-subscribers", "ten"}, `-g-subscribers: "ten"`},
		{[]string{"-g-subscribers", ","}, "-g-subscribers: none given"},
		{[]string{"-g-deliveries", "50", "-g-subscribers", "1,100"}, "-g-deliveries 50 is fewer than 100 subscribers"},
	} {
		_, err := parseFlags(append([]string{"-relay", exe}, tc.args...))
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
}

func TestPublishFlags(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)

	o, err := parseFlags([]string{"-relay", exe, "-n", "3000"})
	require.NoError(t, err)
	require.Contains(t, o.scenarios, "p")
	require.Equal(t, []int{3000, 64, 100, 8}, []int{o.pN, o.pClients, o.pBatch, o.pBClients}, "-p-n defaults to -n")

	o, err = parseFlags([]string{"-relay", exe})
	require.NoError(t, err)
	require.Equal(t, 30_000, o.pN, "at most 30,000 by default")

	o, err = parseFlags([]string{"-relay", exe, "-p-n", "10", "-p-batch", "1000"})
	require.NoError(t, err)
	require.Equal(t, []int{10, 1000}, []int{o.pN, o.pBatch})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-p-batch", "1001"}, "-p-batch 1001: give 1 to 1000"},
		{[]string{"-p-batch", "0"}, "-p-batch 0: give 1 to 1000"},
		{[]string{"-p-clients", "0"}, "-p-clients 0"},
		{[]string{"-p-batch-clients", "2000"}, "-p-batch-clients 2000"},
		{[]string{"-p-n", "-1"}, "-p-n -1"},
	} {
		_, err := parseFlags(append([]string{"-relay", exe}, tc.args...))
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
}
