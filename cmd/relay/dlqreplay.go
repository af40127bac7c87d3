package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/dlq"
)

// dlqReplayOpts are the options of 'relay dlq replay'.
type dlqReplayOpts struct {
	selectionOpts
	toDest string
	dryRun bool
	rate   string

	interval time.Duration // Validate: between replays (0: no limit)
}

func readDLQReplay(c *cli.Context) *dlqReplayOpts {
	return &dlqReplayOpts{selectionOpts: readSelection(c, "replay"), toDest: c.String("to-dest"), dryRun: c.Bool("dry-run"), rate: c.String("rate")}
}

func (o *dlqReplayOpts) Validate() (err error) {
	if err := o.selectionOpts.Validate(); err != nil {
		return err
	}
	o.interval, err = parseRate(o.rate)
	return err
}

func (o *dlqReplayOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDeadLetters(ctx, 24*time.Hour)
	if err != nil {
		return err
	}
	defer cl.close()
	to := o.toDest
	if to != "" {
		ds, err := cl.dests(ctx)
		if err != nil {
			return err
		}
		if _, err := ds.Get(ctx, to); err != nil {
			return fmt.Errorf("--to-dest: %w", err)
		}
	}
	ls, err := st.List(ctx, o.filter, 0)
	if err != nil {
		return err
	}
	w := e.out
	if o.dryRun {
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
	if o.interval > 0 {
		tick = time.NewTicker(o.interval)
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
