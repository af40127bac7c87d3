package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/relay"
)

func dlqCommand() *cli.Command {
	return &cli.Command{
		Name:  "dlq",
		Usage: "inspect and replay dead letters",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list dead letters, oldest first",
				Flags: append(filterFlags(),
					&cli.IntFlag{Name: "limit", Value: 1000, Usage: "at most this many (0: all)"},
					&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
					&cli.DurationFlag{Name: "wait", Usage: "if none matches yet, wait up to this long for one to appear (e.g. 10s)"},
				),
				Action: func(c *cli.Context) error {
					f, err := parseFilter(c)
					if err != nil {
						return err
					}
					if c.Duration("wait") < 0 {
						return usagef("--wait %s: give 0 or more", c.Duration("wait"))
					}
					ctx, js, done, err := openNATS(c, 5*time.Minute+c.Duration("wait"))
					if err != nil {
						return err
					}
					defer done()
					st, err := dlq.Open(ctx, js)
					if err != nil {
						return err
					}
					ls, err := listWaiting(ctx, st, f, c.Int("limit"), c.Duration("wait"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return jsonLines(c.App.Writer, ls, func(l dlq.Letter) any {
							l.History, l.Headers = nil, nil
							return l
						})
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "SEQ\tAGE\tDEST\tEVENT ID\tATTEMPTS\tLAST STATUS\tREASON")
					for _, l := range ls {
						if l.Malformed != "" {
							fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\tmalformed: %s\n", l.Seq, time.Since(l.DeadAt).Round(time.Second), oneLine(l.Dest), oneLine(l.Malformed))
							continue
						}
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", l.Seq, time.Since(l.DeadAt).Round(time.Second), oneLine(l.Dest), oneLine(l.EventID), l.Attempts, statusText(l), oneLine(l.Reason))
					}
					return tw.Flush()
				},
			},
			{
				Name:      "show",
				Usage:     "show one dead letter: headers, failure history and body",
				ArgsUsage: "SEQ",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "as JSON"}},
				Action: func(c *cli.Context) error {
					a, err := oneArg(c, "SEQ")
					if err != nil {
						return err
					}
					seq, err := strconv.ParseUint(a, 10, 64)
					if err != nil || seq == 0 {
						return usagef("SEQ %q: expected a dead-letter sequence number (see 'relay dlq list')", a)
					}
					ctx, js, done, err := openNATS(c, 30*time.Second)
					if err != nil {
						return err
					}
					defer done()
					st, err := dlq.Open(ctx, js)
					if err != nil {
						return err
					}
					l, err := st.Get(ctx, seq)
					if err != nil {
						return err
					}
					var missing error
					if l.EventOmitted {
						if full, err := st.Resolve(ctx, l); err != nil {
							missing = err
						} else {
							l = full
						}
					}
					return showLetter(c, l, missing)
				},
			},
			{
				Name:  "replay",
				Usage: "republish dead letters to their destination and remove them from the dead-letter stream",
				Description: `Each dead letter is republished with its event id (so receivers can
deduplicate), a fresh attempt count, and the dedup id replay:<dead-letter seq>;
it is removed only once the republish is confirmed. Re-running a replay that
was interrupted, or running the same replay twice, publishes nothing twice
within the duplicate window.`,
				Flags: append(filterFlags(),
					&cli.Uint64SliceFlag{Name: "seq", Usage: "dead-letter sequence (repeatable)"},
					&cli.BoolFlag{Name: "all", Usage: "replay every dead letter that passes the filters"},
					&cli.StringFlag{Name: "to-dest", Usage: "send them to this destination instead"},
					&cli.BoolFlag{Name: "dry-run", Usage: "print what would be replayed; change nothing"},
					&cli.StringFlag{Name: "rate", Usage: "at most N per second (e.g. 50 or 50/s), to spare a destination that just came back"},
				),
				Action: func(c *cli.Context) error {
					f, err := parseSelection(c, "replay")
					if err != nil {
						return err
					}
					interval, err := parseRate(c.String("rate"))
					if err != nil {
						return err
					}
					ctx, js, done, err := openNATS(c, 24*time.Hour)
					if err != nil {
						return err
					}
					defer done()
					st, err := dlq.Open(ctx, js)
					if err != nil {
						return err
					}
					to := c.String("to-dest")
					if to != "" {
						ds, err := destStore(c, ctx, js)
						if err != nil {
							return err
						}
						if _, err := ds.Get(ctx, to); err != nil {
							return fmt.Errorf("--to-dest: %w", err)
						}
					}
					ls, err := st.List(ctx, f, 0)
					if err != nil {
						return err
					}
					w := c.App.Writer
					if c.Bool("dry-run") {
						n := 0
						for _, l := range ls {
							if why := notReplayable(l); why != "" {
								fmt.Fprintf(w, "would skip dead letter %d: %s\n", l.Seq, why)
								continue
							}
							dest := l.Dest
							if to != "" {
								dest = to
							}
							n++
							fmt.Fprintf(w, "would replay dead letter %d (event %s, %s) to %s\n", l.Seq, oneLine(l.EventID), oneLine(l.Reason), dest)
						}
						fmt.Fprintf(w, "dry run: %d dead letters would be replayed; nothing was changed\n", n)
						return nil
					}
					prog := newProgress(w, len(ls))
					var tick *time.Ticker
					if interval > 0 {
						tick = time.NewTicker(interval)
						defer tick.Stop()
					}
					n, dups := 0, 0
					var skipped []string
					for i, l := range ls {
						if why := notReplayable(l); why != "" {
							// It can never be replayed: say so, and go on with the others.
							skipped = append(skipped, strconv.FormatUint(l.Seq, 10))
							prog.step(fmt.Sprintf("skipped dead letter %d: %s", l.Seq, why))
							continue
						}
						if tick != nil && i > 0 {
							select {
							case <-tick.C:
							case <-ctx.Done():
								prog.end()
								return fmt.Errorf("interrupted after %d of %d; re-running is safe", n, len(ls))
							}
						}
						ack, err := st.Replay(ctx, l, to)
						if err != nil {
							prog.end()
							return fmt.Errorf("%w (replayed %d of %d before this; re-running is safe)", err, n, len(ls))
						}
						n++
						note := ""
						if ack.Duplicate {
							dups++
							note = " (already replayed before: not published again)"
						}
						dest := l.Dest
						if to != "" {
							dest = to
						}
						prog.step(fmt.Sprintf("replayed dead letter %d (event %s) to %s as event seq %d%s", l.Seq, oneLine(l.EventID), dest, ack.Sequence, note))
					}
					prog.end()
					fmt.Fprintf(w, "replayed %d dead letters", n)
					if dups > 0 {
						fmt.Fprintf(w, " (%d had been replayed before and were not published again)", dups)
					}
					fmt.Fprintln(w)
					if len(skipped) > 0 {
						fmt.Fprintf(w, "skipped %d that cannot be replayed (see 'relay dlq show SEQ'; 'relay dlq purge --seq SEQ' removes one): %s\n", len(skipped), strings.Join(skipped, ", "))
					}
					return nil
				},
			},
			{
				Name:  "purge",
				Usage: "delete dead letters for good",
				Flags: append(filterFlags(),
					&cli.Uint64SliceFlag{Name: "seq", Usage: "dead-letter sequence (repeatable)"},
					&cli.BoolFlag{Name: "all", Usage: "delete every dead letter that passes the filters"},
					&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"},
				),
				Action: func(c *cli.Context) error {
					f, err := parseSelection(c, "purge")
					if err != nil {
						return err
					}
					ctx, js, done, err := openNATS(c, time.Hour)
					if err != nil {
						return err
					}
					defer done()
					st, err := dlq.Open(ctx, js)
					if err != nil {
						return err
					}
					ls, err := st.List(ctx, f, 0)
					if err != nil {
						return err
					}
					if len(ls) == 0 {
						fmt.Fprintln(c.App.Writer, "no dead letters match; nothing was deleted")
						return nil
					}
					if !c.Bool("yes") {
						if !isTerminal(c.App.Writer) || c.App.Reader != os.Stdin {
							return usagef("purge deletes %d dead letters for good: add --yes to confirm", len(ls))
						}
						fmt.Fprintf(c.App.Writer, "delete %d dead letters for good? [y/N] ", len(ls))
						answer, _ := bufio.NewReader(c.App.Reader).ReadString('\n')
						if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
							return errors.New("not confirmed; nothing was deleted")
						}
					}
					for i, l := range ls {
						if err := st.Delete(ctx, l.Seq); err != nil {
							return fmt.Errorf("%w (deleted %d of %d before this)", err, i, len(ls))
						}
					}
					fmt.Fprintf(c.App.Writer, "purged %d dead letters\n", len(ls))
					return nil
				},
			},
		},
	}
}

// filterFlags select dead letters (list, replay, purge).
func filterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dest", Usage: "only this destination's"},
		&cli.StringFlag{Name: "reason", Usage: "only this reason (" + strings.Join(relay.Reasons(), ", ") + ")"},
		&cli.StringFlag{Name: "status", Usage: "only this last HTTP status, or 'none' for no response"},
		&cli.StringFlag{Name: "since", Usage: "only those that died at or after this time (RFC 3339, or a duration ago like 2h)"},
		&cli.StringFlag{Name: "until", Usage: "only those that died before this time (RFC 3339, or a duration ago)"},
	}
}

func parseFilter(c *cli.Context) (dlq.Filter, error) {
	f := dlq.Filter{Dest: c.String("dest"), Reason: c.String("reason")}
	if f.Reason != "" && !slices.Contains(relay.Reasons(), f.Reason) {
		return f, usagef("--reason %q: use one of %s", f.Reason, strings.Join(relay.Reasons(), ", "))
	}
	if s := c.String("status"); s != "" {
		if s == "none" {
			f.Status = -1
		} else {
			n, err := strconv.Atoi(s)
			if err != nil || n < 100 || n > 599 {
				return f, usagef("--status %q: give an HTTP status (100-599) or 'none'", s)
			}
			f.Status = n
		}
	}
	var err error
	if f.Since, err = parseWhen(c, "since"); err != nil {
		return f, err
	}
	if f.Until, err = parseWhen(c, "until"); err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, usagef("--until must be after --since")
	}
	return f, nil
}

// parseSelection reads what replay or purge (verb) acts on: --seq, the
// filters, or --all, and refuses a call that names none of them.
func parseSelection(c *cli.Context, verb string) (dlq.Filter, error) {
	f, err := parseFilter(c)
	if err != nil {
		return f, err
	}
	f.Seqs = c.Uint64Slice("seq")
	filtered := f.Dest != "" || f.Reason != "" || f.Status != 0 || !f.Since.IsZero() || !f.Until.IsZero()
	if len(f.Seqs) == 0 && !c.Bool("all") && !filtered {
		return f, usagef("say what to %s: --seq N (repeatable), filters such as --dest, or --all", verb)
	}
	if len(f.Seqs) > 0 && c.Bool("all") {
		return f, usagef("--seq and --all exclude each other")
	}
	return f, nil
}

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(c *cli.Context, flag string) (time.Time, error) {
	v := c.String(flag)
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, usagef("--%s %q: give an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (90m, 2h)", flag, v)
}

// parseRate reads "N" or "N/s" and returns the interval between items.
func parseRate(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseFloat(strings.TrimSuffix(v, "/s"), 64)
	if err != nil || n <= 0 || n > 1e6 {
		return 0, usagef("--rate %q: give a number per second, e.g. 50 or 50/s", v)
	}
	return time.Duration(float64(time.Second) / n), nil
}

func statusText(l dlq.Letter) string {
	if l.LastStatus == 0 {
		if l.LastError != "" {
			return "error"
		}
		return "-"
	}
	return strconv.Itoa(l.LastStatus)
}

// notReplayable says why l can never be replayed ("" if it can).
func notReplayable(l dlq.Letter) string {
	switch {
	case l.Malformed != "":
		return "malformed: " + oneLine(l.Malformed)
	case l.Reason == dlq.ReasonCorruptParkedEntry:
		return "a parked entry relay could not use (" + oneLine(l.LastError) + ")"
	}
	return ""
}

// printable escapes what a terminal would act on rather than show: control
// characters (C0 but, with multiline, newline and tab; DEL; C1) and the
// bidirectional overrides, as \xNN or \uNNNN. The --json output is exact
// instead.
func printable(s string, multiline bool) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case multiline && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		case r >= 0x80 && r <= 0x9f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// oneLine is s made printable on one line.
func oneLine(s string) string { return printable(s, false) }

func showLetter(c *cli.Context, l dlq.Letter, missing error) error {
	w := c.App.Writer
	if c.Bool("json") {
		type out struct {
			dlq.Letter
			Body       json.RawMessage `json:"body,omitempty"`
			BodyBase64 string          `json:"body_base64,omitempty"`
		}
		// A JSON body as JSON; text as a string, and as base64 too (the
		// exact bytes); anything else as base64 only.
		o := out{Letter: l}
		switch {
		case json.Valid(l.Body):
			o.Body = l.Body
		case utf8.Valid(l.Body):
			o.Body, _ = json.Marshal(string(l.Body))
			o.BodyBase64 = base64.StdEncoding.EncodeToString(l.Body)
		default:
			o.BodyBase64 = base64.StdEncoding.EncodeToString(l.Body)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(o)
	}
	fmt.Fprintf(w, "dead letter %d\n", l.Seq)
	if l.Malformed != "" {
		fmt.Fprintf(w, "  malformed:     %s\n", oneLine(l.Malformed))
		fmt.Fprintf(w, "  stored on:     %s at %s\n", oneLine(l.Subject), l.DeadAt.Format(time.RFC3339Nano))
	} else {
		fmt.Fprintf(w, "  destination:   %s\n", oneLine(l.Dest))
		fmt.Fprintf(w, "  event id:      %s\n", oneLine(l.EventID))
		fmt.Fprintf(w, "  reason:        %s\n", oneLine(l.Reason))
	}
	if l.Note != "" {
		fmt.Fprintf(w, "  note:          %s\n", oneLine(l.Note))
	}
	if l.Malformed != "" {
		return showBody(w, l.Headers, l.Body)
	}
	fmt.Fprintf(w, "  attempts:      %d\n", l.Attempts)
	fmt.Fprintf(w, "  last status:   %s\n", statusText(l))
	if l.LastError != "" {
		fmt.Fprintf(w, "  last error:    %s\n", oneLine(l.LastError))
	}
	if !l.First.IsZero() {
		fmt.Fprintf(w, "  first attempt: %s\n", l.First.Format(time.RFC3339Nano))
		fmt.Fprintf(w, "  last attempt:  %s\n", l.Last.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "  dead at:       %s\n", l.DeadAt.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  original:      %s seq %d\n", oneLine(l.Subject), l.StreamSeq)
	if l.EventOmitted {
		fmt.Fprintln(w, "  event:         too large to copy into the dead letter: read from the event log at that sequence")
	}
	if len(l.History) > 0 {
		fmt.Fprintln(w, "history:")
		for _, a := range l.History {
			res := strconv.Itoa(a.Status)
			if a.Status == 0 {
				res = "no response"
			}
			if a.Error != "" {
				res += ": " + oneLine(a.Error)
			}
			fmt.Fprintf(w, "  #%d  %s  %8s  %s\n", a.N, a.At.Format(time.RFC3339Nano), a.Duration.Round(time.Microsecond), res)
		}
		if l.HistoryOmitted > 0 {
			fmt.Fprintf(w, "  (%d attempts between the first and the latest left out to fit)\n", l.HistoryOmitted)
		}
	}
	if missing != nil {
		fmt.Fprintf(w, "body:\n  (not available: %s)\n", oneLine(missing.Error()))
		return nil
	}
	return showBody(w, l.Headers, l.Body)
}

// showBody prints an event's headers and body, escaped for a terminal.
func showBody(w io.Writer, h nats.Header, body []byte) error {
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(w, "  header:        %s: %s\n", oneLine(k), oneLine(v))
		}
	}
	fmt.Fprintln(w, "body:")
	switch {
	case json.Valid(body):
		var v any
		_ = json.Unmarshal(body, &v)
		b, _ := json.MarshalIndent(v, "  ", "  ")
		fmt.Fprintf(w, "  %s\n", printable(string(b), true))
	case utf8.Valid(body):
		fmt.Fprintf(w, "  %s\n", printable(string(body), true))
	default:
		fmt.Fprintf(w, "  (base64) %s\n", base64.StdEncoding.EncodeToString(body))
	}
	return nil
}
