package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// destFlags are the settings of a destination, shared by add and update.
func destFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "url", Usage: "http(s) URL that receives a POST per attempt (required)"},
		&cli.StringFlag{Name: "secret", Usage: "signing secret (whsec_<base64>); default: generate one"},
		&cli.BoolFlag{Name: "no-secret", Usage: "do not sign deliveries"},
		&cli.StringSliceFlag{Name: "header", Aliases: []string{"H"}, Usage: "NAME=VALUE added to every request (repeatable)"},
		&cli.DurationFlag{Name: "timeout", DefaultText: "30s", Usage: "per-attempt timeout, connect to last byte"},
		&cli.IntFlag{Name: "max-attempts", DefaultText: "15", Usage: "attempts before dead-lettering, the first included"},
		&cli.DurationFlag{Name: "backoff-base", DefaultText: "2s", Usage: "wait after the first failure; doubles per attempt"},
		&cli.DurationFlag{Name: "backoff-max", DefaultText: "1h", Usage: "cap of the wait before jitter"},
		&cli.Float64Flag{Name: "jitter", DefaultText: "0.2", Usage: "random +/- fraction of each wait, 0 to 0.5 (0 turns it off)"},
		&cli.IntFlag{Name: "concurrency", DefaultText: "16", Usage: "deliveries in flight per relay replica"},
		&cli.Float64Flag{Name: "rate-limit", DefaultText: "none", Usage: "most requests per second, shared by all replicas (0: none)"},
		&cli.IntFlag{Name: "breaker-threshold", DefaultText: "20", Usage: "consecutive failed attempts that pause the destination as a whole (-1: never)"},
		&cli.DurationFlag{Name: "breaker-pause", DefaultText: "30s", Usage: "first pause when the circuit opens; doubles while probes fail, up to --backoff-max"},
		&cli.StringFlag{Name: "on-gone", DefaultText: "disable", Usage: "what a 410 Gone does: disable (pause until resumed; the event is kept) or dead-letter"},
		&cli.BoolFlag{Name: "ordered", Usage: "deliver the events of each order key one at a time, in publish order (fixed once added)"},
		&cli.IntFlag{Name: "partitions", DefaultText: "8", Usage: "ordered: keys delivered in parallel, 1 to 64 (fixed once added)"},
		&cli.StringFlag{Name: "on-failure", DefaultText: "block", Usage: "ordered: block (retry the head of a key until delivered) or skip (dead-letter it after max attempts, the key continues)"},
	}
}

// updateUsage are the texts of the flags of 'dest update' that differ from
// add's.
var updateUsage = map[string]string{
	"url":        "new http(s) URL that receives a POST per attempt",
	"secret":     "new signing secret (whsec_<base64>), replacing the current one at once ('relay dest rotate-secret' rotates with an overlap)",
	"no-secret":  "stop signing deliveries",
	"header":     "NAME=VALUE added to every request (repeatable): replaces all the current headers",
	"ordered":    "fixed when the destination is added: a different value is refused",
	"partitions": "fixed when the destination is added: a different value is refused",
}

// updateFlags are the flags of 'dest update': add's, with its own texts and
// no defaults, since a flag left out keeps the current value.
func updateFlags() []cli.Flag {
	fs := destFlags()
	for _, f := range fs {
		name := f.Names()[0]
		var usage, def *string
		switch f := f.(type) {
		case *cli.StringFlag:
			usage, def = &f.Usage, &f.DefaultText
		case *cli.BoolFlag:
			usage, def = &f.Usage, &f.DefaultText
		case *cli.StringSliceFlag:
			usage, def = &f.Usage, &f.DefaultText
		case *cli.DurationFlag:
			usage, def = &f.Usage, &f.DefaultText
		case *cli.IntFlag:
			usage, def = &f.Usage, &f.DefaultText
		case *cli.Float64Flag:
			usage, def = &f.Usage, &f.DefaultText
		default:
			panic(fmt.Sprintf("relay: dest flag %s of type %T", name, f))
		}
		if u, ok := updateUsage[name]; ok {
			*usage = u
		}
		*def = "unchanged"
	}
	return fs
}

// allowUnencryptedFlag lets 'dest add' store secrets in the clear beside
// encrypted ones.
var allowUnencryptedFlag = &cli.BoolFlag{Name: "allow-unencrypted", Usage: "without a secret key, store this destination's secrets (signing secret, header values) unencrypted even though other destinations' are encrypted"}

// applyDestFlags copies the flags that were set onto d.
func applyDestFlags(c *cli.Context, d *relay.Destination) error {
	if c.IsSet("url") {
		d.URL = c.String("url")
	}
	if c.IsSet("secret") && c.Bool("no-secret") {
		return usagef("--secret and --no-secret exclude each other")
	}
	if c.IsSet("secret") {
		d.Secret = c.String("secret")
	}
	if c.Bool("no-secret") {
		d.Secret = ""
	}
	if c.IsSet("header") {
		h, err := parseKV("header", c.StringSlice("header"))
		if err != nil {
			return err
		}
		d.Headers = h
	}
	if c.IsSet("timeout") {
		d.Timeout = relay.Duration(c.Duration("timeout"))
	}
	if c.IsSet("max-attempts") {
		// 0 in a stored destination means the default: refused here, not
		// silently stored as 15.
		if n := c.Int("max-attempts"); n < 1 {
			return usagef("--max-attempts %d: give 1 or more (1: no retries)", n)
		}
		d.Retry.MaxAttempts = c.Int("max-attempts")
	}
	if c.IsSet("backoff-base") {
		d.Retry.Base = relay.Duration(c.Duration("backoff-base"))
	}
	if c.IsSet("backoff-max") {
		d.Retry.Max = relay.Duration(c.Duration("backoff-max"))
	}
	if c.IsSet("jitter") {
		d.Retry.Jitter = c.Float64("jitter")
		d.Retry.NoJitter = d.Retry.Jitter == 0
	}
	if c.IsSet("concurrency") {
		d.Concurrency = c.Int("concurrency")
	}
	if c.IsSet("rate-limit") {
		d.RateLimit = c.Float64("rate-limit")
	}
	if c.IsSet("breaker-threshold") {
		d.BreakerThreshold = c.Int("breaker-threshold")
	}
	if c.IsSet("breaker-pause") {
		d.BreakerPause = relay.Duration(c.Duration("breaker-pause"))
	}
	if c.IsSet("on-gone") {
		d.OnGone = c.String("on-gone")
	}
	if c.IsSet("ordered") {
		d.Ordered = c.Bool("ordered")
	}
	if c.IsSet("partitions") {
		d.Partitions = c.Int("partitions")
	}
	if c.IsSet("on-failure") {
		d.OnFailure = c.String("on-failure")
	}
	return nil
}

func destCommand() *cli.Command {
	return &cli.Command{
		Name:  "dest",
		Usage: "manage destinations",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "add a destination",
				ArgsUsage: "NAME",
				Flags:     append(destFlags(), allowUnencryptedFlag),
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					if err := required(c, "url"); err != nil {
						return err
					}
					d := relay.Destination{Name: name}
					if err := applyDestFlags(c, &d); err != nil {
						return err
					}
					generated := false
					if !c.IsSet("secret") && !c.Bool("no-secret") {
						d.Secret, generated = relay.GenerateSecret(), true
					}
					if err := d.WithDefaults().Validate(); err != nil {
						return usageError{err.Error()}
					}
					ctx, js, st, done, err := openDests(c, 30*time.Second, allowClear(c)...)
					if err != nil {
						return err
					}
					defer done()
					if err := checkNetPolicy(ctx, js, d.URL); err != nil {
						return err
					}
					d, err = st.Add(ctx, d)
					if errors.Is(err, relay.ErrWouldStoreInClear) {
						return usagef("%v: give the key (--secret-key, RELAY_SECRET_KEY or --secret-key-file), or add --allow-unencrypted to store them unencrypted", err)
					}
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "added destination %s -> %s\n", d.Name, relay.RedactURL(d.URL))
					if generated {
						fmt.Fprintf(c.App.Writer, "signing secret (shown once, give it to the receiver): %s\n", d.Secret)
					}
					return nil
				},
			},
			{
				Name:      "update",
				Usage:     "change a destination's settings (only the flags given)",
				ArgsUsage: "NAME",
				Description: "Changes only the settings whose flags are given; a flag left out keeps the destination's\n" +
					"current value (see them with 'relay dest list'). Running relays apply the change within seconds.",
				Flags: updateFlags(),
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					ctx, js, st, done, err := openDests(c, 30*time.Second)
					if err != nil {
						return err
					}
					defer done()
					if c.IsSet("url") {
						if err := checkNetPolicy(ctx, js, c.String("url")); err != nil {
							return err
						}
					}
					d, err := st.Update(ctx, name, func(d *relay.Destination) error { return applyDestFlags(c, d) })
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "updated destination %s -> %s\n", d.Name, relay.RedactURL(d.URL))
					return nil
				},
			},
			{
				Name:      "rotate-secret",
				Usage:     "give a destination a new signing secret; during --overlap both sign",
				ArgsUsage: "NAME",
				Description: `Generates a new secret (or takes --secret) and prints it once. During the
overlap every delivery carries two signatures, one per secret, space-separated
as Standard Webhooks allows, so receivers can switch to the new secret without
losing a delivery. After the overlap only the new secret signs.`,
				Flags: []cli.Flag{
					&cli.DurationFlag{Name: "overlap", Value: 24 * time.Hour, Usage: "how long the old secret keeps signing too (0: stop at once)"},
					&cli.StringFlag{Name: "secret", Usage: "the new secret (whsec_<base64>); default: generate one"},
				},
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					if c.Duration("overlap") < 0 {
						return usagef("--overlap must not be negative")
					}
					next := c.String("secret")
					generated := next == ""
					if generated {
						next = relay.GenerateSecret()
					}
					ctx, _, st, done, err := openDests(c, 30*time.Second)
					if err != nil {
						return err
					}
					defer done()
					d, err := st.Update(ctx, name, func(d *relay.Destination) error {
						d.PrevSecret, d.PrevSecretUntil = "", time.Time{}
						if ov := c.Duration("overlap"); ov > 0 && d.Secret != "" {
							d.PrevSecret, d.PrevSecretUntil = d.Secret, time.Now().Add(ov).UTC()
						}
						d.Secret = next
						return nil
					})
					if err != nil {
						return err
					}
					if d.PrevSecret != "" {
						fmt.Fprintf(c.App.Writer, "rotated the secret of %s; the old one also signs until %s\n", name, d.PrevSecretUntil.Format(time.RFC3339))
					} else {
						fmt.Fprintf(c.App.Writer, "rotated the secret of %s; the old one no longer signs\n", name)
					}
					if generated {
						fmt.Fprintf(c.App.Writer, "new signing secret (shown once): %s\n", next)
					}
					return nil
				},
			},
			{
				Name:      "pause",
				Usage:     "stop deliveries to a destination (its events wait; none uses up attempts)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.DurationFlag{Name: "for", Usage: "resume by itself after this long (default: until 'relay dest resume')"}},
				Action: func(c *cli.Context) error {
					return setPause(c, true)
				},
			},
			{
				Name:      "resume",
				Usage:     "resume deliveries to a paused, circuit-broken or disabled (410 Gone) destination",
				ArgsUsage: "NAME",
				Action: func(c *cli.Context) error {
					return setPause(c, false)
				},
			},
			{
				Name:      "heads",
				Usage:     "list the events at the head of an ordered destination's partitions that are handed out and not acknowledged",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					ctx, _, st, done, err := openDests(c, 30*time.Second)
					if err != nil {
						return err
					}
					defer done()
					heads, err := st.Heads(ctx, name)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return jsonLines(c.App.Writer, heads, func(h relay.Head) any { return h })
					}
					if len(heads) == 0 {
						fmt.Fprintf(c.App.Writer, "no partition of %s has an event handed out and not acknowledged\n", name)
						return nil
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "PARTITION\tSEQ\tEVENT ID\tKEY\tFAILED ATTEMPTS\tLAST ATTEMPT\tLAST ERROR\tSKIP")
					for _, h := range heads {
						last := ago(h.LastAttempt)
						fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", h.Partition, h.Seq, h.EventID, dash(h.Key), h.Attempts, last, dash(dlq.OneLine(h.LastError, 60)), dash(h.Skip))
					}
					return tw.Flush()
				},
			},
			{
				Name:      "skip-head",
				Usage:     "dead-letter the head of an ordered destination's partition now (reason skipped), so that its keys go on",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.Uint64Flag{Name: "seq", Usage: "the head's event sequence, from 'relay dest heads NAME' (required)"},
					&cli.StringFlag{Name: "reason", Value: "skipped by an operator", Usage: "why, kept with the dead letter"},
					&cli.DurationFlag{Name: "wait", Value: 10 * time.Second, Usage: "how long to wait for relay to dead-letter it (0: do not wait)"},
				},
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					if err := required(c, "seq"); err != nil {
						return err
					}
					seq := c.Uint64("seq")
					why, err := skipReason(c)
					if err != nil {
						return err
					}
					ctx, js, st, done, err := openDests(c, 30*time.Second+c.Duration("wait"))
					if err != nil {
						return err
					}
					defer done()
					h, err := st.SkipHead(ctx, name, seq, why)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "skipping event %d (%s) at the head of partition %d of %s after %s\n", h.Seq, h.EventID, h.Partition, name, plural(h.Attempts, "failed attempt"))
					if c.Duration("wait") <= 0 {
						fmt.Fprintln(c.App.Writer, "relay dead-letters it at its next delivery, or after the attempt in flight if that fails")
						return nil
					}
					left, letter, err := waitSkipped(ctx, js, name, h, c.Duration("wait"))
					switch {
					case err != nil:
						return err
					case !left:
						return fmt.Errorf("event %d is marked, but still at the head after %s (is a relay running? is %s paused?): relay dead-letters it at its next delivery; look with 'relay dest heads %s'", seq, c.Duration("wait"), name, name)
					case letter == nil:
						fmt.Fprintln(c.App.Writer, "delivered meanwhile, by an attempt that was in flight: nothing was dead-lettered")
					default:
						fmt.Fprintf(c.App.Writer, "dead-lettered as dead letter %d (reason %s); its partition goes on\n", letter.Seq, letter.Reason)
					}
					return nil
				},
			},
			{
				Name:      "retrying",
				Usage:     "list a destination's events that have failed attempts and wait for their next, the longest waiting first",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "list at most this many (0: all)"},
					&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
				},
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					if c.Int("limit") < 0 {
						return usagef("--limit %d: give 0 (all) or more", c.Int("limit"))
					}
					ctx, _, st, done, err := openDests(c, 2*time.Minute) // reads every record of the destination
					if err != nil {
						return err
					}
					defer done()
					rs, err := st.Retrying(ctx, name, c.Int("limit"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return jsonLines(c.App.Writer, rs, func(r relay.Retrying) any { return r })
					}
					if len(rs) == 0 {
						fmt.Fprintf(c.App.Writer, "no event of %s has a failed attempt on record\n", name)
						return nil
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "EVENT ID\tSEQ\tFAILED ATTEMPTS\tLAST ATTEMPT\tLAST ERROR\tSKIP")
					for _, r := range rs {
						last := ago(r.LastAttempt)
						id := r.EventID
						if id == "" {
							id = "(not recorded)"
						}
						fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", id, r.Seq, r.Attempts, last, dash(dlq.OneLine(r.LastError, 60)), dash(r.Skip))
					}
					return tw.Flush()
				},
			},
			{
				Name:      "skip",
				Usage:     "dead-letter an event of an unordered destination that waits for a retry (reason skipped) at its next delivery, instead of attempting it",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "event", Usage: "the event's id (its webhook-id; required)"},
					&cli.StringFlag{Name: "reason", Value: "skipped by an operator", Usage: "why, kept with the dead letter"},
					redisURLFlag("the Redis relay parks long waits in: an event parked there is made due now, and dead-lettered when it comes back"),
					redisModeFlag(),
				},
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					if err := required(c, "event"); err != nil {
						return err
					}
					id := strings.TrimSpace(c.String("event"))
					if id == "" {
						return usagef("--event: give the event's id (its webhook-id)")
					}
					why, err := skipReason(c)
					if err != nil {
						return err
					}
					ctx, _, st, done, err := openDests(c, 30*time.Second)
					if err != nil {
						return err
					}
					defer done()
					// Redis first: a bad --redis-url changes nothing.
					sched, closeSched, err := openSchedule(ctx, c)
					if err != nil {
						return err
					}
					defer closeSched()
					sk, err := st.SkipEvent(ctx, name, id, why)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "skipping event %s of %s after %s", sk.EventID, name, plural(sk.Attempts, "failed attempt"))
					if !sk.LastAttempt.IsZero() {
						fmt.Fprintf(c.App.Writer, " (the last at %s: %s)", sk.LastAttempt.UTC().Format(time.RFC3339), dlq.OneLine(sk.LastError, 120))
					}
					fmt.Fprintln(c.App.Writer)
					if sched != nil {
						n, err := sched.Hasten(ctx, name, id, sk.Origin, time.Now())
						if err != nil {
							return fmt.Errorf("event %s is marked, and is dead-lettered at its next delivery, but bringing that forward failed: %w", id, err)
						}
						if n > 0 {
							fmt.Fprintln(c.App.Writer, "it was parked in Redis, and is due now: relay dead-letters it when it comes back (not while the destination is paused)")
							return nil
						}
						fmt.Fprintln(c.App.Writer, "it is not parked in Redis")
					}
					fmt.Fprintln(c.App.Writer, "relay dead-letters it instead of its next attempt, when its retry wait ends (in JetStream or parked in Redis; not while the destination is paused), or at once if an attempt in flight fails")
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list destinations (secrets are never shown)",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
				Action: func(c *cli.Context) error {
					ctx, _, st, done, err := openDests(c, 30*time.Second)
					if err != nil {
						return err
					}
					defer done()
					ds, err := st.List(ctx)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return jsonLines(c.App.Writer, ds, func(d relay.Destination) any { return d.WithDefaults().Redacted() })
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tURL\tSIGNED\tTIMEOUT\tMAX ATTEMPTS\tBACKOFF\tCONCURRENCY\tORDERED")
					for _, d := range ds {
						d = d.WithDefaults()
						ordered := "no"
						if d.Ordered {
							ordered = fmt.Sprintf("%d partitions, %s", d.Partitions, d.OnFailure)
						}
						fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%d\t%s..%s\t%d\t%s\n", d.Name, relay.RedactURL(d.URL), d.Secret != "", time.Duration(d.Timeout),
							d.Retry.MaxAttempts, time.Duration(d.Retry.Base), time.Duration(d.Retry.Max), d.Concurrency, ordered)
					}
					return tw.Flush()
				},
			},
			{
				Name:      "rm",
				Usage:     "remove a destination",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "remove even though events are still waiting for delivery"}},
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					ctx, _, st, done, err := openDests(c, 30*time.Second)
					if err != nil {
						return err
					}
					defer done()
					if _, err := st.Get(ctx, name); err != nil {
						return err
					}
					n, err := st.Pending(ctx, name)
					if err != nil {
						return err
					}
					if n > 0 && !c.Bool("force") {
						return fmt.Errorf("destination %s still has %d undelivered events; they stay in the event log but will not be delivered: rerun with --force to remove it anyway", name, n)
					}
					if err := st.Remove(ctx, name); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "removed destination %s\n", name)
					return nil
				},
			},
			{
				Name:  "rekey",
				Usage: "seal every destination's secrets with the current secret key (after a key rotation)",
				Description: "Give the new key as --secret-key (RELAY_SECRET_KEY) or --secret-key-file and the old one as\n" +
					"--previous-secret-key (RELAY_PREVIOUS_SECRET_KEY) or --previous-secret-key-file. Secrets sealed\n" +
					"with the old key, or stored in the clear before a key was set, are sealed with the new one.",
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("dest rekey takes no arguments; got %d", c.NArg())
					}
					key, _, err := secretKeys(c)
					if err != nil {
						return err
					}
					if key == nil {
						return usagef("dest rekey seals with the secret key: give it with --secret-key (RELAY_SECRET_KEY) or --secret-key-file, and the old one with --previous-secret-key")
					}
					ctx, _, st, done, err := openDests(c, 5*time.Minute)
					if err != nil {
						return err
					}
					defer done()
					res, err := st.Rekey(ctx)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "resealed with the current key: %s; already sealed with it or without a secret: %d\n", destinations(len(res.Resealed)), len(res.Current))
					if len(res.Failed) == 0 {
						return nil
					}
					names := slices.Sorted(maps.Keys(res.Failed))
					sealed := 0
					for _, n := range names {
						fmt.Fprintf(c.App.ErrWriter, "%s: %v\n", n, res.Failed[n])
						if errors.Is(res.Failed[n], relay.ErrSealed) {
							sealed++
						}
					}
					hint := "see why above"
					if sealed > 0 {
						hint = "give the key a secret is sealed with as --previous-secret-key"
					}
					return fmt.Errorf("%s not resealed (%s): their secrets stay as they were; %s", destinations(len(names)), strings.Join(names, ", "), hint)
				},
			},
		},
	}
}

// destinations is "1 destination" or "n destinations".
func destinations(n int) string { return plural(n, "destination") }

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func oneArg(c *cli.Context, what string) (string, error) {
	if c.NArg() != 1 {
		return "", usagef("expected exactly one argument, %s; got %d", what, c.NArg())
	}
	a := strings.TrimSpace(c.Args().First())
	if a == "" {
		return "", usagef("%s must not be empty", what)
	}
	return a, nil
}

func setPause(c *cli.Context, pause bool) error {
	name, err := oneArg(c, "NAME")
	if err != nil {
		return err
	}
	until := relay.Forever
	if pause && c.IsSet("for") {
		if c.Duration("for") <= 0 {
			return usagef("--for must be positive")
		}
		until = time.Now().Add(c.Duration("for")).UTC()
	}
	ctx, _, st, done, err := openDests(c, 30*time.Second)
	if err != nil {
		return err
	}
	defer done()
	d, err := st.Update(ctx, name, func(d *relay.Destination) error {
		if pause {
			d.PausedUntil, d.PauseReason = until, relay.PauseOperator
		} else {
			d.PausedUntil, d.PauseReason, d.BreakerTrips = time.Time{}, "", 0
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Pause the consumers now too, so nothing more is handed out even
	// before the running relays notice.
	if err := st.ApplyPause(ctx, d); err != nil {
		return err
	}
	switch {
	case !pause:
		fmt.Fprintf(c.App.Writer, "resumed destination %s\n", name)
	case until.Equal(relay.Forever):
		fmt.Fprintf(c.App.Writer, "paused destination %s until 'relay dest resume %s'\n", name, name)
	default:
		fmt.Fprintf(c.App.Writer, "paused destination %s until %s\n", name, until.Format(time.RFC3339))
	}
	return nil
}

// waitSkipped waits up to wait for the head h of name to leave its
// partition, and returns whether it did and, if so, its dead letter (nil
// when it left delivered).
func waitSkipped(ctx context.Context, js jetstream.JetStream, name string, h relay.Head, wait time.Duration) (bool, *dlq.Letter, error) {
	deadline := time.Now().Add(wait)
	for {
		c, err := js.Consumer(ctx, stream.EventsStream, relay.PartitionConsumerName(name, h.Partition))
		if err != nil {
			return false, nil, err
		}
		if c.CachedInfo().AckFloor.Stream >= h.Seq {
			break
		}
		if time.Now().After(deadline) {
			return false, nil, nil
		}
		select {
		case <-ctx.Done():
			return false, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	letters, err := dlq.Open(ctx, js)
	if err != nil {
		return true, nil, err
	}
	// Only letters that died after the head's last attempt, by relay's
	// clock (this machine's may differ).
	ls, err := letters.List(ctx, dlq.Filter{Dest: name, Since: h.LastAttempt.Add(-time.Second)}, 0)
	if err != nil {
		return true, nil, err
	}
	for i := range ls {
		if ls[i].StreamSeq == h.Seq {
			return true, &ls[i], nil
		}
	}
	return true, nil, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jsonLines writes one JSON object per line: each item as out makes it.
func jsonLines[T any](w io.Writer, items []T, out func(T) any) error {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(out(it)); err != nil {
			return err
		}
	}
	return nil
}

// skipReason is the --reason of skip and skip-head: 1 to 200 characters,
// kept with the dead letter.
func skipReason(c *cli.Context) (string, error) {
	why := strings.TrimSpace(c.String("reason"))
	if n := utf8.RuneCountInString(why); n == 0 || n > 200 {
		return "", usagef("--reason: give 1 to 200 characters, not %d", n)
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

// allowClear is the store option --allow-unencrypted asks for, if it does.
func allowClear(c *cli.Context) []relay.StoreOption {
	if c.Bool("allow-unencrypted") {
		return []relay.StoreOption{relay.AllowStoringInClear()}
	}
	return nil
}
