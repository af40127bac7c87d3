package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/stream"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "deliver events again from the event log, delivered or not",
		Description: `Republishes every event published for --dest between --since and --until
(default now), whether it was delivered or not: for a receiver that lost its
data, or with --to-dest to backfill a new destination. With --type, it
republishes to --dest the typed events of the matching types instead, to
backfill a destination that subscribed to them later. Events keep their ids,
so receivers can deduplicate. The event log keeps events for relay run's
--event-retention (7 days by default); older ones cannot be replayed.
Re-running an interrupted replay within the duplicate window publishes nothing
twice.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Usage: "destination whose events to replay (required)"},
			tenantFlag(),
			&cli.StringFlag{Name: "since", Usage: "published at or after this time: RFC 3339, or a duration ago like 2h (required)"},
			&cli.StringFlag{Name: "until", Usage: "published before this time (default now)"},
			&cli.StringFlag{Name: "key", Usage: "only events with this order key (their Relay-Order-Key header)"},
			&cli.StringFlag{Name: "to-dest", Usage: "deliver them to this destination instead"},
			&cli.StringFlag{Name: "type", Usage: "replay the typed events of the types this pattern matches (such as order.*) to --dest instead"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be replayed; change nothing"},
			&cli.StringFlag{Name: "rate", Usage: "at most N per second (e.g. 100 or 100/s)"},
		},
		Action: action(readReplay),
	}
}

// replayOpts are the options of 'relay replay'.
type replayOpts struct {
	cmdLine
	dest, since        *string
	until, key, toDest string
	typ                string
	dryRun             bool
	rate               string

	from, to time.Time     // Validate: --since and --until
	interval time.Duration // Validate: between replays (0: no limit)
}

func readReplay(c *cli.Context) *replayOpts {
	return &replayOpts{cmdLine: readCmdLine(c), dest: setOnly(c, "dest", c.String), since: setOnly(c, "since", c.String),
		until: c.String("until"), key: c.String("key"), toDest: c.String("to-dest"), typ: c.String("type"), dryRun: c.Bool("dry-run"), rate: c.String("rate")}
}

func (o *replayOpts) Validate() (err error) {
	if o.dest == nil {
		return o.missing("dest")
	}
	if o.since == nil {
		return o.missing("since")
	}
	if o.typ != "" {
		if err := stream.ValidateTypePattern(o.typ); err != nil {
			return usagef("--type: %v", err)
		}
		if o.toDest != "" {
			return usagef("--type replays typed events to --dest: leave out --to-dest")
		}
	}
	if o.from, err = parseWhen("since", *o.since); err != nil {
		return err
	}
	if o.to, err = parseWhen("until", o.until); err != nil {
		return err
	}
	if !o.to.IsZero() && !o.to.After(o.from) {
		return usagef("--until must be after --since")
	}
	// A tenant's destinations, --dest and --to-dest both.
	d, err := o.destRef("--dest", *o.dest)
	if err != nil {
		return err
	}
	o.dest = &d
	if o.toDest != "" {
		if o.toDest, err = o.destRef("--to-dest", o.toDest); err != nil {
			return err
		}
	}
	o.interval, err = parseRate(o.rate)
	return err
}

func (o *replayOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, err := e.dial(ctx, 24*time.Hour)
	if err != nil {
		return err
	}
	defer cl.close()
	w, dry := e.out, o.dryRun
	var tick *time.Ticker
	if o.interval > 0 && !dry {
		tick = time.NewTicker(o.interval)
		defer tick.Stop()
	}
	prog := newProgress(w, 0)
	dups := 0
	var last time.Time // when the last event replayed was stored
	n, err := deliverylog.ReplayLog(ctx, cl.js, deliverylog.LogReplay{
		Dest: *o.dest, ToDest: o.toDest, Key: o.key, Type: o.typ, Since: o.from, Until: o.to,
	}, dry, func(ev deliverylog.ReplayedEvent) error {
		last = ev.Stored
		switch {
		case dry:
			fmt.Fprintf(w, "would replay event %s (log seq %d)\n", ev.ID, ev.Seq)
		case ev.Duplicate:
			dups++
			prog.step(fmt.Sprintf("event %s (log seq %d) was replayed moments ago: not published again", ev.ID, ev.Seq))
		default:
			prog.step(fmt.Sprintf("replayed event %s (log seq %d) as seq %d", ev.ID, ev.Seq, ev.NewSeq))
		}
		if tick != nil {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	prog.end()
	if err != nil {
		if last.IsZero() {
			return fmt.Errorf("%w (after %d events; nothing was replayed, re-running is safe)", err, n)
		}
		// Re-publishes of the same events are dropped only within the
		// events stream's duplicate window (2 minutes by default).
		return fmt.Errorf("%w (after %d events; to go on without replaying them again, re-run with --since %s: a re-run from the start republishes those the duplicate window has forgotten)",
			err, n, last.UTC().Add(time.Nanosecond).Format(time.RFC3339Nano))
	}
	if dry {
		fmt.Fprintf(w, "dry run: %d events would be replayed; nothing was changed\n", n)
		return nil
	}
	if n == dups {
		// Nothing published: nothing to tell.
	} else if err := opevent.Publish(ctx, cl.js, opevent.Event{Type: opevent.ReplayFinished, ID: opevent.NewReplayID(), Data: opevent.ReplayFinishedBody{
		At: time.Now().UTC(), By: "relay replay", Dest: *o.dest, ToDest: o.toDest, Matched: n, Replayed: n - dups, Duplicates: dups}}); err != nil {
		fmt.Fprintf(e.errOut, "warning: cannot publish relay.replay.finished: %v\n", err)
	}
	if dups > 0 {
		fmt.Fprintf(w, "replayed %d events; %d more had been replayed moments ago (the duplicate window) and were dropped\n", n-dups, dups)
		return nil
	}
	fmt.Fprintf(w, "replayed %d events\n", n)
	return nil
}
