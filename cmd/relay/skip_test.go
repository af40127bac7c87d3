package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The --reason of skip and skip-head is checked as the API checks it
// (relay.SkipReason): one line of at most 200 characters, not bytes, and
// blank for the default; a bad one is a usage error that changes nothing.
func TestSkipReasonFlag(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	code, _, errs := b.cli(t, "", "dest", "add", "orders", "--url", "https://example.test/hook")
	require.Equal(t, 0, code, errs)
	code, _, errs = b.cli(t, "", "dest", "add", "keyed", "--url", "https://example.test/hook", "--ordered")
	require.Equal(t, 0, code, errs)
	for _, tc := range []struct {
		reason, want string
	}{
		{"two\nlines", "--reason: a skip reason is one line of text: character 4 is a control character (U+000A)"},
		{strings.Repeat("x", 201), "--reason: a skip reason of 201 characters: give at most 200"},
	} {
		code, _, errs := b.cli(t, "", "dest", "skip", "orders", "--event", "evt-1", "--reason", tc.reason)
		require.Equal(t, 2, code, errs)
		require.Contains(t, errs, tc.want)
		code, _, errs = b.cli(t, "", "dest", "skip-head", "keyed", "--seq", "1", "--reason", tc.reason)
		require.Equal(t, 2, code, errs)
		require.Contains(t, errs, tc.want)
	}
	// Accepted: what fails is the skip itself (nothing waits for a retry).
	for _, reason := range []string{"", "  ", strings.Repeat("é", 200)} {
		code, _, errs := b.cli(t, "", "dest", "skip", "orders", "--event", "evt-1", "--reason", reason)
		require.Equal(t, 1, code, "%q: %s", reason, errs)
		require.Contains(t, errs, "no failed attempt of it is on record")
		code, _, errs = b.cli(t, "", "dest", "skip-head", "keyed", "--seq", "1", "--reason", reason)
		require.Equal(t, 1, code, "%q: %s", reason, errs)
		require.Contains(t, errs, "not the head of a partition")
	}
}
