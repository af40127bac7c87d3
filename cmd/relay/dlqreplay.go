package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/relay"
)

// dlqReplayOpts are the options of 'relay dlq replay'.
type dlqReplayOpts struct {
	selectionOpts
	toDest  string
	dryRun  bool
	rate    string
	tracing tracingOpts

	interval time.Duration // Validate: between replays (0: no limit)
}

func readDLQReplay(c *cli.Context) *dlqReplayOpts {
	return &dlqReplayOpts{selectionOpts: readSelection(c, "replay"), toDest: c.String("to-dest"), dryRun: c.Bool("dry-run"), rate: c.String("rate"), tracing: readTracing(c)}
}

func (o *dlqReplayOpts) Validate() (err error) {
	if err := o.selectionOpts.Validate(); err != nil {
		return err
	}
	if err := o.tracing.Validate(); err != nil {
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
	if !o.dryRun {
		log, err := e.logger()
		if err != nil {
			return err
		}
		tp, stopTracing, err := o.tracing.start(ctx, log)
		if err != nil {
			return err
		}
		defer stopTracing() // the replays' spans exported before exit
		st = st.WithTracerProvider(tp)
	}
	to := o.toDest
	if to != "" {
		if to, err = o.destRef("--to-dest", to); err != nil {
			return err
		}
		ds, err := cl.dests(ctx)
		if err != nil {
			return err
		}
		if _, err := ds.Get(ctx, to); err != nil {
			return fmt.Errorf("--to-dest: %w", err)
		}
	}
	w := e.out
	var prog *progress
	rep, err := relay.ReplayDeadLetters(ctx, relay.DeadLetterReplay{
		Letters: st, JS: cl.js, By: "relay dlq replay", Filter: o.filter,
		Options:       dlq.ReplayOptions{ToDest: to, DryRun: o.dryRun, Interval: o.interval},
		StopOnFailure: true,
		Step: func(_, all int, s dlq.ReplayStep) {
			l := s.Letter
			if o.dryRun {
				if s.Skipped != "" {
					fmt.Fprintf(w, "would skip dead letter %d: %s\n", l.Seq, oneLine(s.Skipped))
				} else {
					fmt.Fprintf(w, "would replay dead letter %d (event %s, %s) to %s\n", l.Seq, oneLine(l.EventID), oneLine(l.Reason), s.Dest)
				}
				return
			}
			if prog == nil {
				prog = newProgress(w, all)
			}
			switch {
			case s.Skipped != "":
				// It can never be replayed: say so, and go on with the others.
				prog.step(fmt.Sprintf("skipped dead letter %d: %s", l.Seq, oneLine(s.Skipped)))
			case s.Err != nil:
				// ReplayDeadLetters stops, and says how far it came.
			default:
				note := ""
				if s.Ack.Duplicate {
					note = " (already replayed before: not published again)"
				}
				prog.step(fmt.Sprintf("replayed dead letter %d (event %s) to %s as event seq %d%s", l.Seq, oneLine(l.EventID), s.Dest, s.Ack.Sequence, note))
			}
		},
	})
	if prog != nil {
		prog.end()
	}
	if err != nil {
		return err
	}
	if o.dryRun {
		fmt.Fprintf(w, "dry run: %d dead letters would be replayed; nothing was changed\n", rep.Replayed)
		return nil
	}
	if rep.EventErr != nil {
		fmt.Fprintf(e.errOut, "warning: cannot publish relay.replay.finished: %v\n", rep.EventErr)
	}
	n, dups := rep.Replayed, rep.Duplicates
	skipped := make([]string, len(rep.Skipped))
	for i, s := range rep.Skipped {
		skipped[i] = strconv.FormatUint(s.Seq, 10)
	}
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
