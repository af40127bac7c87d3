package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/internal/version"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

type bundle struct {
	url string
	js  jetstream.JetStream
}

func setup(t *testing.T) bundle {
	t.Helper()
	s := streamtest.Start(t)
	return bundle{url: s.URL, js: s.JS}
}

// cli runs relay with args against b's server.
func (b bundle) cli(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"relay", "--nats-url", b.url}, args...)
	code = Main(all, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func (b bundle) lastSeq(t *testing.T) uint64 {
	s, err := b.js.Stream(context.Background(), stream.EventsStream)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

func TestDestAddListNeverShowsSecrets(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	code, out, errs := b.cli(t, "", "dest", "add", "orders", "--url", "https://example.test/hook", "-H", "Authorization=Bearer xyz", "--max-attempts", "4")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "added destination orders")
	i := strings.Index(out, "whsec_")
	require.Positive(t, i, "a generated secret is printed once")
	secret := strings.TrimSpace(out[i:])

	code, out, errs = b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code, errs)
	require.NotContains(t, out, secret)
	require.NotContains(t, out, "xyz")
	var d destination.Destination
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &d))
	require.Equal(t, "orders", d.Name)
	require.Equal(t, 4, d.Retry.MaxAttempts)
	require.Equal(t, "(set)", d.Secret)

	code, out, _ = b.cli(t, "", "dest", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "https://example.test/hook")
	require.NotContains(t, out, secret)

	code, _, errs = b.cli(t, "", "dest", "update", "orders", "--timeout", "5s")
	require.Equal(t, 0, code, errs)
	code, _, errs = b.cli(t, "", "dest", "add", "orders", "--url", "https://example.test/x")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "already exists")

	code, _, errs = b.cli(t, "", "dest", "rm", "orders")
	require.Equal(t, 0, code, errs)
	code, _, errs = b.cli(t, "", "dest", "rm", "orders")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "not found")
}

func TestDestAddRejectsBadInput(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dest", "add", "d", "--url", "ftp://example.test"}, `scheme must be http or https`},
		{[]string{"dest", "add", "d", "--url", "https://user:pw@example.test"}, "must not contain credentials"},
		{[]string{"dest", "add", "d", "--url", "not a url"}, "scheme must be http or https"},
		{[]string{"dest", "add", "Bad.Name", "--url", "https://example.test"}, "invalid destination name"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "-H", "Host=evil"}, "set by relay"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--secret", "nope"}, "whsec_"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--jitter", "0.9"}, "jitter"},
		{[]string{"dest", "add", "d"}, "--url is required (see 'relay dest add --help')"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--timeout", "5"}, `--timeout "5": not valid; give a duration with a unit, e.g. 5s`},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--max-attempts", "many"}, `--max-attempts "many": not valid; give a whole number`},
		{[]string{"dest", "add", "d", "--url", "not a url"}, `URL "not a url": scheme`},
		{[]string{"dest", "add", "d", "--url", "https://example.test/ä#top"}, `URL "https://example.test/ä#top" has a fragment`},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--max-attempts", "0"}, "--max-attempts 0: give 1 or more"},
		{[]string{"dest", "add", "--url", "https://example.test"}, "exactly one argument"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--type", "order.>.x"}, `invalid event type pattern "order.>.x": '>' must be the last token`},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--type", "order..x"}, "empty token"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--type", "a", "--type", "a"}, "--type a given twice"},
	} {
		code, _, errs := b.cli(t, "", tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errs)
		require.Contains(t, errs, tc.want, "%v", tc.args)
	}
	code, out, _ := b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code)
	require.Empty(t, out, "nothing was added")
}

func TestPublish(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	code, _, errs := b.cli(t, "", "dest", "add", "orders", "--url", "https://example.test/hook")
	require.Equal(t, 0, code, errs)

	t.Run("unknown destination publishes nothing", func(t *testing.T) {
		before := b.lastSeq(t)
		code, _, errs := b.cli(t, "", "publish", "--dest", "nope", "--data", "{}")
		require.Equal(t, 1, code)
		require.Contains(t, errs, `unknown destination "nope"`)
		require.Equal(t, before, b.lastSeq(t))
	})
	t.Run("body exactly once", func(t *testing.T) {
		code, _, errs := b.cli(t, "", "publish", "--dest", "orders")
		require.Equal(t, 2, code)
		require.Contains(t, errs, "exactly once")
		code, _, _ = b.cli(t, "", "publish", "--dest", "orders", "--data", "{}", "-")
		require.Equal(t, 2, code)
	})
	t.Run("from stdin with key, id and headers; re-publish is a duplicate", func(t *testing.T) {
		code, out, errs := b.cli(t, `{"a":1}`, "publish", "--dest", "orders", "--key", "customer 42", "--id", "evt-1", "-H", "X-Tenant=t1", "--json", "-")
		require.Equal(t, 0, code, errs)
		var res publish.Published
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		require.Equal(t, "evt-1", res.ID)
		require.False(t, res.Duplicate)
		s, err := b.js.Stream(context.Background(), stream.EventsStream)
		require.NoError(t, err)
		m, err := s.GetMsg(context.Background(), res.Seq)
		require.NoError(t, err)
		require.Equal(t, `{"a":1}`, string(m.Data))
		require.Equal(t, "t1", m.Header.Get("X-Tenant"))
		require.Equal(t, "customer 42", m.Header.Get(stream.HdrKey))
		p, err := stream.ParseSubject(m.Subject)
		require.NoError(t, err)
		require.Equal(t, stream.Bucket(stream.KeyToken("customer 42")), p.Bucket)

		code, out, _ = b.cli(t, "", "publish", "--dest", "orders", "--key", "customer 42", "--id", "evt-1", "-H", "X-Tenant=t1", "--data", `{"a":1}`)
		require.Equal(t, 0, code)
		require.Contains(t, out, "duplicate")
		require.Equal(t, res.Seq, b.lastSeq(t))

		// The same id with another body: refused, nothing stored.
		code, _, errs = b.cli(t, "", "publish", "--dest", "orders", "--key", "customer 42", "--id", "evt-1", "-H", "X-Tenant=t1", "--data", `{"a":2}`)
		require.NotEqual(t, 0, code)
		require.Contains(t, errs, `event id conflict: id "evt-1" was published within the duplicate window with another body`)
		require.Equal(t, res.Seq, b.lastSeq(t))
	})
	t.Run("bad header", func(t *testing.T) {
		code, _, errs := b.cli(t, "", "publish", "--dest", "orders", "--data", "{}", "-H", "webhook-id=x")
		require.Equal(t, 2, code, "a header relay sets is a usage error, as a malformed one")
		require.Contains(t, errs, "set by relay")
		code, _, errs = b.cli(t, "", "publish", "--dest", "orders", "--data", "{}", "-H", "novalue")
		require.Equal(t, 2, code)
		require.Contains(t, errs, "NAME=VALUE")
	})
}

func TestDLQListShowReplay(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	ctx := context.Background()
	w := dlq.Writer{JS: b.js}
	now := time.Now().UTC()
	for i, dest := range []string{"a", "b", "a"} {
		_, err := w.Write(ctx, dlq.Letter{
			DeadAt: now, Dest: dest, EventID: "evt-" + dest + string(rune('0'+i)), Reason: "max_attempts", Attempts: 2,
			LastStatus: 500, Subject: "relay.in." + dest, StreamSeq: uint64(100 + i), Body: []byte(`{"i":1}`),
			History: []dlq.Attempt{{N: 1, At: now, Status: 500}, {N: 2, At: now, Status: 500, Error: "boom"}},
			First:   now, Last: now,
		})
		require.NoError(t, err)
	}
	code, out, errs := b.cli(t, "", "dlq", "list", "--dest", "a", "--json")
	require.Equal(t, 0, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)

	code, out, errs = b.cli(t, "", "dlq", "show", "2")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "evt-b1")
	require.Contains(t, out, "#2")
	require.Contains(t, out, "boom")
	code, _, errs = b.cli(t, "", "dlq", "show", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "sequence number")

	code, _, _ = b.cli(t, "", "dlq", "replay")
	require.Equal(t, 2, code, "replay needs --seq or --all")

	before := b.lastSeq(t)
	code, out, errs = b.cli(t, "", "dlq", "replay", "--all", "--dest", "a")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "replayed 2 dead letters")
	require.Equal(t, before+2+1, b.lastSeq(t), "the two, and relay.replay.finished")
	s, err := b.js.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	m, err := s.GetMsg(ctx, before+1)
	require.NoError(t, err)
	require.Equal(t, "relay.in.a", m.Subject)
	require.Equal(t, "evt-a0", m.Header.Get(stream.HdrEventID), "replay keeps the event id")
	require.Empty(t, m.Header.Get(stream.HdrAttempt), "and starts a fresh attempt count")

	// Nothing left for a: running it again replays nothing.
	code, out, _ = b.cli(t, "", "dlq", "replay", "--all", "--dest", "a")
	require.Equal(t, 0, code)
	require.Contains(t, out, "replayed 0 dead letters")
	require.Equal(t, before+2+1, b.lastSeq(t), "nothing more: no event, and no relay.replay.finished for an empty replay")
	code, out, _ = b.cli(t, "", "dlq", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "evt-b1")
	require.NotContains(t, out, "evt-a0")
}

func TestUsageErrorsExit2(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	var out, errb bytes.Buffer
	require.Equal(t, 2, Main([]string{"relay", "publish", "--nope"}, strings.NewReader(""), &out, &errb))
	require.Contains(t, errb.String(), "flag provided but not defined")
	require.Equal(t, 0, Main([]string{"relay", "--help"}, strings.NewReader(""), &out, &errb))
	require.Contains(t, out.String(), "dlq")

	errb.Reset()
	require.Equal(t, 2, Main([]string{"relay", "bogus"}, strings.NewReader(""), &out, &errb))
	require.Contains(t, errb.String(), `unknown command "bogus"`)
	out.Reset()
	require.Equal(t, 0, Main([]string{"relay", "version"}, strings.NewReader(""), &out, &errb))
	require.Equal(t, version.Get().String(), out.String())
	require.True(t, strings.HasPrefix(out.String(), "relay version "+version.Version+"\n"), out.String())
}

func TestRunRefusesAShortDuplicateWindow(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	var out, errb bytes.Buffer
	code := Main([]string{"relay", "run", "--duplicate-window", "15s", "--data-dir", t.TempDir()}, strings.NewReader(""), &out, &errb)
	require.Equal(t, 2, code, errb.String())
	require.Contains(t, errb.String(), "--duplicate-window 15s must be at least 20s")
}

// relay run stopped while its embedded NATS starts (SIGINT or SIGTERM
// cancel the same context) stops cleanly: no error, so exit 0. The wait
// during a store's recovery ends the same way
// (TestStartEmbeddedGivesUpWithItsContext in package stream).
func TestRunStoppedWhileStartingExitsCleanly(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	var out, errb bytes.Buffer
	app := App(strings.NewReader(""), &out, &errb)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	err := app.RunContext(ctx, interspersed(app, []string{"relay", "run", "--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-addr", ""}))
	require.NoError(t, err, errb.String())
	require.Contains(t, errb.String(), "stopped before relay started")
	require.Contains(t, errb.String(), "context canceled")
}

func TestInterspersedFlags(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	app := App(nil, nil, nil)
	got := interspersed(app, []string{"relay", "--nats-url", "u", "dest", "add", "orders", "--url", "x", "-H", "A=b", "--no-secret"})
	require.Equal(t, []string{"relay", "dest", "add", "--nats-url", "u", "--url", "x", "-H", "A=b", "--no-secret", "--", "orders"}, got, "global flags move behind the command, which reads them")
	got = interspersed(app, []string{"relay", "--log-level=debug", "dest", "--secret-key", "k", "rekey", "--nats-url", "u"})
	require.Equal(t, []string{"relay", "dest", "rekey", "--log-level=debug", "--secret-key", "k", "--nats-url", "u"}, got)
	got = interspersed(app, []string{"relay", "--nats-url", "u", "sink", "--addr", "a"})
	require.Equal(t, []string{"relay", "--nats-url", "u", "sink", "--addr", "a"}, got, "sink takes no NATS flags: it stays where the app reads it")
	got = interspersed(app, []string{"relay", "publish", "--dest", "d", "-"})
	require.Equal(t, []string{"relay", "publish", "--dest", "d", "--", "-"}, got)
}

// Global flags work before and after the command, and each command's help
// lists them.
func TestGlobalFlagsAfterTheCommand(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run; t.Setenv.
	b := setup(t)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(append([]string{"relay"}, args...), strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	key := "0123456789abcdef0123456789abcdef"
	code, _, errs := run("dest", "add", "orders", "--url", "https://example.test/h", "--no-secret", "--nats-url", b.url, "--secret-key", key)
	require.Equal(t, 0, code, errs)
	code, out, errs := run("dest", "list", "--nats-url", b.url)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "orders")
	code, _, errs = run("stats", "--nats-url", b.url, "--log-level", "warn")
	require.Equal(t, 0, code, errs)
	code, out, errs = run("dest", "rekey", "--nats-url", b.url, "--secret-key", key)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "resealed")

	// A flag before the command still beats the environment.
	t.Setenv("RELAY_NATS_URL", "nats://127.0.0.1:1")
	code, out, errs = run("--nats-url", b.url, "dest", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "orders")
	// And one after the command beats one before it.
	code, _, errs = run("--nats-url", "nats://127.0.0.1:1", "dest", "list", "--nats-url", b.url)
	require.Equal(t, 0, code, errs)

	for _, cmd := range [][]string{{"run"}, {"stats"}, {"publish"}, {"dest", "rekey"}, {"dlq", "list"}} {
		code, out, errs = run(append(cmd, "--help")...)
		require.Equal(t, 0, code, errs)
		require.Contains(t, out, "--nats-url", "%v --help", cmd)
		require.Contains(t, out, "--secret-key", "%v --help", cmd)
		require.Contains(t, out, "--log-level", "%v --help", cmd)
	}
}

func TestPublishRejectsOversizedEvents(t *testing.T) {
	b := setup(t)
	code, _, errs := b.cli(t, "", "dest", "add", "big", "--url", "https://example.test/hook")
	require.Equal(t, 0, code, errs)
	before := b.lastSeq(t)
	code, _, errs = b.cli(t, strings.Repeat("x", 1<<20), "publish", "--dest", "big", "-")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "the events stream accepts at most 1048576")
	require.Contains(t, errs, "nothing was published")
	require.Equal(t, before, b.lastSeq(t))

	// Empty and non-UTF-8 bodies are events like any other.
	code, _, errs = b.cli(t, "", "publish", "--dest", "big", "-")
	require.Equal(t, 0, code, errs)
	code, _, errs = b.cli(t, "\xff\xfe\x00binary", "publish", "--dest", "big", "-")
	require.Equal(t, 0, code, errs)
	require.Equal(t, before+2, b.lastSeq(t))

	// CR/LF in a header value is refused.
	code, _, errs = b.cli(t, "", "publish", "--dest", "big", "--data", "{}", "-H", "X-A=1\r\nX-Injected: 2")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "control characters")
}

// dest update's help has its own texts: a flag left out keeps the current
// value, so no flag shows add's defaults.
func TestDestUpdateHelp(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	var out, errb bytes.Buffer
	code := Main([]string{"relay", "dest", "update", "--help"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, 0, code, errb.String())
	help := out.String()
	require.Contains(t, help, "a flag left out keeps the destination's")
	require.Contains(t, help, "replaces all the current headers")
	require.NotContains(t, help, "(default: 30s)")
	require.NotContains(t, help, "(default: 15)")
	require.NotContains(t, help, "required")
	require.Equal(t, strings.Count(help, "(default: unchanged)"), len(destFlags()), "every setting defaults to unchanged:\n%s", help)

	out.Reset()
	code = Main([]string{"relay", "dest", "add", "--help"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "(default: 30s)", "add keeps its defaults")
}

// stats --json without Redis has no "parked" count (not -1).
func TestStatsJSONWithoutRedisHasNoParkedCount(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	code, _, errs := b.cli(t, "", "dest", "add", "orders", "--url", "https://example.test/hook")
	require.Equal(t, 0, code, errs)
	code, out, errs := b.cli(t, "", "stats", "--json")
	require.Equal(t, 0, code, errs)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &rec), out)
	require.Equal(t, "orders", rec["dest"])
	require.NotContains(t, rec, "parked", out)
	require.Contains(t, rec, "backlog")

	// With a count, it is there.
	got, err := json.Marshal(statsJSON(relay.DestStats{Dest: "orders", Parked: 3}))
	require.NoError(t, err)
	require.Contains(t, string(got), `"parked":3`)
	got, err = json.Marshal(statsJSON(relay.DestStats{Dest: "orders", Parked: 0}))
	require.NoError(t, err)
	require.Contains(t, string(got), `"parked":0`, "zero parked is a count")
}

// A bad flag value is a usage error (exit 2, nothing changed) found before
// relay connects to anything: here no NATS server listens.
func TestBadInputIsAUsageErrorBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dest", "update", "orders", "--max-attempts", "0"}, "--max-attempts 0: give 1 or more"},
		{[]string{"stats", "--redis-url", "redis://127.0.0.1:1", "--redis-mode", "bad"}, `--redis-mode "bad"`},
		{[]string{"run", "--allow-net", "bad"}, `--allow-net "bad"`},
		{[]string{"run", "--redis-url", "redis://127.0.0.1:1", "--park-lease", "5m"}, "--park-lease 5m0s must be shorter"},
		{[]string{"run", "--ack-wait", "1s"}, "--ack-wait 1s: give 3s to 10m"},
		{[]string{"run", "--ack-wait", "1h"}, "--ack-wait 1h0m0s: give 3s to 10m"},
		{[]string{"run", "--connect-timeout", "-1s"}, "--connect-timeout -1s: give a positive duration"},
		{[]string{"run", "--tls-handshake-timeout", "0"}, "--tls-handshake-timeout 0s: give a positive duration"},
		{[]string{"run", "--event-retention", "1m"}, "--event-retention 1m0s: give more than --duplicate-window 2m0s"},
		{[]string{"run", "--dlq-retention", "0"}, "--dlq-retention 0s: give a positive duration"},
		{[]string{"run", "--replicas", "7"}, "--replicas 7: give 1 to 5"},
		{[]string{"run", "--shutdown-grace", "-1s"}, "--shutdown-grace -1s"},
		{[]string{"run", "--max-event-size", "-1"}, "--max-event-size -1: give 1 to 67108864"},
		{[]string{"run", "--max-event-size", "4294967296"}, "--max-event-size 4294967296: give 1 to 67108864"},
		{[]string{"run", "--park-threshold", "-1s"}, "--park-threshold -1s: give a positive duration"},
		{[]string{"run", "--data-dir", "/tmp/x", "--cluster-name", "c"}, "--data-dir, --cluster-name configure the embedded NATS server, which --nats-url leaves out"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--concurrency", "0"}, "--concurrency 0: give 1 or more"},
		{[]string{"dest", "update", "d", "--timeout", "0s"}, "--timeout 0s: give 100ms to 10m"},
		{[]string{"dlq", "purge", "17", "--all", "--yes"}, `unexpected argument "17": 'relay dlq purge' selects dead letters with flags`},
		{[]string{"dlq", "replay", "17", "--dest", "d"}, `unexpected argument "17"`},
		{[]string{"dlq", "list", "d"}, `unexpected argument "d"`},
		{[]string{"stats", "d"}, `unexpected argument "d": give a destination with --dest`},
		{[]string{"dest", "list", "d"}, `unexpected argument "d": 'relay dest list' takes none`},
		{[]string{"dest", "remove", "d"}, `unknown command "remove" for 'relay dest'`},
		{[]string{"dlq", "foo"}, `unknown command "foo" for 'relay dlq'`},
		{[]string{"replay", "--dest", "d", "--since", "1h", "--rate", "NaN"}, `--rate "NaN": give a number per second from 0.001`},
		{[]string{"replay", "--dest", "d", "--since", "1h", "--rate", "1e-10/s"}, `--rate "1e-10/s"`},
		{[]string{"sink", "--secret", "whsec_short"}, "--secret: not a Standard Webhooks secret"},
		{[]string{"dest", "update", "d", "--breaker-threshold", "0"}, "--breaker-threshold 0: give 1 or more, or -1 for never"},
		{[]string{"dest", "update", "d", "--breaker-pause", "0s"}, "--breaker-pause 0s: give a positive duration"},
		{[]string{"dest", "add", "d", "--url", "https://example.test", "--ordered", "--partitions", "0"}, "--partitions 0: give 1 to 64"},
		{[]string{"publish", "--type", "order.*", "--data", "{}"}, `invalid event type "order.*"`},
		{[]string{"publish", "--type", "relay.destination.disabled", "--data", "{}"}, "relay's own"},
		{[]string{"publish", "--type", "a", "--dest", "d", "--data", "{}"}, "give --dest or --type, not both"},
		{[]string{"publish", "--type", "Relay.destination.disabled", "--data", "{}"}, "relay's own, in any case"},
		{[]string{"publish", "--dest", "d", "--key", "a\nb", "--data", "{}"}, "--key: the order key has a control character"},
		{[]string{"publish", "--dest", "d", "--key", strings.Repeat("k", 257), "--data", "{}"}, "--key: the order key is 257 bytes; at most 256"},
		{[]string{"publish", "--dest", "d", "--id", "..", "--data", "{}"}, `--id: event ids "." and ".." cannot be`},
		{[]string{"publish", "--dest", "d", "--id", "a\tb", "--data", "{}"}, "--id: event id must be"},
		{[]string{"publish", "--data", "{}"}, "missing --dest or --type"},
		{[]string{"dest", "update", "d", "--type", "a b"}, `--type: invalid event type pattern "a b"`},
		{[]string{"replay", "--dest", "d", "--since", "1h", "--type", "a.>.b"}, "'>' must be the last token"},
		{[]string{"replay", "--dest", "d", "--since", "1h", "--type", "a", "--to-dest", "e"}, "leave out --to-dest"},
	} {
		var out, errb bytes.Buffer
		code := Main(append([]string{"relay", "--nats-url", "nats://127.0.0.1:1"}, tc.args...), strings.NewReader(""), &out, &errb)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.want, tc.args)
	}
}

// Subscriptions on the command line: --type is repeatable, dest list shows
// the patterns, dest update --type replaces them (and ” removes them), and
// publish --type stores a typed event.
func TestDestTypesAndPublishByType(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	code, _, errs := b.cli(t, "", "dest", "add", "crm", "--url", "https://example.test/hook", "--type", "order.*", "--type", "invoice.>")
	require.Equal(t, 0, code, errs)
	code, out, errs := b.cli(t, "", "dest", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "order.*,invoice.>")

	before := b.lastSeq(t)
	code, out, errs = b.cli(t, "", "publish", "--type", "order.created", "--key", "customer 42", "--data", `{"n":1}`)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, fmt.Sprintf("seq %d", before+1))
	s, err := b.js.Stream(context.Background(), stream.EventsStream)
	require.NoError(t, err)
	m, err := s.GetMsg(context.Background(), before+1)
	require.NoError(t, err)
	require.Equal(t, "relay.type.order.created", m.Subject)
	require.Equal(t, "customer 42", m.Header.Get(stream.HdrKey), "the key in its header")

	code, _, errs = b.cli(t, "", "dest", "update", "crm", "--type", "refund.created")
	require.Equal(t, 0, code, errs)
	code, out, errs = b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code, errs)
	var d destination.Destination
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &d))
	require.Equal(t, []string{"refund.created"}, d.Types)
	require.Len(t, d.Subscriptions, 3, "one open, two ended")
	// The change is marked at before+2 in the events stream.
	m, err = s.GetMsg(context.Background(), before+2)
	require.NoError(t, err)
	require.Equal(t, "relay.sub.crm", m.Subject)
	require.False(t, d.Subscribed("order.created", before+3), "order.* ended")
	require.True(t, d.Subscribed("order.created", before+1), "but applied to the event published while it did")
	require.False(t, d.Subscribed("refund.created", before+1))
	require.True(t, d.Subscribed("refund.created", before+3))

	code, _, errs = b.cli(t, "", "dest", "update", "crm", "--type", "")
	require.Equal(t, 0, code, errs)
	code, out, _ = b.cli(t, "", "dest", "list")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "refund.created")
}
