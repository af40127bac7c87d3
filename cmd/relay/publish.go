package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/relay"
)

func publishCommand() *cli.Command {
	return &cli.Command{
		Name:      "publish",
		Usage:     "publish an event for a destination",
		ArgsUsage: "[-]  (read the body from standard input)",
		Description: `Publishes one event and prints its id and stream sequence once JetStream
has stored it. The body comes from --data, --file, or standard input ("-").
Publishing the same --id again within the duplicate window stores nothing new.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Aliases: []string{"d"}, Usage: "destination name (required)"},
			&cli.StringFlag{Name: "key", Aliases: []string{"k"}, Usage: "order key (any string)"},
			&cli.StringFlag{Name: "id", Usage: "event id (default: a new unique id)"},
			&cli.StringSliceFlag{Name: "header", Aliases: []string{"H"}, Usage: "NAME=VALUE passed on to the destination (repeatable)"},
			&cli.StringFlag{Name: "data", Usage: "the body"},
			&cli.StringFlag{Name: "file", Usage: "read the body from this file", TakesFile: true},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			if err := required(c, "dest"); err != nil {
				return err
			}
			body, err := readBody(c)
			if err != nil {
				return err
			}
			hdrs, err := parseKV("header", c.StringSlice("header"))
			if err != nil {
				return err
			}
			// A header that cannot be sent is a usage error, like a
			// malformed one.
			for k, v := range hdrs {
				if err := relay.ValidateEventHeader(k, v); err != nil {
					return usagef("-H %s: %v", k, err)
				}
			}
			ctx, js, done, err := openNATS(c, 30*time.Second)
			if err != nil {
				return err
			}
			defer done()
			p, err := relay.NewProducer(ctx, js)
			if err != nil {
				return err
			}
			res, err := p.Publish(ctx, relay.Event{Dest: c.String("dest"), Key: c.String("key"), ID: c.String("id"), Headers: hdrs, Data: body})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(res)
			}
			dup := ""
			if res.Duplicate {
				dup = " (duplicate: already published, nothing new stored)"
			}
			fmt.Fprintf(c.App.Writer, "published %s to %s seq %d%s\n", res.ID, res.Stream, res.Seq, dup)
			return nil
		},
	}
}

func readBody(c *cli.Context) ([]byte, error) {
	n := 0
	for _, set := range []bool{c.IsSet("data"), c.IsSet("file"), c.Args().First() == "-"} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, usagef("give the body exactly once: --data JSON, --file PATH, or - for standard input")
	}
	if c.NArg() > 1 || (c.NArg() == 1 && c.Args().First() != "-") {
		return nil, usagef("unexpected arguments %v", c.Args().Slice())
	}
	switch {
	case c.IsSet("data"):
		return []byte(c.String("data")), nil
	case c.IsSet("file"):
		b, err := os.ReadFile(c.String("file"))
		if err != nil {
			return nil, fmt.Errorf("read --file: %w", err)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(c.App.Reader, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	return b, nil
}
