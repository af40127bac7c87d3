package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
)

func publishCommand() *cli.Command {
	return &cli.Command{
		Name:      "publish",
		Usage:     "publish an event for a destination, or by its type",
		ArgsUsage: "[-]  (read the body from standard input)",
		Description: `Publishes one event and prints its id and stream sequence once JetStream
has stored it. The event goes to one destination (--dest), or by its type
(--type) to every destination subscribed to it. The body comes from --data,
--file, or standard input ("-").
Publishing the same --id again to the same --dest or --type within the
duplicate window stores nothing new; with another body, key or headers it is
refused (an id conflict) and stores nothing.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Aliases: []string{"d"}, Usage: "destination name (this or --type)"},
			&cli.StringFlag{Name: "type", Aliases: []string{"t"}, Usage: "event type, such as order.created: delivered to every destination subscribed to it (this or --dest)"},
			&cli.StringFlag{Name: "key", Aliases: []string{"k"}, Usage: "order key (up to 256 bytes, no control characters)"},
			&cli.StringFlag{Name: "id", Usage: "event id (default: a new unique id)"},
			&cli.GenericFlag{Name: "header", Aliases: []string{"H"}, Value: &listValue{}, Usage: "NAME=VALUE passed on to the destination (repeatable; a value may hold commas)"},
			&cli.StringFlag{Name: "data", Usage: "the body"},
			&cli.StringFlag{Name: "file", Usage: "read the body from this file", TakesFile: true},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.StringFlag{Name: "tenant", Usage: "the tenant the event is for: --dest is its destination, --type goes to its destinations subscribed (default: no tenant's)"},
			otelFlag(),
		},
		Action: action(readPublish),
	}
}

// publishOpts are the options of 'relay publish'.
type publishOpts struct {
	cmdLine
	dest, typ  *string
	key, id    string
	header     []string
	data, file *string
	json       bool
	tracing    tracingOpts

	headers map[string]string // Validate: --header parsed
}

func readPublish(c *cli.Context) *publishOpts {
	return &publishOpts{cmdLine: readCmdLine(c), dest: setOnly(c, "dest", c.String), typ: setOnly(c, "type", c.String), key: c.String("key"), id: c.String("id"),
		header: headersGiven(c), data: setOnly(c, "data", c.String), file: setOnly(c, "file", c.String), json: c.Bool("json"), tracing: readTracing(c)}
}

// stdin reports whether the body comes from standard input ("-").
func (o *publishOpts) stdin() bool { return len(o.args) > 0 && o.args[0] == "-" }

func (o *publishOpts) Validate() error {
	if err := o.tracing.Validate(); err != nil {
		return err
	}
	if o.tenant != "" {
		if err := stream.ValidateTenantID(o.tenant); err != nil {
			return usagef("--tenant: %v", err)
		}
	}
	switch {
	case o.dest != nil && o.typ != nil:
		return usagef("give --dest or --type, not both")
	case o.dest == nil && o.typ == nil:
		return usagef("missing --dest or --type: the destination of the event, or its type")
	case o.typ != nil:
		if err := stream.ValidateEventType(*o.typ); err != nil {
			return usagef("--type: %v", err)
		}
	}
	if err := publish.ValidateOrderKey(o.key); err != nil {
		return usagef("--key: %v", err)
	}
	if o.id != "" {
		if err := publish.ValidateEventID(o.id); err != nil {
			return usagef("--id: %v", err)
		}
	}
	n := 0
	for _, set := range []bool{o.data != nil, o.file != nil, o.stdin()} {
		if set {
			n++
		}
	}
	if n != 1 {
		return usagef("give the body exactly once: --data JSON, --file PATH, or - for standard input")
	}
	if len(o.args) > 1 || (len(o.args) == 1 && !o.stdin()) {
		return usagef("unexpected arguments %v", o.args)
	}
	hdrs, err := parseKV("header", o.header)
	if err != nil {
		return err
	}
	// A header that cannot be sent is a usage error, like a malformed one.
	for k, v := range hdrs {
		if err := destination.ValidateEventHeader(k, v); err != nil {
			return usagef("-H %s: %v", k, err)
		}
	}
	o.headers = hdrs
	return nil
}

// body reads the body from --data, --file or standard input.
func (o *publishOpts) body(stdin io.Reader) ([]byte, error) {
	switch {
	case o.data != nil:
		return []byte(*o.data), nil
	case o.file != nil:
		b, err := os.ReadFile(*o.file)
		if err != nil {
			return nil, fmt.Errorf("read --file: %w", err)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	return b, nil
}

func (o *publishOpts) Run(ctx context.Context, e *env) error {
	body, err := o.body(e.in)
	if err != nil {
		return err
	}
	ctx, cl, err := e.dial(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	p, err := publish.NewProducer(ctx, cl.js)
	if err != nil {
		return err
	}
	log, err := e.logger()
	if err != nil {
		return err
	}
	tp, stopTracing, err := o.tracing.start(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing() // the publish's span exported before exit
	p.TraceWith(tp)
	ev := publish.Event{Tenant: o.tenant, Key: o.key, ID: o.id, Headers: o.headers, Data: body}
	if o.typ != nil {
		ev.Type = *o.typ
	} else {
		ev.Dest = *o.dest
	}
	res, err := p.Publish(ctx, ev)
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(e.out).Encode(res)
	}
	dup := ""
	if res.Duplicate {
		dup = " (duplicate: already published, nothing new stored)"
	}
	fmt.Fprintf(e.out, "published %s to %s seq %d%s\n", res.ID, res.Stream, res.Seq, dup)
	return nil
}

// headersGiven are the values of --header, none if it was not given.
func headersGiven(c *cli.Context) []string {
	if l := listOf(c, "header"); l != nil {
		return *l
	}
	return nil
}
