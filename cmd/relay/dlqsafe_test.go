package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/stream"
)

// A message on relay.dlq.> without headers is listed as malformed, and
// 'dlq replay --all' skips it and replays the others.
func TestDLQMalformedLetterIsListedAndSkipped(t *testing.T) {
	b := setup(t)
	dlqtWrite(t, b, dlqtLetterFor("a", "a1", "relay.in.a", 1))
	_, err := b.js.Publish(context.Background(), stream.DLQSubject("a"), []byte("not a dead letter"))
	require.NoError(t, err)
	dlqtWrite(t, b, dlqtLetterFor("a", "a2", "relay.in.a", 3))

	code, out, errs := b.cli(t, "", "dlq", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "malformed: dead letter 2 has no headers")
	require.Contains(t, out, "a1")
	require.Contains(t, out, "a2")

	code, out, errs = b.cli(t, "", "dlq", "list", "--json")
	require.Equal(t, 0, code, errs)
	ls := dlqtLetters(t, out)
	require.Len(t, ls, 3)
	require.Equal(t, "dead letter 2 has no headers", ls[1].Malformed)
	require.Equal(t, "a", ls[1].Dest)

	code, out, errs = b.cli(t, "", "dlq", "replay", "--all", "--dry-run")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "would skip dead letter 2: malformed")
	require.Contains(t, out, "dry run: 2 dead letters would be replayed")

	code, out, errs = b.cli(t, "", "dlq", "replay", "--all")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 2 dead letters")
	require.Contains(t, out, "skipped 1 that cannot be replayed")
	require.Equal(t, []string{""}, dlqtList(t, b), "only the malformed one is left")

	code, out, errs = b.cli(t, "", "dlq", "show", "2")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "malformed:     dead letter 2 ")
	require.Contains(t, out, "not a dead letter")
}

// 'dlq show' escapes what a terminal would act on (escape sequences in the
// body, a header, the event id, the failure text); --json is exact.
func TestDLQShowEscapesControlCharacters(t *testing.T) {
	b := setup(t)
	evil := "\033]0;PWNED\a\033[2J"
	l := dlqtLetterFor("a", "id\033[31m", "relay.in.a", 1)
	l.Body = []byte("before " + evil + " after\nline two")
	l.Headers.Set("X-Evil", evil)
	l.LastError = "status " + evil
	l.History[0].Error = "\u009b2J"
	seq := dlqtWrite(t, b, l)

	code, out, errs := b.cli(t, "", "dlq", "show", dlqtU(seq))
	require.Equal(t, 0, code, errs)
	require.NotContains(t, out, "\033")
	require.NotContains(t, out, "\a")
	require.NotContains(t, out, "\u009b")
	require.Contains(t, out, `before \x1b]0;PWNED\x07\x1b[2J after`+"\n"+`line two`)
	require.Contains(t, out, `X-Evil: \x1b]0;PWNED\x07\x1b[2J`)
	require.Contains(t, out, `event id:      id\x1b[31m`)
	require.Contains(t, out, `\u009b2J`)

	code, out, errs = b.cli(t, "", "dlq", "list")
	require.Equal(t, 0, code, errs)
	require.NotContains(t, out, "\033")

	code, out, errs = b.cli(t, "", "dlq", "show", dlqtU(seq), "--json")
	require.Equal(t, 0, code, errs)
	var got struct {
		dlq.Letter
		BodyBase64 string `json:"body_base64"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	body, err := base64.StdEncoding.DecodeString(got.BodyBase64)
	require.NoError(t, err)
	require.Equal(t, l.Body, body, "--json keeps the body exact")
	require.Equal(t, evil, got.Headers.Get("X-Evil"))
	require.Equal(t, "id\033[31m", got.EventID)
	require.True(t, strings.HasPrefix(got.LastError, "status "))
}
