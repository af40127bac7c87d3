package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/stream"
)

// The tests in this file are not parallel: urfave/cli v2 mutates package-level
// help flags on each run (see app_test.go).

func TestFilterMatchTable(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	la := dlq.Letter{Dest: "a", Reason: "max_attempts", LastStatus: 500, DeadAt: t0}
	lb := dlq.Letter{Dest: "b", Reason: "permanent_status", LastStatus: 404, DeadAt: t0.Add(time.Hour)}
	lc := dlq.Letter{Dest: "a", Reason: "unknown_destination", LastStatus: 0, LastError: "dial tcp: refused", DeadAt: t0.Add(-time.Hour)}
	letters := map[string]dlq.Letter{"la": la, "lb": lb, "lc": lc}

	for _, tc := range []struct {
		name string
		f    dlq.Filter
		want []string
	}{
		{"zero filter matches all", dlq.Filter{}, []string{"la", "lb", "lc"}},
		{"seqs are ignored by Match", dlq.Filter{Seqs: []uint64{99}}, []string{"la", "lb", "lc"}},
		{"dest a", dlq.Filter{Dest: "a"}, []string{"la", "lc"}},
		{"dest b", dlq.Filter{Dest: "b"}, []string{"lb"}},
		{"dest unknown", dlq.Filter{Dest: "zzz"}, nil},
		{"reason max_attempts", dlq.Filter{Reason: "max_attempts"}, []string{"la"}},
		{"reason unknown_destination", dlq.Filter{Reason: "unknown_destination"}, []string{"lc"}},
		{"reason is exact", dlq.Filter{Reason: "max"}, nil},
		{"status 404", dlq.Filter{Status: 404}, []string{"lb"}},
		{"status 500", dlq.Filter{Status: 500}, []string{"la"}},
		{"status 503 matches none", dlq.Filter{Status: 503}, nil},
		{"status -1 is no response", dlq.Filter{Status: -1}, []string{"lc"}},
		{"since is inclusive", dlq.Filter{Since: t0}, []string{"la", "lb"}},
		{"since a nanosecond later excludes", dlq.Filter{Since: t0.Add(time.Nanosecond)}, []string{"lb"}},
		{"since in another zone is the same instant", dlq.Filter{Since: t0.In(time.FixedZone("X", 3600))}, []string{"la", "lb"}},
		{"until is exclusive", dlq.Filter{Until: t0}, []string{"lc"}},
		{"until a nanosecond later includes", dlq.Filter{Until: t0.Add(time.Nanosecond)}, []string{"la", "lc"}},
		{"since and until", dlq.Filter{Since: t0, Until: t0.Add(time.Hour)}, []string{"la"}},
		{"wide window", dlq.Filter{Since: t0.Add(-time.Hour), Until: t0.Add(time.Hour + time.Nanosecond)}, []string{"la", "lb", "lc"}},
		{"dest and no response", dlq.Filter{Dest: "a", Status: -1}, []string{"lc"}},
		{"dest and status", dlq.Filter{Dest: "a", Status: 404}, nil},
		{"dest and reason disagree", dlq.Filter{Dest: "b", Reason: "max_attempts"}, nil},
		{"dest reason status since", dlq.Filter{Dest: "a", Reason: "max_attempts", Status: 500, Since: t0}, []string{"la"}},
		{"all but time", dlq.Filter{Dest: "a", Reason: "max_attempts", Status: 500, Until: t0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, name := range []string{"la", "lb", "lc"} {
				if tc.f.Match(letters[name]) {
					got = append(got, name)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// dlqtLetters decodes the output of 'dlq list --json'.
func dlqtLetters(t *testing.T, out string) []dlq.Letter {
	t.Helper()
	var ls []dlq.Letter
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l dlq.Letter
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "line %q", sc.Text())
		ls = append(ls, l)
	}
	require.NoError(t, sc.Err())
	return ls
}

// dlqtList runs 'dlq list --json' with args and returns the event ids, in order.
func dlqtList(t *testing.T, b bundle, args ...string) []string {
	t.Helper()
	code, out, errs := b.cli(t, "", append([]string{"dlq", "list", "--json"}, args...)...)
	require.Equal(t, 0, code, "%v: %s", args, errs)
	var ids []string
	for _, l := range dlqtLetters(t, out) {
		ids = append(ids, l.EventID)
	}
	return ids
}

// dlqtWrite writes a dead letter and returns its dead-letter sequence.
func dlqtWrite(t *testing.T, b bundle, l dlq.Letter) uint64 {
	t.Helper()
	seq, err := dlq.Writer{JS: b.js}.Write(context.Background(), l)
	require.NoError(t, err)
	return seq
}

func dlqtEvents(t *testing.T, b bundle, seq uint64) *dlqtMsg {
	t.Helper()
	s, err := b.js.Stream(context.Background(), stream.EventsStream)
	require.NoError(t, err)
	m, err := s.GetMsg(context.Background(), seq)
	require.NoError(t, err)
	return &dlqtMsg{Subject: m.Subject, Header: m.Header, Data: m.Data}
}

// dlqtMsg is the part of a stored message the tests look at.
type dlqtMsg struct {
	Subject string
	Header  nats.Header
	Data    []byte
}

func TestDLQListFilters(t *testing.T) {
	b := setup(t)
	base := time.Now().UTC().Truncate(time.Second)
	h3, m90, m10 := base.Add(-3*time.Hour), base.Add(-90*time.Minute), base.Add(-10*time.Minute)
	for i, l := range []dlq.Letter{
		{EventID: "e1", Dest: "a", Reason: "max_attempts", LastStatus: 500, DeadAt: h3},
		{EventID: "e2", Dest: "b", Reason: "permanent_status", LastStatus: 404, DeadAt: h3},
		{EventID: "e3", Dest: "a", Reason: "unknown_destination", LastStatus: 0, DeadAt: m90},
		{EventID: "e4", Dest: "b", Reason: "max_attempts", LastStatus: 500, DeadAt: m90},
		{EventID: "e5", Dest: "a", Reason: "permanent_status", LastStatus: 404, DeadAt: m10},
		{EventID: "e6", Dest: "b", Reason: "unknown_destination", LastStatus: 0, DeadAt: m10},
		{EventID: "e7", Dest: "a", Reason: "max_attempts", LastStatus: 0, LastError: "dial tcp: connection refused", DeadAt: m10},
		{EventID: "e8", Dest: "a", Reason: "permanent_status", LastStatus: 404, DeadAt: h3},
	} {
		l.Attempts = i + 1
		l.Subject = "relay.in." + l.Dest
		l.StreamSeq = uint64(100 + i)
		l.Body = []byte(`{}`)
		require.Equal(t, uint64(i+1), dlqtWrite(t, b, l))
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8"}},
		{[]string{"--dest", "a"}, []string{"e1", "e3", "e5", "e7", "e8"}},
		{[]string{"--dest", "b"}, []string{"e2", "e4", "e6"}},
		{[]string{"--dest", "c"}, nil},
		{[]string{"--reason", "max_attempts"}, []string{"e1", "e4", "e7"}},
		{[]string{"--reason", "permanent_status"}, []string{"e2", "e5", "e8"}},
		{[]string{"--reason", "unknown_destination"}, []string{"e3", "e6"}},
		{[]string{"--status", "404"}, []string{"e2", "e5", "e8"}},
		{[]string{"--status", "500"}, []string{"e1", "e4"}},
		{[]string{"--status", "none"}, []string{"e3", "e6", "e7"}},
		{[]string{"--since", "2h"}, []string{"e3", "e4", "e5", "e6", "e7"}},
		{[]string{"--since", "30m"}, []string{"e5", "e6", "e7"}},
		{[]string{"--until", "1h"}, []string{"e1", "e2", "e3", "e4", "e8"}},
		{[]string{"--since", "2h", "--until", "1h"}, []string{"e3", "e4"}},
		{[]string{"--since", m90.Format(time.RFC3339)}, []string{"e3", "e4", "e5", "e6", "e7"}},
		{[]string{"--since", m90.Add(time.Second).Format(time.RFC3339)}, []string{"e5", "e6", "e7"}},
		{[]string{"--until", m90.Format(time.RFC3339)}, []string{"e1", "e2", "e8"}},
		{[]string{"--since", h3.Format(time.RFC3339), "--until", m90.Format(time.RFC3339)}, []string{"e1", "e2", "e8"}},
		{[]string{"--since", m90.In(time.FixedZone("X", -5*3600)).Format(time.RFC3339), "--until", m10.Format(time.RFC3339)}, []string{"e3", "e4"}},
		{[]string{"--limit", "2"}, []string{"e1", "e2"}},
		{[]string{"--limit", "0"}, []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8"}},
		{[]string{"--limit", "2", "--dest", "b"}, []string{"e2", "e4"}},
		{[]string{"--limit", "2", "--status", "none", "--since", "2h"}, []string{"e3", "e6"}},
		{[]string{"--dest", "a", "--reason", "max_attempts"}, []string{"e1", "e7"}},
		{[]string{"--dest", "b", "--status", "none"}, []string{"e6"}},
		{[]string{"--dest", "a", "--status", "404", "--since", "2h"}, []string{"e5"}},
		{[]string{"--reason", "max_attempts", "--until", "1h"}, []string{"e1", "e4"}},
		{[]string{"--dest", "b", "--reason", "permanent_status", "--status", "500"}, nil},
	} {
		require.Equal(t, tc.want, dlqtList(t, b, tc.args...), "dlq list %v", tc.args)
	}

	t.Run("json fields", func(t *testing.T) {
		code, out, errs := b.cli(t, "", "dlq", "list", "--json", "--dest", "a", "--reason", "max_attempts", "--status", "none")
		require.Equal(t, 0, code, errs)
		ls := dlqtLetters(t, out)
		require.Len(t, ls, 1)
		l := ls[0]
		require.Equal(t, uint64(7), l.Seq)
		require.Equal(t, "e7", l.EventID)
		require.Equal(t, "a", l.Dest)
		require.Equal(t, 7, l.Attempts)
		require.Equal(t, 0, l.LastStatus)
		require.Equal(t, "dial tcp: connection refused", l.LastError)
		require.True(t, m10.Equal(l.DeadAt), "dead_at %s, want %s", l.DeadAt, m10)
		require.Equal(t, "relay.in.a", l.Subject)
		require.Equal(t, uint64(106), l.StreamSeq)
	})

	t.Run("table", func(t *testing.T) {
		code, out, errs := b.cli(t, "", "dlq", "list")
		require.Equal(t, 0, code, errs)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		require.Len(t, lines, 9, out)
		for _, h := range []string{"SEQ", "AGE", "DEST", "EVENT ID", "ATTEMPTS", "LAST STATUS", "REASON"} {
			require.Contains(t, lines[0], h)
		}
		require.Equal(t, []string{"1", "3h0m", "a", "e1", "1", "500", "max_attempts"}, dlqtTrimAge(strings.Fields(lines[1])))
		require.Equal(t, []string{"3", "1h30m", "a", "e3", "3", "-", "unknown_destination"}, dlqtTrimAge(strings.Fields(lines[3])))
		require.Equal(t, []string{"7", "10m", "a", "e7", "7", "error", "max_attempts"}, dlqtTrimAge(strings.Fields(lines[7])))

		code, out, errs = b.cli(t, "", "dlq", "list", "--dest", "c")
		require.Equal(t, 0, code, errs)
		require.Contains(t, out, "EVENT ID", "an empty list still has its header")
		require.Len(t, strings.Split(strings.TrimRight(out, "\n"), "\n"), 1)
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--status", "abc"}, "--status"},
			{[]string{"--reason", "max-attempts"}, `--reason "max-attempts": use one of max_attempts, permanent_status`},
			{[]string{"--status", "99"}, "--status"},
			{[]string{"--status", "600"}, "--status"},
			{[]string{"--since", "yesterday"}, "--since"},
			{[]string{"--since", "-5m"}, "--since"},
			{[]string{"--until", "soon"}, "--until"},
			{[]string{"--since", "1h", "--until", "2h"}, "--until must be after --since"},
			{[]string{"--since", m90.Format(time.RFC3339), "--until", m90.Format(time.RFC3339)}, "--until must be after --since"},
		} {
			for _, asJSON := range []bool{false, true} {
				args := append([]string{"dlq", "list"}, tc.args...)
				if asJSON {
					args = append(args, "--json")
				}
				code, out, errs := b.cli(t, "", args...)
				require.Equal(t, 2, code, "%v: %s", args, errs)
				require.Contains(t, errs, tc.want, "%v", args)
				require.Empty(t, out, "%v", args)
			}
		}
	})
}

// dlqtTrimAge drops the seconds of the AGE column ("3h0m0s" -> "3h0m"), which
// depend on how long the test took.
func dlqtTrimAge(f []string) []string {
	if len(f) > 1 {
		if i := strings.LastIndex(f[1], "m"); i >= 0 {
			f[1] = f[1][:i+1]
		}
	}
	return f
}

// dlqtLetterFor is a dead letter of dest with event id id.
func dlqtLetterFor(dest, id, subject string, streamSeq uint64) dlq.Letter {
	now := time.Now().UTC()
	return dlq.Letter{
		DeadAt: now, Dest: dest, EventID: id, Reason: "max_attempts", Attempts: 3, LastStatus: 503,
		Subject: subject, StreamSeq: streamSeq, Body: []byte(`{"id":"` + id + `"}`),
		Headers: nats.Header{"X-Tenant": []string{"t-" + id}},
		History: []dlq.Attempt{{N: 1, At: now, Status: 503}},
	}
}

func TestDLQReplayDryRunChangesNothing(t *testing.T) {
	b := setup(t)
	code, _, errs := b.cli(t, "", "dest", "add", "other", "--url", "https://example.test", "--no-secret")
	require.Equal(t, 0, code, errs)
	dlqtWrite(t, b, dlqtLetterFor("a", "a1", "relay.in.a", 1))
	dlqtWrite(t, b, dlqtLetterFor("b", "b1", "relay.in.b", 2))
	dlqtWrite(t, b, dlqtLetterFor("a", "a2", "relay.in.a", 3))
	events := b.lastSeq(t)
	all := dlqtList(t, b)
	require.Equal(t, []string{"a1", "b1", "a2"}, all)

	code, out, errs := b.cli(t, "", "dlq", "replay", "--dest", "a", "--dry-run")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "would replay dead letter 1 (event a1, max_attempts) to a")
	require.Contains(t, out, "would replay dead letter 3 (event a2, max_attempts) to a")
	require.NotContains(t, out, "b1")
	require.Equal(t, 2, strings.Count(out, "would replay"))
	require.Contains(t, out, "dry run: 2 dead letters would be replayed")

	code, out, errs = b.cli(t, "", "dlq", "replay", "--all", "--dry-run", "--to-dest", "other")
	require.Equal(t, 0, code, errs)
	require.Equal(t, 3, strings.Count(out, "would replay"))
	require.Equal(t, 3, strings.Count(out, ") to other\n"))
	require.Contains(t, out, "dry run: 3 dead letters would be replayed")

	code, out, errs = b.cli(t, "", "dlq", "replay", "--seq", "2", "--dry-run")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "would replay dead letter 2 (event b1, max_attempts) to b")
	require.Contains(t, out, "dry run: 1 dead letters would be replayed")

	require.Equal(t, events, b.lastSeq(t), "a dry run publishes nothing")
	require.Equal(t, all, dlqtList(t, b), "a dry run deletes nothing")
}

func TestDLQReplayToDest(t *testing.T) {
	b := setup(t)
	for _, d := range []string{"a", "other"} {
		code, _, errs := b.cli(t, "", "dest", "add", d, "--url", "https://example.test", "--no-secret")
		require.Equal(t, 0, code, errs)
	}
	dlqtWrite(t, b, dlqtLetterFor("a", "a1", "relay.in.a", 1))
	dlqtWrite(t, b, dlqtLetterFor("b", "b1", "relay.in.b", 2))
	keyed := dlqtLetterFor("a", "a2", stream.KeyedSubject("a", "k1"), 3)
	keyed.Key = "k1"
	dlqtWrite(t, b, keyed)

	nc := b.js.Conn()
	sub, err := nc.SubscribeSync(stream.InPrefix + ".>")
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	t.Run("unknown --to-dest changes nothing", func(t *testing.T) {
		before := b.lastSeq(t)
		code, out, errs := b.cli(t, "", "dlq", "replay", "--dest", "a", "--to-dest", "nope")
		require.Equal(t, 1, code, out)
		require.Contains(t, errs, "--to-dest")
		require.Contains(t, errs, "nope")
		require.Equal(t, before, b.lastSeq(t), "nothing published")
		require.Equal(t, []string{"a1", "b1", "a2"}, dlqtList(t, b), "nothing deleted")
		_, err := sub.NextMsg(200 * time.Millisecond)
		require.ErrorIs(t, err, nats.ErrTimeout, "nothing published on relay.in.>")
	})

	before := b.lastSeq(t)
	code, out, errs := b.cli(t, "", "dlq", "replay", "--dest", "a", "--to-dest", "other")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 2 dead letters")
	require.Contains(t, out, "replayed dead letter 1 (event a1) to other")
	require.Contains(t, out, "replayed dead letter 3 (event a2) to other")
	require.Equal(t, before+2+1, b.lastSeq(t), "the two, and relay.replay.finished")

	// As published.
	got := map[string]*nats.Msg{}
	for range 2 {
		m, err := sub.NextMsg(2 * time.Second)
		require.NoError(t, err)
		got[m.Header.Get(stream.HdrEventID)] = m
	}
	require.Equal(t, "relay.in.other", got["a1"].Subject)
	require.Equal(t, "relay.in.other.k1", got["a2"].Subject)
	require.Equal(t, "k1", got["a2"].Header.Get(stream.HdrKey), "the order key goes along")
	for id, m := range got {
		require.Equal(t, `{"id":"`+id+`"}`, string(m.Data))
		require.Equal(t, "t-"+id, m.Header.Get("X-Tenant"), "the event's own headers go along")
	}
	_, err = sub.NextMsg(200 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "nothing else published")

	// As stored.
	m1, m2 := dlqtEvents(t, b, before+1), dlqtEvents(t, b, before+2)
	require.Equal(t, "relay.in.other", m1.Subject)
	require.Equal(t, "a1", m1.Header.Get(stream.HdrEventID))
	p, err := stream.ParseSubject(m2.Subject)
	require.NoError(t, err)
	require.Equal(t, "other", p.Dest)
	require.Equal(t, stream.Bucket("k1"), p.Bucket)
	require.Equal(t, "k1", m2.Header.Get(stream.HdrKey))
	require.Equal(t, "a2", m2.Header.Get(stream.HdrEventID))

	require.Equal(t, []string{"b1"}, dlqtList(t, b), "the replayed letters are gone; b's stays")
	require.Empty(t, dlqtList(t, b, "--dest", "a"))
}

func TestDLQReplayRate(t *testing.T) {
	b := setup(t)
	for i := range 5 {
		dlqtWrite(t, b, dlqtLetterFor("a", "a"+string(rune('0'+i)), "relay.in.a", uint64(i+1)))
	}
	for _, rate := range []string{"0", "x/s", "-3", "0/s"} {
		code, _, errs := b.cli(t, "", "dlq", "replay", "--all", "--rate", rate)
		require.Equal(t, 2, code, "--rate %s: %s", rate, errs)
		require.Contains(t, errs, "--rate")
	}
	require.Len(t, dlqtList(t, b), 5, "a usage error replays nothing")

	before := b.lastSeq(t)
	start := time.Now()
	code, out, errs := b.cli(t, "", "dlq", "replay", "--dest", "a", "--rate", "10/s")
	took := time.Since(start)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 5 dead letters")
	require.GreaterOrEqual(t, took, 400*time.Millisecond, "5 letters at 10/s wait 4 intervals of 100ms")
	require.Equal(t, before+5+1, b.lastSeq(t), "the five, and relay.replay.finished")
	require.Empty(t, dlqtList(t, b))
}

func TestDLQReplaySameSelectionTwice(t *testing.T) {
	b := setup(t)
	dlqtWrite(t, b, dlqtLetterFor("a", "a1", "relay.in.a", 1))
	dlqtWrite(t, b, dlqtLetterFor("b", "b1", "relay.in.b", 2))
	dlqtWrite(t, b, dlqtLetterFor("a", "a2", "relay.in.a", 3))

	before := b.lastSeq(t)
	code, out, errs := b.cli(t, "", "dlq", "replay", "--dest", "a")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 2 dead letters")
	require.NotContains(t, out, "already replayed")
	require.Equal(t, before+2+1, b.lastSeq(t), "the two, and relay.replay.finished")

	code, out, errs = b.cli(t, "", "dlq", "replay", "--dest", "a")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 0 dead letters")
	require.Equal(t, before+2+1, b.lastSeq(t), "the second run publishes nothing (nor a relay.replay.finished)")
	require.Equal(t, []string{"b1"}, dlqtList(t, b))
}

func TestDLQReplayIsIdempotentPerLetter(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	l := dlqtLetterFor("a", "a1", "relay.in.a", 42)
	seq := dlqtWrite(t, b, l)
	again := dlqtWrite(t, b, l)
	require.Equal(t, seq, again, "writing the same dead letter again stores nothing twice")
	require.Equal(t, []string{"a1"}, dlqtList(t, b))

	st, err := dlq.Open(ctx, b.js)
	require.NoError(t, err)
	got, err := st.Get(ctx, seq)
	require.NoError(t, err)

	before := b.lastSeq(t)
	ack1, err := st.Replay(ctx, got, "")
	require.NoError(t, err)
	require.False(t, ack1.Duplicate)
	require.Equal(t, before+1, ack1.Sequence)

	ack2, err2 := st.Replay(ctx, got, "")
	require.NotNil(t, ack2, "the second replay is published (as a duplicate): %v", err2)
	require.True(t, ack2.Duplicate, "the second replay of the same letter is a duplicate")
	require.Equal(t, ack1.Sequence, ack2.Sequence)
	require.Equal(t, before+1, b.lastSeq(t), "the events stream gained one message")
	// Store.Delete: "Deleting one that is gone is not an error".
	require.NoError(t, err2, "replaying a letter that is already gone is not an error")

	m := dlqtEvents(t, b, ack1.Sequence)
	require.Equal(t, "a1", m.Header.Get(stream.HdrEventID))
	require.Empty(t, dlqtList(t, b))
	_, err = st.Get(ctx, seq)
	require.Error(t, err)
}

func TestDLQPurge(t *testing.T) {
	b := setup(t)
	for i, r := range []string{"max_attempts", "unknown_destination", "permanent_status", "unknown_destination"} {
		l := dlqtLetterFor("a", "e"+string(rune('1'+i)), "relay.in.a", uint64(i+1))
		l.Reason = r
		dlqtWrite(t, b, l)
	}
	all := []string{"e1", "e2", "e3", "e4"}

	code, out, errs := b.cli(t, "y\n", "dlq", "purge", "--reason", "unknown_destination")
	require.Equal(t, 2, code, "%s%s", out, errs)
	require.Contains(t, errs, "--yes")
	require.Equal(t, all, dlqtList(t, b), "nothing deleted without --yes")

	code, _, errs = b.cli(t, "", "dlq", "purge", "--yes")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "--all")
	require.Equal(t, all, dlqtList(t, b), "nothing deleted without a selection")

	code, out, errs = b.cli(t, "", "dlq", "purge", "--reason", "unknown_destination", "--yes")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "purged 2 dead letters")
	require.Equal(t, []string{"e1", "e3"}, dlqtList(t, b))

	code, out, errs = b.cli(t, "", "dlq", "purge", "--reason", "unknown_destination", "--yes")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "nothing was deleted")
	require.Equal(t, []string{"e1", "e3"}, dlqtList(t, b))

	code, _, errs = b.cli(t, "", "dlq", "purge", "--seq", "3", "--yes")
	require.Equal(t, 0, code, errs)
	require.Equal(t, []string{"e1"}, dlqtList(t, b))

	code, _, errs = b.cli(t, "", "dlq", "purge", "--all", "--status", "abc", "--yes")
	require.Equal(t, 2, code, errs)
	require.Equal(t, []string{"e1"}, dlqtList(t, b))

	code, out, errs = b.cli(t, "", "dlq", "purge", "--all", "--yes")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "purged 1 dead letters")
	require.Empty(t, dlqtList(t, b))
}

func TestDLQShowBody(t *testing.T) {
	b := setup(t)
	now := time.Now().UTC()
	binary := []byte{0xff, 0xfe, 0x00, 0x01, 'x'}
	lb := dlqtLetterFor("a", "bin", "relay.in.a", 1)
	lb.Body = binary
	lb.LastStatus, lb.LastError = 0, "read: connection reset"
	lb.History = []dlq.Attempt{
		{N: 1, At: now, Duration: time.Millisecond, Status: 502},
		{N: 2, At: now, Duration: 2 * time.Millisecond, Error: "read: connection reset"},
	}
	binSeq := dlqtWrite(t, b, lb)
	lj := dlqtLetterFor("a", "json", "relay.in.a", 2)
	lj.Body = []byte(`{"b":[1,2],"a":"x"}`)
	jsonSeq := dlqtWrite(t, b, lj)
	lt := dlqtLetterFor("a", "text", "relay.in.a", 3)
	lt.Body = []byte("plain text, not JSON")
	textSeq := dlqtWrite(t, b, lt)

	t.Run("binary", func(t *testing.T) {
		code, out, errs := b.cli(t, "", "dlq", "show", dlqtU(binSeq))
		require.Equal(t, 0, code, errs)
		require.Contains(t, out, "(base64) "+base64.StdEncoding.EncodeToString(binary))
		require.Contains(t, out, "event id:      bin")
		require.Contains(t, out, "last status:   error")
		require.Contains(t, out, "#1")
		require.Contains(t, out, "502")
		require.Contains(t, out, "no response: read: connection reset")
		require.Contains(t, out, "X-Tenant: t-bin")

		code, out, errs = b.cli(t, "", "dlq", "show", dlqtU(binSeq), "--json")
		require.Equal(t, 0, code, errs)
		var got dlqtShown
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Equal(t, binSeq, got.Seq)
		require.Equal(t, "bin", got.EventID)
		require.Empty(t, got.Body)
		require.Equal(t, base64.StdEncoding.EncodeToString(binary), got.BodyBase64)
		dec, err := base64.StdEncoding.DecodeString(got.BodyBase64)
		require.NoError(t, err)
		require.Equal(t, binary, dec)
		require.Len(t, got.History, 2)
		require.Equal(t, 502, got.History[0].Status)
		require.Equal(t, 2, got.History[1].N)
		require.Equal(t, "read: connection reset", got.History[1].Error)
		require.Equal(t, 2*time.Millisecond, got.History[1].Duration)
	})

	t.Run("json", func(t *testing.T) {
		code, out, errs := b.cli(t, "", "dlq", "show", dlqtU(jsonSeq))
		require.Equal(t, 0, code, errs)
		require.Contains(t, out, "body:\n  {\n    \"a\": \"x\",\n    \"b\": [\n      1,\n      2\n    ]\n  }\n")
		require.NotContains(t, out, "(base64)")

		code, out, errs = b.cli(t, "", "dlq", "show", dlqtU(jsonSeq), "--json")
		require.Equal(t, 0, code, errs)
		var got dlqtShown
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Equal(t, jsonSeq, got.Seq)
		require.JSONEq(t, `{"b":[1,2],"a":"x"}`, string(got.Body))
		require.Empty(t, got.BodyBase64)
		require.Len(t, got.History, 1)
		require.Equal(t, 503, got.History[0].Status)
	})

	t.Run("text", func(t *testing.T) {
		code, out, errs := b.cli(t, "", "dlq", "show", dlqtU(textSeq))
		require.Equal(t, 0, code, errs)
		require.Contains(t, out, "body:\n  plain text, not JSON\n")
		code, out, errs = b.cli(t, "", "dlq", "show", dlqtU(textSeq), "--json")
		require.Equal(t, 0, code, errs)
		var got dlqtShown
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		var text string
		require.NoError(t, json.Unmarshal(got.Body, &text), "a text body is a JSON string: %s", out)
		require.Equal(t, "plain text, not JSON", text)
		require.Equal(t, base64.StdEncoding.EncodeToString(lt.Body), got.BodyBase64, "and base64, the exact bytes")
	})

	t.Run("missing and bad seq", func(t *testing.T) {
		code, _, errs := b.cli(t, "", "dlq", "show", "99")
		require.Equal(t, 1, code, errs)
		require.Contains(t, errs, "no dead letter with sequence 99")
		code, _, errs = b.cli(t, "", "dlq", "show", "0")
		require.Equal(t, 2, code, errs)
		code, _, errs = b.cli(t, "", "dlq", "show")
		require.Equal(t, 2, code, errs)
	})
}

// dlqtShown is what 'dlq show --json' prints.
type dlqtShown struct {
	Seq        uint64          `json:"seq"`
	EventID    string          `json:"event_id"`
	Body       json.RawMessage `json:"body"`
	BodyBase64 string          `json:"body_base64"`
	History    []dlq.Attempt   `json:"history"`
}

func dlqtU(n uint64) string { return strconv.FormatUint(n, 10) }

func TestLogReplayCLI(t *testing.T) {
	b := setup(t)
	for _, d := range []string{"logd", "otherd"} {
		code, _, errs := b.cli(t, "", "dest", "add", d, "--url", "https://example.test", "--no-secret")
		require.Equal(t, 0, code, errs)
	}
	start := b.lastSeq(t)
	var ids []string
	for i := range 3 {
		code, out, errs := b.cli(t, "", "publish", "--dest", "logd", "--data", `{"n":`+dlqtU(uint64(i))+`}`)
		require.Equal(t, 0, code, errs)
		require.Contains(t, out, "published ")
		m := dlqtEvents(t, b, start+uint64(i)+1)
		require.Equal(t, "relay.in.logd", m.Subject)
		id := m.Header.Get(stream.HdrEventID)
		require.NotEmpty(t, id)
		ids = append(ids, id)
	}
	code, _, errs := b.cli(t, "", "publish", "--dest", "otherd", "--data", `{"other":true}`)
	require.Equal(t, 0, code, errs)
	originals := b.lastSeq(t)
	require.Equal(t, start+4, originals)

	dry := func(t *testing.T) {
		t.Helper()
		code, out, errs := b.cli(t, "", "replay", "--dest", "logd", "--since", "1h", "--dry-run")
		require.Equal(t, 0, code, errs)
		require.Equal(t, 3, strings.Count(out, "would replay event"), out)
		for i, id := range ids {
			require.Contains(t, out, "would replay event "+id+" (log seq "+dlqtU(start+uint64(i)+1)+")")
		}
		require.Contains(t, out, "dry run: 3 events would be replayed")
	}

	t.Run("dry run", func(t *testing.T) {
		before := b.lastSeq(t)
		dry(t)
		require.Equal(t, before, b.lastSeq(t), "a dry run publishes nothing")
	})

	code, out, errs := b.cli(t, "", "replay", "--dest", "logd", "--since", "1h")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 3 events")
	require.NotContains(t, out, "not published again")
	require.Equal(t, originals+3+1, b.lastSeq(t), "the three, and relay.replay.finished")
	for i, id := range ids {
		orig := dlqtEvents(t, b, start+uint64(i)+1)
		cp := dlqtEvents(t, b, originals+uint64(i)+1)
		require.Equal(t, "relay.in.logd", cp.Subject)
		require.Equal(t, id, cp.Header.Get(stream.HdrEventID), "the copy keeps the event id")
		require.Equal(t, orig.Header.Get(stream.HdrEventID), cp.Header.Get(stream.HdrEventID))
		require.NotEqual(t, id, cp.Header.Get(stream.HdrMsgID), "the copy has its own dedup id")
		require.Equal(t, orig.Data, cp.Data)
	}

	t.Run("again within the duplicate window", func(t *testing.T) {
		before := b.lastSeq(t)
		code, out, errs := b.cli(t, "", "replay", "--dest", "logd", "--since", "1h")
		require.Equal(t, 0, code, errs)
		require.Equal(t, 3, strings.Count(out, "not published again"), out)
		require.Contains(t, out, "replayed 0 events; 3 more had been replayed moments ago (the duplicate window) and were dropped")
		require.Equal(t, before, b.lastSeq(t), "nothing published twice")
	})

	t.Run("copies are not replayed", func(t *testing.T) {
		before := b.lastSeq(t)
		dry(t)
		require.Equal(t, before, b.lastSeq(t))
	})

	t.Run("usage", func(t *testing.T) {
		before := b.lastSeq(t)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"replay", "--dest", "logd"}, "--since"},
			{[]string{"replay", "--since", "1h"}, "--dest"},
			{[]string{"replay", "--dest", "logd", "--since", "yesterday"}, "--since"},
			{[]string{"replay", "--dest", "logd", "--since", "1h", "--until", "2h"}, "--until must be after --since"},
			{[]string{"replay", "--dest", "logd", "--since", "1h", "--rate", "x/s"}, "--rate"},
		} {
			code, _, errs := b.cli(t, "", tc.args...)
			require.Equal(t, 2, code, "%v: %s", tc.args, errs)
			require.Contains(t, errs, tc.want, "%v", tc.args)
		}
		require.Equal(t, before, b.lastSeq(t))
	})
}

// replay --key reads the key's bucket and takes the events whose
// Relay-Order-Key is the key (or has its token): not another key of the
// same bucket, and not an event published without the header. The copies
// land in the key's bucket with the key.
func TestLogReplayByKeyCLI(t *testing.T) {
	b := setup(t)
	code, _, errs := b.cli(t, "", "dest", "add", "keyd", "--url", "https://example.test", "--no-secret", "--ordered")
	require.Equal(t, 0, code, errs)
	// Two keys of one bucket.
	first := map[int]string{}
	var k1, k2 string
	for i := 0; k2 == ""; i++ {
		k := "k-" + strconv.Itoa(i)
		if o, ok := first[stream.Bucket(k)]; ok {
			k1, k2 = o, k
		} else {
			first[stream.Bucket(k)] = k
		}
	}
	const hashed = "tenant.7 user" // its token is h-<hex>
	publish := func(key string) uint64 {
		t.Helper()
		code, _, errs := b.cli(t, "", "publish", "--dest", "keyd", "--key", key, "--data", `{"k":"`+key+`"}`)
		require.Equal(t, 0, code, errs)
		return b.lastSeq(t)
	}
	s1 := publish(k1)
	publish(k2)
	sh := publish(hashed)
	s1b := publish(k1)
	// A plain NATS publish on k1's subject without Relay-Order-Key.
	_, err := b.js.Publish(context.Background(), stream.InSubject("keyd", k1), []byte(`{"plain":true}`))
	require.NoError(t, err)
	originals := b.lastSeq(t)
	require.Equal(t, stream.KeyedSubject("keyd", k1), dlqtEvents(t, b, originals).Subject)

	replay := func(key string, want ...uint64) {
		t.Helper()
		code, out, errs := b.cli(t, "", "replay", "--dest", "keyd", "--key", key, "--since", "1h", "--dry-run")
		require.Equal(t, 0, code, errs)
		require.Equal(t, len(want), strings.Count(out, "would replay event"), "--key %q: %s", key, out)
		for _, seq := range want {
			require.Contains(t, out, "(log seq "+dlqtU(seq)+")", "--key %q", key)
		}
	}
	replay(k1, s1, s1b)
	replay(k2, s1+1)
	replay(hashed, sh)
	replay(stream.KeyToken(hashed), sh) // the token names the same key
	replay("no-such-key")

	code, out, errs := b.cli(t, "", "replay", "--dest", "keyd", "--key", k1, "--since", "1h")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 2 events")
	require.Equal(t, originals+2+1, b.lastSeq(t), "the two, and relay.replay.finished")
	for i, orig := range []uint64{s1, s1b} {
		cp := dlqtEvents(t, b, originals+uint64(i)+1)
		require.Equal(t, stream.KeyedSubject("keyd", k1), cp.Subject, "the copy is in the key's bucket")
		require.Equal(t, k1, cp.Header.Get(stream.HdrKey))
		require.Equal(t, dlqtEvents(t, b, orig).Data, cp.Data, "in order")
	}
}
