package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
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

func TestRunRefusesABadMaxConsumers(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	var out, errb bytes.Buffer
	code := Main([]string{"relay", "run", "--max-consumers", "16", "--data-dir", t.TempDir()}, strings.NewReader(""), &out, &errb)
	require.Equal(t, 2, code, errb.String())
	require.Contains(t, errb.String(), "--max-consumers 16: give 17 to 1000000")
}

func TestRunRefusesRoutesWithoutAClusterName(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	var out, errb bytes.Buffer
	code := Main([]string{"relay", "run", "--routes", "nats://127.0.0.1:6222", "--data-dir", t.TempDir()}, strings.NewReader(""), &out, &errb)
	require.Equal(t, 2, code, errb.String())
	require.Contains(t, errb.String(), "--routes needs --cluster-name")
}

// 'relay dest add' refuses, with exit 2, a destination whose consumers do
// not fit under the events stream's limit, and stores nothing.
func TestDestAddRefusesWithoutConsumerRoom(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, stream.Ensure(ctx, b.js, stream.Config{MaxConsumers: stream.ReservedConsumers + 2}))
	code, _, errs := b.cli(t, "", "dest", "add", "one", "--url", "https://example.test/one")
	require.Equal(t, 0, code, errs)
	code, _, errs = b.cli(t, "", "dest", "add", "two", "--url", "https://example.test/two", "--ordered", "--partitions", "4")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "two needs 5 consumers (1 + 4 partitions), and 1 are free")
	require.Contains(t, errs, "--max-consumers")
	code, out, _ := b.cli(t, "", "dest", "list")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "two")

	// Other consumers took the room 'one' counted on: stats says so.
	code, out, _ = b.cli(t, "", "stats")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "not consumed", "no relay has run yet: nothing is wrong")
	for i := range stream.ReservedConsumers + 2 {
		_, err := b.js.CreateConsumer(ctx, stream.EventsStream, jetstream.ConsumerConfig{Durable: fmt.Sprintf("other%d", i), FilterSubject: stream.InSubject(fmt.Sprintf("other%d", i), "")})
		require.NoError(t, err)
	}
	code, out, errs = b.cli(t, "", "stats")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "one: not consumed, its events wait in the log: consumer relay_one is missing and the events stream holds 18 consumers, its limit")
	code, out, _ = b.cli(t, "", "stats", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"unconsumed":"consumer relay_one is missing`)
}
