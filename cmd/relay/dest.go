package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/tenant"
)

func destCommand() *cli.Command {
	cmd := destCommands()
	for _, sub := range cmd.Subcommands {
		if sub.Name != "rekey" && sub.Name != "types" {
			sub.Flags = append(sub.Flags, tenantFlag())
		}
	}
	return cmd
}

func destCommands() *cli.Command {
	return &cli.Command{
		Name:  "dest",
		Usage: "manage destinations",
		Subcommands: []*cli.Command{
			destTypesCommand(),
			{
				Name:      "add",
				Usage:     "add a destination",
				ArgsUsage: "NAME",
				Flags:     append(destFlags(), allowUnencryptedFlag),
				Action:    action(readDestAdd),
			},
			{
				Name:      "update",
				Usage:     "change a destination's settings (only the flags given)",
				ArgsUsage: "NAME",
				Description: "Changes only the settings whose flags are given; a flag left out keeps the destination's\n" +
					"current value (see them with 'relay dest list'). Running relays apply the change within seconds.",
				Flags:  updateFlags(),
				Action: action(readDestUpdate),
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
				Action: action(readRotateSecret),
			},
			{
				Name:      "pause",
				Usage:     "stop deliveries to a destination (its events wait; none uses up attempts)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.DurationFlag{Name: "for", Usage: "resume by itself after this long (default: until 'relay dest resume')"}},
				Action:    action(readPause),
			},
			{
				Name:      "resume",
				Usage:     "resume deliveries to a paused, circuit-broken or disabled (410 Gone) destination",
				ArgsUsage: "NAME",
				Action:    action(readResume),
			},
			{
				Name:      "heads",
				Usage:     "list the events at the head of an ordered destination's partitions that are handed out and not acknowledged",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
				Action:    action(readHeads),
			},
			{
				Name:      "skip-head",
				Usage:     "dead-letter the head of an ordered destination's partition now (reason skipped), so that its keys go on",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.Uint64Flag{Name: "seq", Usage: "the head's event sequence, from 'relay dest heads NAME' (required)"},
					skipReasonFlag(),
					&cli.DurationFlag{Name: "wait", Value: 10 * time.Second, Usage: "how long to wait for relay to dead-letter it (0: do not wait)"},
				},
				Action: action(readSkipHead),
			},
			{
				Name:      "retrying",
				Usage:     "list a destination's events that have failed attempts and wait for their next, the longest waiting first",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "list at most this many (0: all)"},
					&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
				},
				Action: action(readRetrying),
			},
			{
				Name:      "skip",
				Usage:     "dead-letter an event of an unordered destination that waits for a retry (reason skipped) at its next delivery, instead of attempting it",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "event", Usage: "the event's id (its webhook-id; required)"},
					skipReasonFlag(),
					redisURLFlag("the Redis relay parks long waits in: an event parked there is made due now, and dead-lettered when it comes back"),
					redisModeFlag(),
				},
				Action: action(readSkip),
			},
			{
				Name:      "show",
				Usage:     "show a destination's settings and state, and the public keys of its v1a signatures (secrets are never shown)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "a JSON object"}},
				Action:    action(readDestShow),
			},
			{
				Name:   "list",
				Usage:  "list destinations (secrets are never shown)",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
				Action: action(readDestList),
			},
			{
				Name:      "rm",
				Usage:     "remove a destination",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "remove even though events are still waiting for delivery"}},
				Action:    action(readDestRemove),
			},
			{
				Name:  "rekey",
				Usage: "seal every destination's secrets with the current secret key (after a key rotation)",
				Description: "Give the new key as --secret-key (RELAY_SECRET_KEY) or --secret-key-file and the old one as\n" +
					"--previous-secret-key (RELAY_PREVIOUS_SECRET_KEY) or --previous-secret-key-file. Secrets sealed\n" +
					"with the old key, or stored in the clear before a key was set, are sealed with the new one.",
				Action: action(readRekey),
			},
		},
	}
}

// destFlags are the settings of a destination, shared by add and update.
func destFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kind", DefaultText: "http", Usage: "what the destination delivers to: http (a POST per event to --url) or another kind with its --config: nats, kafka, rabbitmq, pubsub, sqs, eventbridge ('relay dest types' lists each one's fields; fixed once added)"},
		&cli.GenericFlag{Name: "config", Value: &listValue{}, Usage: "NAME=VALUE of a non-HTTP kind's configuration, credentials included (repeatable; 'relay dest types KIND' lists the fields)"},
		&cli.GenericFlag{Name: "config-file", Value: &listValue{}, Usage: "NAME=FILE: a --config value read from a file (a credentials file, a PEM; repeatable)"},
		&cli.GenericFlag{Name: "url", Value: &urlsValue{}, Usage: "http(s) URL that receives a POST per attempt (required for --kind http); repeat it for a pool of URLs, tried as --url-strategy says"},
		&cli.StringFlag{Name: "url-strategy", DefaultText: "failover", Usage: "how an attempt picks a URL of the pool: failover (the first that is not cooling down after failures) or round-robin (those not cooling down, in turn)"},
		&cli.StringFlag{Name: "secret", Usage: "signing secret (whsec_<base64>); default: generate one"},
		&cli.BoolFlag{Name: "no-secret", Usage: "do not sign deliveries with an HMAC secret"},
		&cli.StringFlag{Name: "signature", DefaultText: "hmac", Usage: "how deliveries are signed: hmac (v1, with the secret), ed25519 (v1a, with a signing key relay generates: receivers verify with its public key, 'relay dest show' and the JWKS) or both (v1 and v1a on every request, while receivers move over)"},
		&cli.GenericFlag{Name: "header", Aliases: []string{"H"}, Value: &listValue{}, Usage: "NAME=VALUE added to every request (repeatable; a value may hold commas)"},
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
		&cli.BoolFlag{Name: "shared", Usage: "unordered: served by relay's shared consumer instead of a JetStream consumer of its own, for thousands of destinations (fixed once added; docs/architecture.md)"},
		&cli.IntFlag{Name: "partitions", DefaultText: "8", Usage: "ordered: keys delivered in parallel, 1 to 64 (fixed once added)"},
		&cli.StringFlag{Name: "on-failure", DefaultText: "block", Usage: "ordered: block (retry the head of a key until delivered) or skip (dead-letter it after max attempts, the key continues)"},
		&cli.StringSliceFlag{Name: "type", Aliases: []string{"t"}, Usage: "event type pattern to subscribe to, such as order.* ('*' one token, '>' the rest; repeatable)"},
		&cli.StringFlag{Name: "filter", DefaultText: "none", Usage: "deliver only the events this expression is true for, e.g. 'data.amount > 100 && headers[\"X-Region\"] == \"eu\"' (see docs/routing.md); the others are acknowledged without an attempt"},
		&cli.StringFlag{Name: "body-template", DefaultText: "none: the event's body", Usage: "`FILE` holding a Go text/template over the event (.Type, .ID, .Time, .Data, .Body, .Headers) whose output is the body sent and signed, e.g. docs/templates/slack.tmpl (see docs/templates.md)"},
		&cli.StringFlag{Name: "body-content-type", DefaultText: "application/json", Usage: "Content-Type of the body --body-template renders"},
	}
}

// updateUsage are the texts of the flags of 'dest update' that differ from
// add's.
var updateUsage = map[string]string{
	"url":           "new http(s) URL that receives a POST per attempt; repeat it for a pool: replaces the whole pool",
	"secret":        "new signing secret (whsec_<base64>), replacing the current one at once ('relay dest rotate-secret' rotates with an overlap)",
	"no-secret":     "stop signing deliveries",
	"header":        "NAME=VALUE added to every request (repeatable): replaces all the current headers",
	"ordered":       "fixed when the destination is added: a different value is refused",
	"shared":        "fixed when the destination is added: a different value is refused",
	"partitions":    "fixed when the destination is added: a different value is refused",
	"type":          "event type pattern to subscribe to (repeatable): replaces all the current ones, from the next event published; --type '' subscribes to none",
	"filter":        "new filter, replacing the current one ('' removes it: every event is delivered)",
	"body-template": "`FILE` holding a new body template, replacing the current one ('' removes it, and its content type: the event's body is sent)",
	"kind":          "fixed when the destination is added: a different value is refused",
	"config":        "NAME=VALUE of the kind's configuration to set (repeatable; NAME= removes the field); the fields not given keep their values",
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
		case *cli.GenericFlag:
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
var allowUnencryptedFlag = &cli.BoolFlag{Name: "allow-unencrypted", Usage: "without a secret key, store this destination's secrets (signing secret, header values, body template) unencrypted even though other destinations' are encrypted"}

// urlsValue is the value of --url: the URLs given, one per flag, in order.
// Unlike a string slice flag it does not split a value at commas, which a
// URL may hold.
type urlsValue []string

func (u *urlsValue) Set(v string) error {
	*u = append(*u, v)
	return nil
}

func (u *urlsValue) String() string { return strings.Join(*u, " ") }

// listValue is the value of a repeatable flag whose values may hold commas
// (--header "Accept=text/html, application/json"): one per flag, as given,
// where a StringSliceFlag would split them at the commas.
type listValue []string

func (l *listValue) Set(v string) error {
	if enc, ok := strings.CutPrefix(v, listSerial); ok {
		// urfave/cli copying the value to the flag's alias (-H), whose
		// value is this one: the list as it is.
		var all []string
		if err := json.Unmarshal([]byte(enc), &all); err != nil {
			return err
		}
		*l = all
		return nil
	}
	*l = append(*l, v)
	return nil
}

func (l *listValue) String() string { return strings.Join(*l, " ") }

// Serialize is what urfave/cli hands the flag's aliases: the whole list,
// which Set takes back as it is (with String, it would add it as one more
// value).
func (l *listValue) Serialize() string {
	b, _ := json.Marshal([]string(*l))
	return listSerial + string(b)
}

// listSerial starts a serialized listValue: no command line holds it.
const listSerial = "\x00relay-list:"

// listOf is the values of the listValue flag name, nil if it was not given.
func listOf(c *cli.Context, name string) *[]string {
	if !c.IsSet(name) {
		return nil
	}
	l, _ := c.Generic(name).(*listValue)
	if l == nil {
		return nil
	}
	out := slices.Clone([]string(*l))
	return &out
}

// destSettings are the destination flags of add and update.
type destSettings struct {
	destination.Settings
	secret   *string // --secret
	noSecret bool
	header   *[]string // --header NAME=VALUE, parsed by Validate
	// bodyTemplate is the file of --body-template, read by Validate
	// ("": no template).
	bodyTemplate *string
	// config and configFile are --config NAME=VALUE and --config-file
	// NAME=FILE, parsed (and read) by Validate.
	config, configFile *[]string
}

func readDestSettings(c *cli.Context) destSettings {
	return destSettings{
		Settings: destination.Settings{
			URLs:             urlsOf(c),
			URLStrategy:      setOnly(c, "url-strategy", c.String),
			Timeout:          setOnly(c, "timeout", c.Duration),
			MaxAttempts:      setOnly(c, "max-attempts", c.Int),
			BackoffBase:      setOnly(c, "backoff-base", c.Duration),
			BackoffMax:       setOnly(c, "backoff-max", c.Duration),
			Jitter:           setOnly(c, "jitter", c.Float64),
			Concurrency:      setOnly(c, "concurrency", c.Int),
			RateLimit:        setOnly(c, "rate-limit", c.Float64),
			BreakerThreshold: setOnly(c, "breaker-threshold", c.Int),
			BreakerPause:     setOnly(c, "breaker-pause", c.Duration),
			OnGone:           setOnly(c, "on-gone", c.String),
			Ordered:          setOnly(c, "ordered", c.Bool),
			Shared:           setOnly(c, "shared", c.Bool),
			Partitions:       setOnly(c, "partitions", c.Int),
			OnFailure:        setOnly(c, "on-failure", c.String),
			Types:            setOnly(c, "type", c.StringSlice),
			Filter:           setOnly(c, "filter", c.String),
			BodyContentType:  setOnly(c, "body-content-type", c.String),
			Signature:        setOnly(c, "signature", c.String),
			Kind:             setOnly(c, "kind", c.String),
		},
		config:       listOf(c, "config"),
		configFile:   listOf(c, "config-file"),
		bodyTemplate: setOnly(c, "body-template", c.String),
		secret:       setOnly(c, "secret", c.String),
		noSecret:     c.Bool("no-secret"),
		header:       listOf(c, "header"),
	}
}

// urlsOf are the URLs of --url, nil if it was not given.
func urlsOf(c *cli.Context) []string {
	if !c.IsSet("url") {
		return nil
	}
	u, _ := c.Generic("url").(*urlsValue)
	if u == nil {
		return nil
	}
	return slices.Clone(*u)
}

// Validate checks the flags that exclude each other and parses --header,
// then the settings as relay does (destination.Settings.Validate).
func (s *destSettings) Validate() error {
	if s.secret != nil && s.noSecret {
		return usagef("--secret and --no-secret exclude each other")
	}
	if s.noSecret {
		none := ""
		s.Secret = &none
	} else {
		s.Secret = s.secret
	}
	if s.header != nil {
		h, err := parseKV("header", *s.header)
		if err != nil {
			return err
		}
		s.Headers = &h
	}
	if err := s.readConfig(); err != nil {
		return err
	}
	if s.bodyTemplate != nil {
		src := ""
		if *s.bodyTemplate != "" {
			b, err := os.ReadFile(*s.bodyTemplate)
			if err != nil {
				return usagef("--body-template: %v", err)
			}
			src = string(b)
			if strings.TrimSpace(src) == "" {
				return usagef("--body-template: %s is empty (--body-template '' removes a template)", *s.bodyTemplate)
			}
		}
		s.BodyTemplate = &src
	}
	return flagError(s.Settings.Validate())
}

// flagError is err, a usage error naming the flag when it is a
// *relay.SettingError.
func flagError(err error) error {
	var se *destination.SettingError
	var fe *kind.FieldError
	if errors.As(err, &fe) {
		return usagef("--config %s: %s", fe.Field, fe.Msg)
	}
	if errors.As(err, &se) {
		return usageError{se.Text(func(s string) string { return "--" + s })}
	}
	return err
}

// destAddOpts are the options of 'relay dest add'.
type destAddOpts struct {
	cmdLine
	settings         destSettings
	allowUnencrypted bool

	dest      destination.Destination // Validate: the destination to add
	generated bool                    // Validate: its secret was generated
}

func readDestAdd(c *cli.Context) *destAddOpts {
	return &destAddOpts{cmdLine: readCmdLine(c), settings: readDestSettings(c), allowUnencrypted: c.Bool("allow-unencrypted")}
}

func (o *destAddOpts) Validate() error {
	name, err := o.destArg()
	if err != nil {
		return err
	}
	http := o.settings.Kind == nil || *o.settings.Kind == "" || *o.settings.Kind == kind.HTTP
	if len(o.settings.URLs) == 0 && http {
		return o.missing("url")
	}
	if err := o.settings.Validate(); err != nil {
		return err
	}
	if o.dest, o.generated, err = o.settings.NewDestination(name); err != nil {
		return flagError(err)
	}
	return nil
}

func (o *destAddOpts) Run(ctx context.Context, e *env) error {
	d := o.dest
	var opts []destination.StoreOption
	if o.allowUnencrypted {
		opts = append(opts, destination.AllowStoringInClear())
	}
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second, opts...)
	if err != nil {
		return err
	}
	defer cl.close()
	if o.tenant != "" {
		ts, err := tenant.Open(ctx, cl.js, nil)
		if err != nil {
			return err
		}
		t, err := ts.Get(ctx, o.tenant)
		if errors.Is(err, tenant.ErrNotFound) {
			return usagef("--tenant: %v (create it first with 'relay tenant put %s')", err, o.tenant)
		} else if err != nil {
			return err
		}
		if max := t.Limits.MaxDestinations; max > 0 {
			all, err := st.List(ctx)
			if err != nil {
				return err
			}
			n := 0
			for _, x := range all {
				if x.Tenant() == t.ID {
					n++
				}
			}
			if n >= max {
				return fmt.Errorf("tenant %s has %d destinations, its limit (--max-destinations %d): remove one, or raise the limit with 'relay tenant put'", t.ID, n, max)
			}
		}
		// What the tenant's destinations take where no flag says.
		set := o.settings.Settings
		t.Defaults.Fill(&set)
		generated := o.generated
		if d, _, err = set.NewDestination(d.Name); err != nil {
			return flagError(err)
		}
		if generated {
			d.Secret = o.dest.Secret
		}
	}
	if d.IsHTTP() {
		if err := checkNetPolicy(ctx, cl.js, d.Pool()); err != nil {
			return err
		}
	}
	d, err = st.Add(ctx, d)
	if errors.Is(err, destination.ErrWouldStoreInClear) {
		return usagef("%v: give the key (--secret-key, RELAY_SECRET_KEY or --secret-key-file), or add --allow-unencrypted to store them unencrypted", err)
	}
	if errors.Is(err, destination.ErrNoConsumerRoom) {
		// Like a URL the address policy blocks: relay could never
		// deliver its events, so nothing is stored.
		return usageError{err.Error()}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "added destination %s -> %s\n", destination.Display(d.Name), poolText(d))
	if o.generated && d.SignsHMAC() {
		fmt.Fprintf(e.out, "signing secret (shown once, give it to the receiver): %s\n", d.Secret)
	}
	for _, pk := range d.PublicKeys(time.Now()) {
		fmt.Fprintf(e.out, "public key (kid %s; receivers verify v1a with it, it is also in the JWKS): %s\n", pk.ID, pk.Key)
	}
	return nil
}

// destUpdateOpts are the options of 'relay dest update'.
type destUpdateOpts struct {
	cmdLine
	settings destSettings

	name string // Validate
}

func readDestUpdate(c *cli.Context) *destUpdateOpts {
	return &destUpdateOpts{cmdLine: readCmdLine(c), settings: readDestSettings(c)}
}

func (o *destUpdateOpts) Validate() (err error) {
	if o.name, err = o.destArg(); err != nil {
		return err
	}
	return o.settings.Validate()
}

func (o *destUpdateOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	if o.settings.URLs != nil {
		if err := checkNetPolicy(ctx, cl.js, o.settings.URLs); err != nil {
			return err
		}
	}
	var generated string
	d, err := st.Update(ctx, o.name, func(d *destination.Destination) error {
		before := *d
		o.settings.Apply(d)
		generated = o.settings.GeneratedSecret(before, *d)
		return nil
	})
	if err != nil {
		// A setting the destination as changed refuses (--body-content-type
		// without a template, say) is a usage error, as in add.
		return flagError(err)
	}
	fmt.Fprintf(e.out, "updated destination %s -> %s\n", d.Name, poolText(d))
	if generated != "" {
		fmt.Fprintf(e.out, "signing secret (shown once, give it to the receiver): %s\n", generated)
	}
	for _, pk := range d.PublicKeys(time.Now()) {
		fmt.Fprintf(e.out, "public key (kid %s): %s\n", pk.ID, pk.Key)
	}
	return nil
}

// destListOpts are the options of 'relay dest list'.
type destListOpts struct {
	json bool
	cmdLine
}

func readDestList(c *cli.Context) *destListOpts {
	return &destListOpts{json: c.Bool("json"), cmdLine: readCmdLine(c)}
}

func (o *destListOpts) Validate() error {
	if len(o.args) > 0 {
		return usagef("unexpected argument %q: 'relay dest list' takes none; it lists every destination (of one tenant with --tenant)", o.args[0])
	}
	return nil
}

func (o *destListOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	all, err := st.List(ctx)
	if err != nil {
		return err
	}
	var ds []destination.Destination
	for _, d := range all {
		if o.tenant == "" || d.Tenant() == o.tenant {
			ds = append(ds, d)
		}
	}
	if o.json {
		return jsonLines(e.out, ds, func(d destination.Destination) any { return d.WithDefaults().Redacted() })
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tNAME\tURL\tSIGNATURE\tTIMEOUT\tMAX ATTEMPTS\tBACKOFF\tCONCURRENCY\tORDERED\tTYPES")
	for _, d := range ds {
		d = d.WithDefaults()
		ordered := "no"
		switch {
		case d.Ordered:
			ordered = fmt.Sprintf("%d partitions, %s", d.Partitions, d.OnFailure)
		case d.Shared:
			ordered = "no (shared)"
		}
		types := strings.Join(d.Types, ",")
		if types == "" {
			types = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%d\t%s..%s\t%d\t%s\t%s\n", cmp.Or(d.Tenant(), "-"), d.ShortName(), poolText(d), signatureText(d), time.Duration(d.Timeout),
			d.Retry.MaxAttempts, time.Duration(d.Retry.Base), time.Duration(d.Retry.Max), d.Concurrency, ordered, types)
	}
	return tw.Flush()
}

// signatureText is how d signs its deliveries: hmac, ed25519, both, or
// none.
func signatureText(d destination.Destination) string {
	if d.SignsHMAC() && d.Secret == "" {
		if d.SignsEd25519() {
			return destination.SignatureEd25519
		}
		return "none"
	}
	return d.Signature
}

// destShowOpts are the options of 'relay dest show'.
type destShowOpts struct {
	json bool
	cmdLine

	name string // Validate
}

func readDestShow(c *cli.Context) *destShowOpts {
	return &destShowOpts{json: c.Bool("json"), cmdLine: readCmdLine(c)}
}

func (o *destShowOpts) Validate() (err error) {
	o.name, err = o.destArg()
	return err
}

func (o *destShowOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	d, err := st.Get(ctx, o.name)
	if err != nil {
		return err
	}
	now := time.Now()
	d = d.WithDefaults()
	keys := d.PublicKeys(now)
	if o.json {
		type key struct {
			Key   string    `json:"key"`
			Kid   string    `json:"kid"`
			Until time.Time `json:"until,omitzero"`
		}
		out := struct {
			destination.Destination
			PublicKeys []key `json:"public_keys,omitempty"`
		}{Destination: d.Redacted()}
		for _, k := range keys {
			out.PublicKeys = append(out.PublicKeys, key{k.Key, k.ID, k.Until})
		}
		return jsonLines(e.out, []any{out}, func(v any) any { return v })
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("name", d.ShortName())
	row("tenant", cmp.Or(d.Tenant(), "-"))
	row("kind", d.KindName())
	if d.IsHTTP() {
		row("url", poolText(d))
	} else {
		for _, k := range slices.Sorted(maps.Keys(d.Config)) {
			row("config "+k, d.Config[k])
		}
		for _, k := range slices.Sorted(maps.Keys(d.Credentials)) {
			row("config "+k, "(set)")
		}
	}
	row("state", d.State(now))
	row("signature", signatureText(d))
	if d.SignsHMAC() && d.PrevSecret != "" && now.Before(d.PrevSecretUntil) {
		row("previous secret signs until", d.PrevSecretUntil.Format(time.RFC3339))
	}
	for _, k := range keys {
		if k.Until.IsZero() {
			row("public key", k.Key+" (kid "+k.ID+")")
		} else {
			row("previous public key", k.Key+" (kid "+k.ID+", signs until "+k.Until.Format(time.RFC3339)+")")
		}
	}
	types := strings.Join(d.Types, ", ")
	row("types", cmp.Or(types, "-"))
	row("filter", cmp.Or(d.Filter, "-"))
	row("timeout", time.Duration(d.Timeout).String())
	row("retries", fmt.Sprintf("%d attempts, backoff %s..%s", d.Retry.MaxAttempts, time.Duration(d.Retry.Base), time.Duration(d.Retry.Max)))
	row("concurrency", strconv.Itoa(d.Concurrency))
	if d.Ordered {
		row("ordered", fmt.Sprintf("%d partitions, %s", d.Partitions, d.OnFailure))
	}
	return tw.Flush()
}

// poolText shows d's URL, or its pool and strategy, redacted:
// "https://a/h" or "failover: [0] https://a/h [1] https://b/h".
func poolText(d destination.Destination) string {
	if !d.IsHTTP() {
		return targetText(d)
	}
	pool := d.Pool()
	if len(pool) == 1 {
		return destination.RedactURL(d.URL)
	}
	var b strings.Builder
	b.WriteString(cmp.Or(d.URLStrategy, destination.URLFailover) + ":")
	for i, u := range pool {
		fmt.Fprintf(&b, " [%d] %s", i, destination.RedactURL(u))
	}
	return b.String()
}

// destRemoveOpts are the options of 'relay dest rm'.
type destRemoveOpts struct {
	cmdLine
	force bool

	name string // Validate
}

func readDestRemove(c *cli.Context) *destRemoveOpts {
	return &destRemoveOpts{cmdLine: readCmdLine(c), force: c.Bool("force")}
}

func (o *destRemoveOpts) Validate() (err error) {
	o.name, err = o.destArg()
	return err
}

func (o *destRemoveOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	if err := st.RemoveIdle(ctx, o.name, o.force); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "removed destination %s\n", o.name)
	return nil
}

// rekeyOpts are the options of 'relay dest rekey' (the keys are global
// flags).
type rekeyOpts struct {
	cmdLine
}

func readRekey(c *cli.Context) *rekeyOpts { return &rekeyOpts{cmdLine: readCmdLine(c)} }

func (o *rekeyOpts) Validate() error {
	return o.noArgs(fmt.Sprintf("dest rekey takes no arguments; got %d", len(o.args)))
}

func (o *rekeyOpts) Run(ctx context.Context, e *env) error {
	key, _, err := e.global.secretKeys()
	if err != nil {
		return err
	}
	if key == nil {
		return usagef("dest rekey seals with the secret key: give it with --secret-key (RELAY_SECRET_KEY) or --secret-key-file, and the old one with --previous-secret-key")
	}
	ctx, cl, st, err := e.openDests(ctx, 5*time.Minute)
	if err != nil {
		return err
	}
	defer cl.close()
	res, err := st.Rekey(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "resealed with the current key: %s; already sealed with it or without a secret: %d\n", destinations(len(res.Resealed)), len(res.Current))
	if len(res.Failed) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(res.Failed))
	sealed := 0
	for _, n := range names {
		fmt.Fprintf(e.errOut, "%s: %v\n", n, res.Failed[n])
		if errors.Is(res.Failed[n], destination.ErrSealed) {
			sealed++
		}
	}
	hint := "see why above"
	if sealed > 0 {
		hint = "give the key a secret is sealed with as --previous-secret-key"
	}
	return fmt.Errorf("%s not resealed (%s): their secrets stay as they were; %s", destinations(len(names)), strings.Join(names, ", "), hint)
}
