package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
)

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

func TestRunRefusesBadAPILimits(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--api-max-conns", "0"}, "--api-max-conns 0: give 1 to 1000000"},
		{[]string{"--api-idle-timeout", "0s"}, "--api-idle-timeout 0s: give 1s to 1h"},
		{[]string{"--api-body-timeout", "2h"}, "--api-body-timeout 2h0m0s: give 1s to 1h"},
	} {
		var out, errb bytes.Buffer
		code := Main(append([]string{"relay", "run", "--api-addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...), strings.NewReader(""), &out, &errb)
		require.Equal(t, 2, code, errb.String())
		require.Contains(t, errb.String(), tc.want)
	}
}

// A cluster secret needs a cluster, and must be long enough.
func TestRunChecksTheClusterSecret(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-secret", "0123456789abcdef"}, "--cluster-secret needs --cluster-name"},
		{[]string{"--cluster-name", "c", "--cluster-secret", "short"}, "the cluster secret is 5 bytes"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--cluster-secret", "0123456789abcdef"}, "--cluster-secret configure the embedded NATS server"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"relay", "run", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--metrics-addr", ""}, c.args...)
		code := Main(args, strings.NewReader(""), &out, &errb)
		require.Equal(t, 2, code, "%v: %s", c.args, errb.String())
		require.Contains(t, errb.String(), c.want, c.args)
		require.NotContains(t, errb.String(), "0123456789abcdef", "the secret is not printed")
	}
}
