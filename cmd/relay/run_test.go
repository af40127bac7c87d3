package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRedisReplicasFlags(t *testing.T) {
	for _, tc := range []struct {
		n    int
		mode string
		want int
	}{
		{-1, "single", 0}, {-1, "sentinel", 1}, {-1, "cluster", 1},
		{0, "sentinel", 0}, {2, "single", 2}, {2, "cluster", 2},
	} {
		got, wait, err := redisReplicas(tc.n, tc.mode, 500*time.Millisecond)
		if err != nil || got != tc.want || wait != 500*time.Millisecond {
			t.Errorf("--redis-replicas %d with %s: %d, %s, %v; want %d", tc.n, tc.mode, got, wait, err, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int
		wait time.Duration
		msg  string
	}{
		{-2, time.Second, "--redis-replicas -2: give 0 or more"},
		{1, 0, "--redis-replica-wait 0s: give 1ms to 1s"},
		{1, 2 * time.Second, "--redis-replica-wait 2s: give 1ms to 1s"},
	} {
		_, _, err := redisReplicas(tc.n, "single", tc.wait)
		var u usageError
		if !errors.As(err, &u) || !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("--redis-replicas %d --redis-replica-wait %s: err = %v, want a usage error starting %q", tc.n, tc.wait, err, tc.msg)
		}
	}
	if _, _, err := redisReplicas(0, "single", 0); err != nil {
		t.Errorf("no replicas: the wait does not matter, got %v", err)
	}
}

// go-redis's own messages go through relay's log: with --log-format json
// every line relay writes is JSON, go-redis's dial errors included, and
// a Redis that cannot be reached stops relay with an error naming it
// (password hidden).
func TestRedisMessagesGoThroughRelaysLog(t *testing.T) {
	b := setup(t)
	code, _, errs := b.cli(t, "", "--log-format", "json", "--log-level", "debug", "run", "--metrics-addr", "",
		"--redis-url", "redis://:s3cret@127.0.0.1:1/0")
	require.Equal(t, 1, code, errs)
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	require.Contains(t, lines[len(lines)-1], "redis at redis://:xxxxx@127.0.0.1:1/0: ")
	require.NotContains(t, errs, "s3cret")
	sawRedis := false
	for _, l := range lines[:len(lines)-1] {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "not a JSON log line: %q", l)
		if rec["msg"] == "redis client" {
			sawRedis = true
		}
	}
	require.True(t, sawRedis, "go-redis's messages are in the log at debug level:\n%s", errs)
}
