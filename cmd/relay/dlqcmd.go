package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/dlq"
)

func dlqCommand() *cli.Command {
	return &cli.Command{
		Name:  "dlq",
		Usage: "inspect and replay dead letters",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list dead letters, oldest first",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "dest", Usage: "only this destination's"},
					&cli.IntFlag{Name: "limit", Value: 1000, Usage: "at most this many (0: all)"},
					&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
				},
				Action: func(c *cli.Context) error {
					ctx, cancel := cmdContext(c, 5*time.Minute)
					defer cancel()
					nc, js, err := connect(c)
					if err != nil {
						return err
					}
					defer nc.Close()
					st, err := dlq.Open(ctx, js)
					if err != nil {
						return err
					}
					ls, err := st.List(ctx, dlq.Filter{Dest: c.String("dest")}, c.Int("limit"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						enc := json.NewEncoder(c.App.Writer)
						for _, l := range ls {
							l.History, l.Headers = nil, nil
							if err := enc.Encode(l); err != nil {
								return err
							}
						}
						return nil
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "SEQ\tAGE\tDEST\tEVENT ID\tATTEMPTS\tLAST STATUS\tREASON")
					for _, l := range ls {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", l.Seq, time.Since(l.DeadAt).Round(time.Second), l.Dest, l.EventID, l.Attempts, statusText(l), l.Reason)
					}
					return tw.Flush()
				},
			},
			{
				Name:      "show",
				Usage:     "show one dead letter: headers, failure history and body",
				ArgsUsage: "SEQ",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "as JSON"}},
				Action: func(c *cli.Context) error {
					a, err := oneArg(c, "SEQ")
					if err != nil {
						return err
					}
					seq, err := strconv.ParseUint(a, 10, 64)
					if err != nil || seq == 0 {
						return usagef("SEQ %q: expected a dead-letter sequence number (see 'relay dlq list')", a)
					}
					ctx, cancel := cmdContext(c, 30*time.Second)
					defer cancel()
					nc, js, err := connect(c)
					if err != nil {
						return err
					}
					defer nc.Close()
					st, err := dlq.Open(ctx, js)
					if err != nil {
						return err
					}
					l, err := st.Get(ctx, seq)
					if err != nil {
						return err
					}
					return showLetter(c, l)
				},
			},
			{
				Name:  "replay",
				Usage: "republish dead letters to their destination and remove them from the dead-letter stream",
				Description: `Each dead letter is republished with its event id (so receivers can
deduplicate), a fresh attempt count, and a dedup id derived from its dead-letter
sequence; it is removed only once the republish is confirmed. Re-running a
replay that was interrupted publishes nothing twice.`,
				Flags: []cli.Flag{
					&cli.Uint64SliceFlag{Name: "seq", Usage: "dead-letter sequence (repeatable)"},
					&cli.BoolFlag{Name: "all", Usage: "replay every dead letter (of --dest if given)"},
					&cli.StringFlag{Name: "dest", Usage: "only this destination's"},
				},
				Action: func(c *cli.Context) error {
					seqs := c.Uint64Slice("seq")
					if (len(seqs) > 0) == c.Bool("all") {
						return usagef("give either --seq N (repeatable) or --all")
					}
					ctx, cancel := cmdContext(c, time.Hour)
					defer cancel()
					nc, js, err := connect(c)
					if err != nil {
						return err
					}
					defer nc.Close()
					st, err := dlq.Open(ctx, js)
					if err != nil {
						return err
					}
					ls, err := st.List(ctx, dlq.Filter{Dest: c.String("dest"), Seqs: seqs}, 0)
					if err != nil {
						return err
					}
					n := 0
					for _, l := range ls {
						seq, err := st.Replay(ctx, l, "")
						if err != nil {
							return fmt.Errorf("%w (replayed %d of %d before this; re-running is safe)", err, n, len(ls))
						}
						n++
						fmt.Fprintf(c.App.Writer, "replayed dead letter %d (event %s) to %s as event seq %d\n", l.Seq, l.EventID, l.Dest, seq)
					}
					fmt.Fprintf(c.App.Writer, "replayed %d dead letters\n", n)
					return nil
				},
			},
		},
	}
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

func showLetter(c *cli.Context, l dlq.Letter) error {
	w := c.App.Writer
	if c.Bool("json") {
		type out struct {
			dlq.Letter
			Body       json.RawMessage `json:"body,omitempty"`
			BodyBase64 string          `json:"body_base64,omitempty"`
		}
		o := out{Letter: l}
		if json.Valid(l.Body) {
			o.Body = l.Body
		} else {
			o.BodyBase64 = base64.StdEncoding.EncodeToString(l.Body)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(o)
	}
	fmt.Fprintf(w, "dead letter %d\n", l.Seq)
	fmt.Fprintf(w, "  destination:   %s\n", l.Dest)
	fmt.Fprintf(w, "  event id:      %s\n", l.EventID)
	fmt.Fprintf(w, "  reason:        %s\n", l.Reason)
	fmt.Fprintf(w, "  attempts:      %d\n", l.Attempts)
	fmt.Fprintf(w, "  last status:   %s\n", statusText(l))
	if l.LastError != "" {
		fmt.Fprintf(w, "  last error:    %s\n", l.LastError)
	}
	if !l.First.IsZero() {
		fmt.Fprintf(w, "  first attempt: %s\n", l.First.Format(time.RFC3339Nano))
		fmt.Fprintf(w, "  last attempt:  %s\n", l.Last.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "  dead at:       %s\n", l.DeadAt.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  original:      %s seq %d\n", l.Subject, l.StreamSeq)
	for k, vs := range l.Headers {
		for _, v := range vs {
			fmt.Fprintf(w, "  header:        %s: %s\n", k, v)
		}
	}
	if len(l.History) > 0 {
		fmt.Fprintln(w, "history:")
		for _, a := range l.History {
			res := strconv.Itoa(a.Status)
			if a.Status == 0 {
				res = "no response"
			}
			if a.Error != "" {
				res += ": " + a.Error
			}
			fmt.Fprintf(w, "  #%d  %s  %8s  %s\n", a.N, a.At.Format(time.RFC3339Nano), a.Duration.Round(time.Microsecond), res)
		}
	}
	fmt.Fprintln(w, "body:")
	switch {
	case json.Valid(l.Body):
		var v any
		_ = json.Unmarshal(l.Body, &v)
		b, _ := json.MarshalIndent(v, "  ", "  ")
		fmt.Fprintf(w, "  %s\n", b)
	case utf8.Valid(l.Body):
		fmt.Fprintf(w, "  %s\n", l.Body)
	default:
		fmt.Fprintf(w, "  (base64) %s\n", base64.StdEncoding.EncodeToString(l.Body))
	}
	return nil
}
