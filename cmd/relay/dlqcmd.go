package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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
				Action: action(readDLQList),
			},
			{
				Name:      "show",
				Usage:     "show one dead letter: headers, failure history and body",
				ArgsUsage: "SEQ",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "as JSON"}},
				Action:    action(readDLQShow),
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
					otelFlag(),
				),
				Action: action(readDLQReplay),
			},
			{
				Name:  "purge",
				Usage: "delete dead letters for good",
				Flags: append(filterFlags(),
					&cli.Uint64SliceFlag{Name: "seq", Usage: "dead-letter sequence (repeatable)"},
					&cli.BoolFlag{Name: "all", Usage: "delete every dead letter that passes the filters"},
					&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"},
				),
				Action: action(readDLQPurge),
			},
		},
	}
}

// filterFlags select dead letters (list, replay, purge).
func filterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dest", Usage: "only this destination's"},
		tenantFlag(),
		&cli.StringFlag{Name: "reason", Usage: "only this reason (" + strings.Join(relay.Reasons(), ", ") + ")"},
		&cli.StringFlag{Name: "status", Usage: "only this last HTTP status, or 'none' for no response"},
		&cli.StringFlag{Name: "since", Usage: "only those that died at or after this time (RFC 3339, or a duration ago like 2h)"},
		&cli.StringFlag{Name: "until", Usage: "only those that died before this time (RFC 3339, or a duration ago)"},
	}
}

// filterOpts are the filterFlags.
type filterOpts struct {
	dest, reason, status, since, until string
	cmdLine

	filter dlq.Filter // Validate
}

func readFilter(c *cli.Context) filterOpts {
	return filterOpts{dest: c.String("dest"), reason: c.String("reason"), status: c.String("status"), since: c.String("since"), until: c.String("until"), cmdLine: readCmdLine(c)}
}

func (o *filterOpts) Validate() error {
	if len(o.args) > 0 {
		// 'dlq purge 17 --all' must not purge everything.
		return usagef("unexpected argument %q: 'relay %s' selects dead letters with flags (--seq N, --dest, --reason, ...; see 'relay %s --help')", o.args[0], o.path, o.path)
	}
	f := dlq.Filter{Scoped: o.tenant != "", Tenant: o.tenant, Reason: o.reason}
	if o.dest != "" {
		var err error
		if f.Dest, err = o.destRef("--dest", o.dest); err != nil {
			return err
		}
	} else if o.tenant != "" {
		if _, err := o.destRef("--tenant", ""); err != nil {
			return err
		}
	}
	if f.Reason != "" && !slices.Contains(relay.Reasons(), f.Reason) {
		return usagef("--reason %q: use one of %s", f.Reason, strings.Join(relay.Reasons(), ", "))
	}
	if s := o.status; s != "" {
		if s == "none" {
			f.Status = -1
		} else {
			n, err := strconv.Atoi(s)
			if err != nil || n < 100 || n > 599 {
				return usagef("--status %q: give an HTTP status (100-599) or 'none'", s)
			}
			f.Status = n
		}
	}
	var err error
	if f.Since, err = parseWhen("since", o.since); err != nil {
		return err
	}
	if f.Until, err = parseWhen("until", o.until); err != nil {
		return err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return usagef("--until must be after --since")
	}
	o.filter = f
	return nil
}

// selectionOpts are what replay or purge (verb) act on: --seq, the
// filters, or --all.
type selectionOpts struct {
	filterOpts
	verb string
	seqs []uint64
	all  bool
}

func readSelection(c *cli.Context, verb string) selectionOpts {
	return selectionOpts{filterOpts: readFilter(c), verb: verb, seqs: c.Uint64Slice("seq"), all: c.Bool("all")}
}

// Validate refuses a call that names none of --seq, the filters or --all.
func (o *selectionOpts) Validate() error {
	if err := o.filterOpts.Validate(); err != nil {
		return err
	}
	f := &o.filter
	f.Seqs = o.seqs
	filtered := f.Dest != "" || f.Reason != "" || f.Status != 0 || !f.Since.IsZero() || !f.Until.IsZero()
	if len(f.Seqs) == 0 && !o.all && !filtered {
		return usagef("say what to %s: --seq N (repeatable), filters such as --dest, or --all", o.verb)
	}
	if len(f.Seqs) > 0 && o.all {
		return usagef("--seq and --all exclude each other")
	}
	return nil
}

// parseWhen reads the value v of --flag: an RFC 3339 time or a duration
// before now.
func parseWhen(flag, v string) (time.Time, error) {
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
	if err != nil || math.IsNaN(n) || n < 0.001 || n > 1e6 {
		return 0, usagef("--rate %q: give a number per second from 0.001 to 1000000, e.g. 50 or 50/s", v)
	}
	return time.Duration(float64(time.Second) / n), nil
}

// dlqListOpts are the options of 'relay dlq list'.
type dlqListOpts struct {
	filterOpts
	limit int
	json  bool
	wait  time.Duration
}

func readDLQList(c *cli.Context) *dlqListOpts {
	return &dlqListOpts{filterOpts: readFilter(c), limit: c.Int("limit"), json: c.Bool("json"), wait: c.Duration("wait")}
}

func (o *dlqListOpts) Validate() error {
	if err := o.filterOpts.Validate(); err != nil {
		return err
	}
	if o.wait < 0 {
		return usagef("--wait %s: give 0 or more", o.wait)
	}
	return nil
}

func (o *dlqListOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDeadLetters(ctx, 5*time.Minute+o.wait)
	if err != nil {
		return err
	}
	defer cl.close()
	ls, err := listWaiting(ctx, st, o.filter, o.limit, o.wait)
	if err != nil {
		return err
	}
	if o.json {
		return jsonLines(e.out, ls, func(l dlq.Letter) any {
			l.History, l.Headers = nil, nil
			return l
		})
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAGE\tDEST\tEVENT ID\tATTEMPTS\tLAST STATUS\tREASON")
	for _, l := range ls {
		if l.Malformed != "" {
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\tmalformed: %s\n", l.Seq, time.Since(l.DeadAt).Round(time.Second), oneLine(l.Dest), oneLine(l.Malformed))
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", l.Seq, time.Since(l.DeadAt).Round(time.Second), oneLine(l.Dest), oneLine(l.EventID), l.Attempts, statusText(l), oneLine(l.Reason))
	}
	return tw.Flush()
}

// dlqPurgeOpts are the options of 'relay dlq purge'.
type dlqPurgeOpts struct {
	selectionOpts
	yes bool
}

func readDLQPurge(c *cli.Context) *dlqPurgeOpts {
	return &dlqPurgeOpts{selectionOpts: readSelection(c, "purge"), yes: c.Bool("yes")}
}

func (o *dlqPurgeOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDeadLetters(ctx, time.Hour)
	if err != nil {
		return err
	}
	defer cl.close()
	ls, err := st.Summaries(ctx, o.filter, 0)
	if err != nil {
		return err
	}
	if len(ls) == 0 {
		fmt.Fprintln(e.out, "no dead letters match; nothing was deleted")
		return nil
	}
	if !o.yes {
		if !isTerminal(e.out) || e.in != os.Stdin {
			return usagef("purge deletes %d dead letters for good: add --yes to confirm", len(ls))
		}
		fmt.Fprintf(e.out, "delete %d dead letters for good? [y/N] ", len(ls))
		answer, _ := bufio.NewReader(e.in).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return errors.New("not confirmed; nothing was deleted")
		}
	}
	if _, err := st.DeleteAll(ctx, ls); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "purged %d dead letters\n", len(ls))
	return nil
}
