package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/relay"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "deliver events again from the event log, delivered or not",
		Description: `Republishes every event published for --dest between --since and --until
(default now), whether it was delivered or not: for a receiver that lost its
data, or with --to-dest to backfill a new destination. Events keep their ids,
so receivers can deduplicate. The event log keeps events for relay run's
--event-retention (7 days by default); older ones cannot be replayed.
Re-running an interrupted replay within the duplicate window publishes nothing
twice.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Usage: "destination whose events to replay (required)"},
			&cli.StringFlag{Name: "since", Usage: "published at or after this time: RFC 3339, or a duration ago like 2h (required)"},
			&cli.StringFlag{Name: "until", Usage: "published before this time (default now)"},
			&cli.StringFlag{Name: "key", Usage: "only events with this order key"},
			&cli.StringFlag{Name: "to-dest", Usage: "deliver them to this destination instead"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be replayed; change nothing"},
			&cli.StringFlag{Name: "rate", Usage: "at most N per second (e.g. 100 or 100/s)"},
		},
		Action: func(c *cli.Context) error {
			if err := required(c, "dest", "since"); err != nil {
				return err
			}
			since, err := parseWhen(c, "since")
			if err != nil {
				return err
			}
			until, err := parseWhen(c, "until")
			if err != nil {
				return err
			}
			if !until.IsZero() && !until.After(since) {
				return usagef("--until must be after --since")
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
			w := c.App.Writer
			dry := c.Bool("dry-run")
			var tick *time.Ticker
			if interval > 0 && !dry {
				tick = time.NewTicker(interval)
				defer tick.Stop()
			}
			prog := newProgress(w, 0)
			n, err := relay.ReplayLog(ctx, js, relay.LogReplay{
				Dest: c.String("dest"), ToDest: c.String("to-dest"), Key: c.String("key"), Since: since, Until: until,
			}, dry, func(ev relay.ReplayedEvent) error {
				switch {
				case dry:
					fmt.Fprintf(w, "would replay event %s (log seq %d)\n", ev.ID, ev.Seq)
				case ev.Duplicate:
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
				return fmt.Errorf("%w (after %d events; re-running is safe)", err, n)
			}
			if dry {
				fmt.Fprintf(w, "dry run: %d events would be replayed; nothing was changed\n", n)
				return nil
			}
			fmt.Fprintf(w, "replayed %d events\n", n)
			return nil
		},
	}
}
