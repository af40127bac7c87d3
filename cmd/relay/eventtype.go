package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/eventtype"
)

func eventTypeCommand() *cli.Command {
	return &cli.Command{
		Name:  "event-type",
		Usage: "manage the catalog of event types: descriptions, examples and the JSON Schemas events must satisfy",
		Subcommands: []*cli.Command{
			{
				Name:      "put",
				Usage:     "create the type, or replace its description, example and schema (an upsert)",
				ArgsUsage: "TYPE",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "description", Usage: "what the event means, for people choosing what to subscribe to"},
					&cli.StringFlag{Name: "example", Usage: "an example event body (JSON), or @FILE to read it from FILE"},
					&cli.StringFlag{Name: "schema", Usage: "the JSON Schema every event of the type must satisfy, or @FILE to read it from FILE (without it events of the type are not checked)"},
					&cli.BoolFlag{Name: "json", Usage: "print the type as JSON"},
				},
				Action: action(readEventTypePut),
			},
			{
				Name:      "get",
				Usage:     "show a type, with its example and schema",
				ArgsUsage: "TYPE",
				Action:    action(readEventTypeGet),
			},
			{
				Name:   "list",
				Usage:  "list the catalog",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
				Action: action(readEventTypeList),
			},
			{
				Name:      "delete",
				Usage:     "remove a type from the catalog: its events are no longer checked",
				ArgsUsage: "TYPE",
				Action:    action(readEventTypeDelete),
			},
		},
	}
}

func (e *env) openEventTypes(ctx context.Context) (context.Context, *client, *eventtype.Store, error) {
	ctx, cl, err := e.dial(ctx, 30*time.Second)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := eventtype.Open(ctx, cl.js, nil)
	if err != nil {
		cl.close()
		return nil, nil, nil, err
	}
	return ctx, cl, s, nil
}

// jsonArg is a flag's JSON, given as it is or as @FILE.
func jsonArg(flag, v string) (json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	b := []byte(v)
	if name, ok := cutAt(v); ok {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			return nil, usagef("--%s: %v", flag, err)
		}
	}
	if !json.Valid(b) {
		return nil, usagef("--%s: not valid JSON", flag)
	}
	return b, nil
}

func cutAt(v string) (string, bool) {
	if len(v) > 1 && v[0] == '@' {
		return v[1:], true
	}
	return "", false
}

// eventTypeUsage makes a type's invalid field a usage error naming its
// flag.
func eventTypeUsage(err error) error {
	var fe *eventtype.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if fe.Field == "type" {
		return usagef("%s", fe.Reason)
	}
	return usagef("--%s: %s", fe.Field, fe.Reason)
}

type eventTypePutOpts struct {
	cmdLine
	description, example, schema string
	json                         bool

	t eventtype.EventType // Validate
}

func readEventTypePut(c *cli.Context) *eventTypePutOpts {
	return &eventTypePutOpts{cmdLine: readCmdLine(c), description: c.String("description"), example: c.String("example"), schema: c.String("schema"), json: c.Bool("json")}
}

func (o *eventTypePutOpts) Validate() (err error) {
	typ, err := o.oneArg("TYPE")
	if err != nil {
		return err
	}
	o.t = eventtype.EventType{Type: typ, Description: o.description}
	if o.t.Example, err = jsonArg("example", o.example); err != nil {
		return err
	}
	if o.t.Schema, err = jsonArg("schema", o.schema); err != nil {
		return err
	}
	return eventTypeUsage(o.t.Validate())
}

func (o *eventTypePutOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openEventTypes(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	t, created, err := s.Put(ctx, o.t)
	if err != nil {
		return eventTypeUsage(err)
	}
	if o.json {
		return jsonLines(e.out, []eventtype.EventType{t}, func(t eventtype.EventType) any { return t })
	}
	verb := "replaced"
	if created {
		verb = "created"
	}
	checked := "its events are not checked (no schema)"
	if len(t.Schema) > 0 {
		checked = "its events are checked against its schema"
	}
	fmt.Fprintf(e.out, "%s event type %s: %s\n", verb, t.Type, checked)
	return nil
}

type eventTypeGetOpts struct {
	cmdLine
	typ string // Validate
}

func readEventTypeGet(c *cli.Context) *eventTypeGetOpts {
	return &eventTypeGetOpts{cmdLine: readCmdLine(c)}
}

func (o *eventTypeGetOpts) Validate() (err error) {
	o.typ, err = o.oneArg("TYPE")
	return err
}

func (o *eventTypeGetOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openEventTypes(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	t, err := s.Get(ctx, o.typ)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(e.out)
	enc.SetIndent("", "  ")
	return enc.Encode(t)
}

type eventTypeListOpts struct {
	cmdLine
	json bool
}

func readEventTypeList(c *cli.Context) *eventTypeListOpts {
	return &eventTypeListOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *eventTypeListOpts) Validate() error {
	return o.noArgs("event-type list takes no arguments")
}

func (o *eventTypeListOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openEventTypes(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return jsonLines(e.out, all, func(t eventtype.EventType) any { return t })
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSCHEMA\tDESCRIPTION")
	for _, t := range all {
		schema := "-"
		if len(t.Schema) > 0 {
			schema = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Type, schema, t.Description)
	}
	return tw.Flush()
}

type eventTypeDeleteOpts struct {
	cmdLine
	typ string // Validate
}

func readEventTypeDelete(c *cli.Context) *eventTypeDeleteOpts {
	return &eventTypeDeleteOpts{cmdLine: readCmdLine(c)}
}

func (o *eventTypeDeleteOpts) Validate() (err error) {
	o.typ, err = o.oneArg("TYPE")
	return err
}

func (o *eventTypeDeleteOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openEventTypes(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	if _, err := s.Delete(ctx, o.typ); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "deleted event type %s: its events are no longer checked\n", o.typ)
	return nil
}
