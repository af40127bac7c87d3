package main

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/dlq"
)

// dlq list --wait waits for a matching dead letter that is not there yet
// (the worked example lists one right after publishing); without one it
// ends after the wait with an empty list.
func TestDLQListWaitsForALetter(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	require.Empty(t, dlqtList(t, b, "--wait", "300ms"), "nothing dead-lettered: empty after the wait")

	// Written only once list has looked and found none.
	var once sync.Once
	wrote := make(chan error, 1)
	dlqListPolled = func() {
		once.Do(func() {
			go func() {
				_, err := dlq.Writer{JS: b.js}.Write(context.Background(), dlqtLetterFor("a", "late", "relay.in.a", 1))
				wrote <- err
			}()
		})
	}
	defer func() { dlqListPolled = func() {} }()
	require.Equal(t, []string{"late"}, dlqtList(t, b, "--dest", "a", "--wait", "1m"))
	require.NoError(t, <-wrote)

	code, _, errs := b.cli(t, "", "dlq", "list", "--wait", "-1s")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "--wait -1s: give 0 or more")
}
