package main

import (
	"errors"
	"strings"
	"testing"
	"time"
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
