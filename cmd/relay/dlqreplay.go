package main

import (
	"context"
	"errors"
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
		ds, err := cl.dests(ctx)
		if err != nil {
			return err
		}
		if _, err := ds.Get(ctx, to); err != nil {
			return fmt.Errorf("--to-dest: %w", err)
		}
	}
	w := e.out
	opts := dlq.ReplayOptions{ToDest: to, DryRun: o.dryRun, Interval: o.interval}
	if o.dryRun {
		n := 0
		err := st.ReplayEach(ctx, o.filter, opts, func(_, _ int, s dlq.ReplayStep) error {
			l := s.Letter
			if s.Skipped != "" {
				fmt.Fprintf(w, "would skip dead letter %d: %s\n", l.Seq, oneLine(s.Skipped))
				return nil
			}
			n++
			fmt.Fprintf(w, "would replay dead letter %d (event %s, %s) to %s\n", l.Seq, oneLine(l.EventID), oneLine(l.Reason), s.Dest)
			return nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "dry run: %d dead letters would be replayed; nothing was changed\n", n)
		return nil
	}
	var prog *progress
	n, dups, total := 0, 0, 0
	var skipped []string
	err = st.ReplayEach(ctx, o.filter, opts, func(_, all int, s dlq.ReplayStep) error {
		l := s.Letter
		if prog == nil {
			prog, total = newProgress(w, all), all
		}
		switch {
		case s.Skipped != "":
			// It can never be replayed: say so, and go on with the others.
			skipped = append(skipped, strconv.FormatUint(l.Seq, 10))
			prog.step(fmt.Sprintf("skipped dead letter %d: %s", l.Seq, oneLine(s.Skipped)))
			return nil
		case s.Err != nil:
			return fmt.Errorf("%w (replayed %d of %d before this; re-running is safe)", s.Err, n, all)
		}
		n++
		note := ""
		if s.Ack.Duplicate {
			dups++
			note = " (already replayed before: not published again)"
		}
		prog.step(fmt.Sprintf("replayed dead letter %d (event %s) to %s as event seq %d%s", l.Seq, oneLine(l.EventID), s.Dest, s.Ack.Sequence, note))
		return nil
	})
	if prog != nil {
		prog.end()
	}
	if errors.Is(err, dlq.ErrInterrupted) {
		return fmt.Errorf("interrupted after %d of %d; re-running is safe", n, total)
	}
	if err != nil {
		return err
	}
	if n == dups {
		// Nothing published: nothing to tell.
	} else if err := relay.PublishOpEvent(ctx, cl.js, relay.OpEvent{Type: relay.OpReplayFinished, ID: relay.NewReplayID(), Data: relay.ReplayFinished{
		At: time.Now().UTC(), By: "relay dlq replay", Dest: o.filter.Dest, ToDest: opts.ToDest, Matched: total, Replayed: n, Duplicates: dups, Skipped: len(skipped)}}); err != nil {
		fmt.Fprintf(e.errOut, "warning: cannot publish relay.replay.finished: %v\n", err)
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
