package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/dlq"
)

// dlqShowOpts are the options of 'relay dlq show'.
type dlqShowOpts struct {
	cmdLine
	json bool

	seq uint64 // Validate
}

func readDLQShow(c *cli.Context) *dlqShowOpts {
	return &dlqShowOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *dlqShowOpts) Validate() error {
	a, err := o.oneArg("SEQ")
	if err != nil {
		return err
	}
	seq, err := strconv.ParseUint(a, 10, 64)
	if err != nil || seq == 0 {
		return usagef("SEQ %q: expected a dead-letter sequence number (see 'relay dlq list')", a)
	}
	o.seq = seq
	return nil
}

func (o *dlqShowOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDeadLetters(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	l, err := st.Get(ctx, o.seq)
	if err != nil {
		return err
	}
	var missing error
	if l.EventOmitted {
		if full, err := st.Resolve(ctx, l); err != nil {
			missing = err
		} else {
			l = full
		}
	}
	return showLetter(e.out, o.json, l, missing)
}

func statusText(l dlq.Letter) string {
	if l.LastStatus == 0 {
		if l.LastError != "" {
			return "error"
		}
		return "-"
	}
	return strconv.Itoa(l.LastStatus)
}

// showLetter prints l (as JSON with asJSON); missing says why its event
// could not be read, if it could not.
func showLetter(w io.Writer, asJSON bool, l dlq.Letter, missing error) error {
	if asJSON {
		// A JSON body as JSON; text as a string, and as base64 too (the
		// exact bytes); anything else as base64 only.
		o := struct {
			dlq.Letter
			dlq.Body
		}{l, dlq.BodyOf(l.Body)}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(o)
	}
	fmt.Fprintf(w, "dead letter %d\n", l.Seq)
	if l.Malformed != "" {
		fmt.Fprintf(w, "  malformed:     %s\n", oneLine(l.Malformed))
		fmt.Fprintf(w, "  stored on:     %s at %s\n", oneLine(l.Subject), l.DeadAt.Format(time.RFC3339Nano))
	} else {
		fmt.Fprintf(w, "  destination:   %s\n", oneLine(l.Dest))
		fmt.Fprintf(w, "  event id:      %s\n", oneLine(l.EventID))
		fmt.Fprintf(w, "  reason:        %s\n", oneLine(l.Reason))
	}
	if l.Note != "" {
		fmt.Fprintf(w, "  note:          %s\n", oneLine(l.Note))
	}
	if l.Malformed != "" {
		return showBody(w, l.Headers, l.Body)
	}
	fmt.Fprintf(w, "  attempts:      %d\n", l.Attempts)
	fmt.Fprintf(w, "  last status:   %s\n", statusText(l))
	if l.LastError != "" {
		fmt.Fprintf(w, "  last error:    %s\n", oneLine(l.LastError))
	}
	if !l.First.IsZero() {
		fmt.Fprintf(w, "  first attempt: %s\n", l.First.Format(time.RFC3339Nano))
		fmt.Fprintf(w, "  last attempt:  %s\n", l.Last.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "  dead at:       %s\n", l.DeadAt.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  original:      %s seq %d\n", oneLine(l.Subject), l.StreamSeq)
	if l.EventOmitted {
		fmt.Fprintln(w, "  event:         too large to copy into the dead letter: read from the event log at that sequence")
	}
	if len(l.History) > 0 {
		fmt.Fprintln(w, "history:")
		for _, a := range l.History {
			res := strconv.Itoa(a.Status)
			if a.Status == 0 {
				res = "no response"
			}
			if a.Error != "" {
				res += ": " + oneLine(a.Error)
			}
			if a.URL != nil {
				res = fmt.Sprintf("url %d  %s", *a.URL, res)
			}
			fmt.Fprintf(w, "  #%d  %s  %8s  %s\n", a.N, a.At.Format(time.RFC3339Nano), a.Duration.Round(time.Microsecond), res)
		}
		if l.HistoryOmitted > 0 {
			fmt.Fprintf(w, "  (%d attempts between the first and the latest left out to fit)\n", l.HistoryOmitted)
		}
	}
	if missing != nil {
		fmt.Fprintf(w, "body:\n  (not available: %s)\n", oneLine(missing.Error()))
		return nil
	}
	return showBody(w, l.Headers, l.Body)
}

// showBody prints an event's headers and body, escaped for a terminal.
func showBody(w io.Writer, h nats.Header, body []byte) error {
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(w, "  header:        %s: %s\n", oneLine(k), oneLine(v))
		}
	}
	fmt.Fprintln(w, "body:")
	switch {
	case json.Valid(body):
		var v any
		_ = json.Unmarshal(body, &v)
		b, _ := json.MarshalIndent(v, "  ", "  ")
		fmt.Fprintf(w, "  %s\n", printable(string(b), true))
	case utf8.Valid(body):
		fmt.Fprintf(w, "  %s\n", printable(string(body), true))
	default:
		fmt.Fprintf(w, "  (base64) %s\n", base64.StdEncoding.EncodeToString(body))
	}
	return nil
}
