package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLIDocsUpToDate fails when docs/cli.md is not what 'relay docs cli'
// prints for the CLI as it is defined now.
func TestCLIDocsUpToDate(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	var want bytes.Buffer
	require.NoError(t, writeCLIDocs(&want))

	// The hidden command prints the same.
	var out, errb bytes.Buffer
	code := Main([]string{"relay", "docs", "cli"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, exitOK, code, errb.String())
	require.Equal(t, want.String(), out.String())

	got, err := os.ReadFile("../../docs/cli.md")
	require.NoError(t, err)
	if !bytes.Equal(got, want.Bytes()) {
		line, old, now := firstDiff(string(got), want.String())
		t.Fatalf("docs/cli.md is stale: regenerate it with %s\nfirst difference, line %d:\n  docs/cli.md: %q\n  generated:   %q",
			regenerateCLIDocs, line, old, now)
	}
}

// firstDiff returns the number of the first line where a and b differ,
// and that line of each.
func firstDiff(a, b string) (int, string, string) {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; ; i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y || i >= len(la) || i >= len(lb) {
			return i + 1, x, y
		}
	}
}

func TestCLIDocsListEveryVisibleCommandOnce(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, writeCLIDocs(&buf))
	doc := buf.String()
	require.Contains(t, doc, "## relay dest add\n")
	require.Contains(t, doc, "## Exit codes\n")
	require.NotContains(t, doc, "## relay docs", "the docs command is hidden")
	// Global flags are listed once, in their own table, not per command.
	require.Equal(t, 1, strings.Count(doc, "`RELAY_NATS_URL`"))
	require.Equal(t, 1, strings.Count(doc, "| `--log-level` |"))
	// Commands that take only some global flags say so.
	require.Contains(t, doc, "## relay sink\n")
	sink := doc[strings.Index(doc, "## relay sink\n"):]
	require.Contains(t, sink, "Of the global flags, takes only `--log-level`, `--log-format`.")
}
