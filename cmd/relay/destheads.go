package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/history"
)

// The commands that look at, and dead-letter, events that wait for a
// destination: heads, skip-head, retrying and skip.

// headsOpts are the options of 'relay dest heads'.
type headsOpts struct {
	cmdLine
	json bool

	name string // Validate
}

func readHeads(c *cli.Context) *headsOpts {
	return &headsOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *headsOpts) Validate() (err error) {
	o.name, err = o.destArg()
	return err
}

func (o *headsOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	heads, err := history.Heads(ctx, st, o.name)
	if err != nil {
		return err
	}
	if o.json {
		return jsonLines(e.out, heads, func(h history.Head) any { return h })
	}
	if len(heads) == 0 {
		fmt.Fprintf(e.out, "no partition of %s has an event handed out and not acknowledged\n", o.name)
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tSEQ\tEVENT ID\tKEY\tFAILED ATTEMPTS\tLAST ATTEMPT\tLAST ERROR\tSKIP")
	for _, h := range heads {
		last := ago(h.LastAttempt)
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", h.Partition, h.Seq, h.EventID, dash(h.Key), h.Attempts, last, dash(dlq.OneLine(onURL(h.LastURL, h.LastError), 60)), dash(h.Skip))
	}
	return tw.Flush()
}

// skipHeadOpts are the options of 'relay dest skip-head'.
type skipHeadOpts struct {
	cmdLine
	seq    *uint64
	reason string
	wait   time.Duration

	name string // Validate
}

func readSkipHead(c *cli.Context) *skipHeadOpts {
	return &skipHeadOpts{cmdLine: readCmdLine(c), seq: setOnly(c, "seq", c.Uint64), reason: c.String("reason"), wait: c.Duration("wait")}
}

func (o *skipHeadOpts) Validate() (err error) {
	if o.name, err = o.destArg(); err != nil {
		return err
	}
	if o.seq == nil {
		return o.missing("seq")
	}
	o.reason, err = skipReason(o.reason)
	return err
}

func (o *skipHeadOpts) Run(ctx context.Context, e *env) error {
	name, seq, w := o.name, *o.seq, e.out
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second+o.wait)
	if err != nil {
		return err
	}
	defer cl.close()
	h, err := history.SkipHead(ctx, st, name, seq, o.reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "skipping event %d (%s) at the head of partition %d of %s after %s\n", h.Seq, h.EventID, h.Partition, name, plural(h.Attempts, "failed attempt"))
	if o.wait <= 0 {
		fmt.Fprintln(w, "relay dead-letters it at its next delivery, or after the attempt in flight if that fails")
		return nil
	}
	left, letter, err := history.WaitHeadLeft(ctx, st, name, h, o.wait)
	switch {
	case err != nil:
		return err
	case !left:
		return fmt.Errorf("event %d is marked, but still at the head after %s (is a relay running? is %s paused?): relay dead-letters it at its next delivery; look with 'relay dest heads %s'", seq, o.wait, name, name)
	case letter == nil:
		fmt.Fprintln(w, "delivered meanwhile, by an attempt that was in flight: nothing was dead-lettered")
	default:
		fmt.Fprintf(w, "dead-lettered as dead letter %d (reason %s); its partition goes on\n", letter.Seq, letter.Reason)
	}
	return nil
}

// retryingOpts are the options of 'relay dest retrying'.
type retryingOpts struct {
	cmdLine
	limit int
	json  bool

	name string // Validate
}

func readRetrying(c *cli.Context) *retryingOpts {
	return &retryingOpts{cmdLine: readCmdLine(c), limit: c.Int("limit"), json: c.Bool("json")}
}

func (o *retryingOpts) Validate() (err error) {
	if o.name, err = o.destArg(); err != nil {
		return err
	}
	if o.limit < 0 {
		return usagef("--limit %d: give 0 (all) or more", o.limit)
	}
	return nil
}

func (o *retryingOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDests(ctx, 2*time.Minute) // reads every record of the destination
	if err != nil {
		return err
	}
	defer cl.close()
	rs, err := history.ListRetrying(ctx, st, o.name, o.limit)
	if err != nil {
		return err
	}
	if o.json {
		return jsonLines(e.out, rs, func(r history.Retrying) any { return r })
	}
	if len(rs) == 0 {
		fmt.Fprintf(e.out, "no event of %s has a failed attempt on record\n", o.name)
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT ID\tSEQ\tFAILED ATTEMPTS\tLAST ATTEMPT\tLAST ERROR\tSKIP")
	for _, r := range rs {
		last := ago(r.LastAttempt)
		id := r.EventID
		if id == "" {
			id = "(not recorded)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", id, r.Seq, r.Attempts, last, dash(dlq.OneLine(onURL(r.LastURL, r.LastError), 60)), dash(r.Skip))
	}
	return tw.Flush()
}

// skipOpts are the options of 'relay dest skip'.
type skipOpts struct {
	cmdLine
	event  *string
	reason string
	redis  redisOpts

	name string // Validate
}

func readSkip(c *cli.Context) *skipOpts {
	return &skipOpts{cmdLine: readCmdLine(c), event: setOnly(c, "event", c.String), reason: c.String("reason"), redis: readRedis(c)}
}

func (o *skipOpts) Validate() (err error) {
	if o.name, err = o.destArg(); err != nil {
		return err
	}
	if o.event == nil {
		return o.missing("event")
	}
	if *o.event = strings.TrimSpace(*o.event); *o.event == "" {
		return usagef("--event: give the event's id (its webhook-id)")
	}
	if o.reason, err = skipReason(o.reason); err != nil {
		return err
	}
	return o.redis.Validate()
}

func (o *skipOpts) Run(ctx context.Context, e *env) error {
	name, id, w := o.name, *o.event, e.out
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	// Redis first: a bad --redis-url changes nothing.
	sched, closeSched, err := o.redis.open(ctx, e)
	if err != nil {
		return err
	}
	defer closeSched()
	sk, err := history.SkipEvent(ctx, st, name, id, o.reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "skipping event %s of %s after %s", sk.EventID, name, plural(sk.Attempts, "failed attempt"))
	if !sk.LastAttempt.IsZero() {
		fmt.Fprintf(w, " (the last at %s: %s)", sk.LastAttempt.UTC().Format(time.RFC3339), dlq.OneLine(sk.LastError, 120))
	}
	fmt.Fprintln(w)
	if sched != nil {
		n, err := sched.Hasten(ctx, name, id, sk.Origin, time.Now())
		if err != nil {
			return fmt.Errorf("event %s is marked, and is dead-lettered at its next delivery, but bringing that forward failed: %w", id, err)
		}
		if n > 0 {
			fmt.Fprintln(w, "it was parked in Redis, and is due now: relay dead-letters it when it comes back (not while the destination is paused)")
			return nil
		}
		fmt.Fprintln(w, "it is not parked in Redis")
	}
	fmt.Fprintln(w, "relay dead-letters it instead of its next attempt, when its retry wait ends (in JetStream or parked in Redis; not while the destination is paused), or at once if an attempt in flight fails")
	return nil
}

// skipReasonFlag is the --reason of skip and skip-head.
func skipReasonFlag() cli.Flag {
	return &cli.StringFlag{Name: "reason", Value: history.DefaultSkipReason,
		Usage: fmt.Sprintf("why, kept with the dead letter: one line, at most %d characters (blank: the default)", history.MaxSkipReason)}
}

// skipReason is the --reason of skip and skip-head as relay keeps it
// (relay.SkipReason), or a usage error.
func skipReason(reason string) (string, error) {
	why, err := history.SkipReason(reason)
	if err != nil {
		return "", usagef("--reason: %v", err)
	}
	return why, nil
}

// ago is how long ago t was, to the second; "-" for the zero time.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Truncate(time.Second).String() + " ago"
}

// onURL prefixes a failure with the index of the URL of the destination's
// pool it happened at, when the destination has a pool.
func onURL(url *int, failure string) string {
	if url == nil || failure == "" {
		return failure
	}
	return fmt.Sprintf("url %d: %s", *url, failure)
}
