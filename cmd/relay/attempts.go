package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/deliverylog"
)

func attemptsCommand() *cli.Command {
	return &cli.Command{
		Name:  "attempts",
		Usage: "search the delivery log: every attempt, newest first",
		Description: `Every attempt relay makes is recorded in the delivery log (stream RELAY_LOG),
successes included, with the status, the duration, the URL (redacted) and the start
of the response; so are events a destination's filter turned down and events
dead-lettered without an attempt. The log keeps records for --attempt-retention
(relay run), up to --attempt-max-bytes.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Usage: "only this destination's"},
			tenantFlag(),
			&cli.StringFlag{Name: "event", Usage: "only this event's (its id)"},
			&cli.StringFlag{Name: "status", Usage: "only this status code (503) or class (2xx, 3xx, 4xx, 5xx, error: no response, none: no attempt)"},
			&cli.StringFlag{Name: "since", Usage: "only those recorded at or after this time (RFC 3339, or a duration ago like 1h)"},
			&cli.StringFlag{Name: "until", Usage: "only those recorded before this time (RFC 3339, or a duration ago)"},
			&cli.IntFlag{Name: "limit", Value: 100, Usage: fmt.Sprintf("at most this many (1 to %d)", deliverylog.MaxAttemptLimit)},
			&cli.Uint64Flag{Name: "before", Usage: "only those older than this record (a seq from an earlier listing: the next page)"},
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
		},
		Action: action(readAttempts),
	}
}

func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "look up events in the delivery log",
		Subcommands: []*cli.Command{{
			Name:      "show",
			Usage:     "show an event and, for every destination it went to, its state and attempts",
			ArgsUsage: "ID",
			Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "as JSON"}},
			Action:    action(readEventShow),
		}},
	}
}

// attemptsOpts are the options of 'relay attempts'.
type attemptsOpts struct {
	cmdLine
	dest, event, status, since, until string
	limit                             int
	before                            uint64
	json                              bool

	q deliverylog.AttemptQuery // Validate
}

func readAttempts(c *cli.Context) *attemptsOpts {
	return &attemptsOpts{cmdLine: readCmdLine(c), dest: c.String("dest"), event: c.String("event"), status: c.String("status"),
		since: c.String("since"), until: c.String("until"), limit: c.Int("limit"), before: c.Uint64("before"), json: c.Bool("json")}
}

func (o *attemptsOpts) Validate() error {
	if err := o.noArgs("relay attempts takes no arguments: filter with --dest, --event, --status, --since, --until"); err != nil {
		return err
	}
	if o.limit < 1 {
		return usagef("--limit %d: give 1 to %d", o.limit, deliverylog.MaxAttemptLimit)
	}
	o.q = deliverylog.AttemptQuery{Scoped: o.tenant != "", Tenant: o.tenant, EventID: o.event, Status: o.status, Limit: o.limit, Before: o.before}
	var err error
	if o.dest != "" {
		if o.q.Dest, err = o.destRef("--dest", o.dest); err != nil {
			return err
		}
	}
	if o.q.Since, err = parseWhen("since", o.since); err != nil {
		return err
	}
	if o.q.Until, err = parseWhen("until", o.until); err != nil {
		return err
	}
	if err := o.q.Validate(); err != nil {
		var qe *deliverylog.QueryError
		if errors.As(err, &qe) {
			return usagef("--%s: %v", qe.Field, qe.Err)
		}
		return usagef("%v", err)
	}
	return nil
}

func (o *attemptsOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, err := e.dial(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	page, err := deliverylog.ReadAttempts(ctx, cl.js, o.q)
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(e.out)
		enc.SetEscapeHTML(false)
		for _, a := range page.Attempts {
			if err := enc.Encode(a); err != nil {
				return err
			}
		}
	} else {
		printAttempts(e.out, page.Attempts, true)
	}
	if page.Next != 0 {
		fmt.Fprintf(e.errOut, "more: relay attempts --before %d (with the same filters)\n", page.Next)
	}
	return nil
}

// printAttempts prints records as a table; withEvent adds the event id.
func printAttempts(w io.Writer, recs []deliverylog.AttemptRecord, withEvent bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if withEvent {
		fmt.Fprintln(tw, "SEQ\tAT\tDEST\tEVENT\tATTEMPT\tSTATUS\tDURATION\tOUTCOME\tDETAIL")
	} else {
		fmt.Fprintln(tw, "AT\tATTEMPT\tSTATUS\tDURATION\tOUTCOME\tDETAIL")
	}
	for _, a := range recs {
		status := a.Class
		if a.Status != 0 {
			status = strconv.Itoa(a.Status)
		}
		dur := "-"
		if a.Attempt > 0 {
			dur = (time.Duration(a.DurationMS*1000) * time.Microsecond).Round(time.Microsecond * 100).String()
		}
		detail := a.Reason
		switch {
		case a.Error != "":
			detail = a.Error
		case a.ResponseBody != "":
			detail = a.ResponseBody
		}
		if a.RetryInMS > 0 {
			detail = fmt.Sprintf("retry in %s; %s", time.Duration(a.RetryInMS)*time.Millisecond, detail)
		}
		if len(detail) > 80 {
			detail = detail[:80] + "..."
		}
		at := a.At.Local().Format(time.DateTime + ".000")
		if withEvent {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", a.Seq, at, oneLine(a.Dest), oneLine(a.EventID), a.Attempt, status, dur, a.Outcome, oneLine(detail))
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", at, a.Attempt, status, dur, a.Outcome, oneLine(detail))
		}
	}
	_ = tw.Flush()
}

// eventShowOpts are the options of 'relay events show'.
type eventShowOpts struct {
	cmdLine
	json bool
	id   string // Validate
}

func readEventShow(c *cli.Context) *eventShowOpts {
	return &eventShowOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *eventShowOpts) Validate() error {
	id, err := o.oneArg("ID")
	o.id = id
	return err
}

func (o *eventShowOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, err := e.dial(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	v, err := deliverylog.LookupEvent(ctx, cl.js, o.id)
	if errors.Is(err, deliverylog.ErrEventNotFound) {
		return fmt.Errorf("event %q: %w (not attempted yet, or recorded longer ago than the log keeps; see 'relay attempts')", o.id, err)
	}
	if err != nil {
		return err
	}
	if o.json {
		return writeEventJSON(e.out, v)
	}
	w := e.out
	fmt.Fprintf(w, "event:   %s\n", oneLine(v.ID))
	if v.Type != "" {
		fmt.Fprintf(w, "type:    %s\n", oneLine(v.Type))
	}
	if v.Key != "" {
		fmt.Fprintf(w, "key:     %s\n", oneLine(v.Key))
	}
	if v.RoutedTo != nil {
		fmt.Fprintf(w, "routed:  %d destinations\n", len(v.RoutedTo))
	}
	for k, vs := range v.Headers {
		for _, hv := range vs {
			fmt.Fprintf(w, "header:  %s: %s\n", oneLine(k), oneLine(hv))
		}
	}
	switch {
	case !v.Stored:
		fmt.Fprintln(w, "body:    (no longer in the events stream: older than its retention)")
	case utf8.Valid(v.Body):
		fmt.Fprintf(w, "body:    %s\n", printable(string(v.Body), true))
	default:
		fmt.Fprintf(w, "body:    (binary, %d bytes, base64) %s\n", len(v.Body), base64.StdEncoding.EncodeToString(v.Body))
	}
	for _, d := range v.Destinations {
		fmt.Fprintf(w, "\n%s: %s\n", oneLine(d.Dest), d.State)
		if len(d.Attempts) > 0 {
			printAttempts(w, d.Attempts, false)
		}
	}
	return nil
}

// writeEventJSON writes v, indented (relay.EventView.MarshalJSON says how
// its body is written).
func writeEventJSON(w io.Writer, v deliverylog.EventView) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
