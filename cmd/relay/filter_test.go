package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
)

// A filter that does not compile, or is not boolean, is refused when it is
// saved (exit 2) with where it is wrong; an empty --filter on update removes
// it.
func TestDestFilterCompiledWhenSaved(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--filter", "data.amount >"},
			[]string{"--filter: filter does not compile: unexpected token EOF (1:13)", " | data.amount >\n | ............^"}},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--filter", "data.amount > 1 &&\n  regoin == \"eu\""},
			[]string{"unknown name regoin (2:3)"}},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--filter", "len(body)"},
			[]string{"expected bool, but got int"}},
	} {
		code, _, errs := b.cli(t, "", tc.args...)
		require.Equal(t, exitUsage, code, "%q: %s", tc.args, errs)
		for _, w := range tc.want {
			require.Contains(t, errs, w, "%q", tc.args)
		}
	}
	code, out, _ := b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code)
	require.Empty(t, out, "nothing was added")

	const filter = `data.amount > 100 && headers["X-Region"] == "eu"`
	code, _, errs := b.cli(t, "", "dest", "add", "d", "--url", "https://example.test", "--filter", filter)
	require.Equal(t, 0, code, errs)
	require.Equal(t, filter, listed(t, b).Filter)

	code, _, errs = b.cli(t, "", "dest", "update", "d", "--filter", "data.amount >> 1")
	require.Equal(t, exitUsage, code, errs)
	require.Contains(t, errs, "(1:14)")
	require.Equal(t, filter, listed(t, b).Filter, "a refused update changes nothing")

	code, _, errs = b.cli(t, "", "dest", "update", "d", "--timeout", "5s")
	require.Equal(t, 0, code, errs)
	require.Equal(t, filter, listed(t, b).Filter, "an update without --filter keeps it")

	code, _, errs = b.cli(t, "", "dest", "update", "d", "--filter", "")
	require.Equal(t, 0, code, errs)
	require.Empty(t, listed(t, b).Filter, "--filter '' removes the filter")
}

// listed is the one destination 'dest list --json' shows.
func listed(t *testing.T, b bundle) destination.Destination {
	t.Helper()
	code, out, errs := b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code, errs)
	var d destination.Destination
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &d), out)
	return d
}
