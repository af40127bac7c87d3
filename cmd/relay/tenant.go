package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/api"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/tenant"
)

func tenantCommand() *cli.Command {
	return &cli.Command{
		Name:  "tenant",
		Usage: "manage tenants: the operator's customers, each with its own destinations (docs/tenants.md)",
		Subcommands: []*cli.Command{
			{
				Name:      "put",
				Usage:     "create the tenant ID, or replace its name, metadata, defaults, limits and portal settings (an upsert)",
				ArgsUsage: "ID",
				Description: "The --default-* settings are what the tenant's new destinations take where 'dest add' gives\n" +
					"none (relay's own defaults where the tenant has none either). The limits bound the tenant's\n" +
					"destinations, its publish rate over HTTP and its attempts in flight (0: no limit). The\n" +
					"--portal-* settings are how the customer portal shows itself to the tenant's customers, and\n" +
					"which of their sites may embed it (docs/portal.md).",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Usage: "the tenant's name, for people"},
					&cli.GenericFlag{Name: "metadata", Value: &listValue{}, Usage: "KEY=VALUE kept with the tenant (repeatable; a value may hold commas)"},
					&cli.IntFlag{Name: "default-max-attempts", Usage: "its new destinations' attempts per event"},
					&cli.DurationFlag{Name: "default-backoff-base", Usage: "its new destinations' first retry wait"},
					&cli.DurationFlag{Name: "default-backoff-max", Usage: "its new destinations' longest retry wait"},
					&cli.DurationFlag{Name: "default-timeout", Usage: "its new destinations' attempt timeout"},
					&cli.Float64Flag{Name: "default-rate-limit", Usage: "its new destinations' requests per second"},
					&cli.IntFlag{Name: "default-concurrency", Usage: "its new destinations' deliveries in flight per replica"},
					&cli.StringFlag{Name: "default-signature", Usage: "how its new destinations sign, those its customers add from the portal too: hmac, ed25519 or both"},
					&cli.IntFlag{Name: "max-destinations", Usage: "the most destinations it may have"},
					&cli.Float64Flag{Name: "publish-rate", Usage: "the most events per second published for it over HTTP (429 beyond)"},
					&cli.IntFlag{Name: "max-in-flight", Usage: "the most attempts under way at once across its destinations"},
					&cli.StringFlag{Name: "portal-product-name", Usage: "the product name shown in the portal's header"},
					&cli.StringFlag{Name: "portal-accent-color", Usage: "the portal's accent color, #rrggbb"},
					&cli.GenericFlag{Name: "portal-frame-ancestor", Value: &listValue{}, Usage: "an origin allowed to embed the portal in an iframe, such as https://app.example.com or https://*.example.com (repeatable)"},
					&cli.BoolFlag{Name: "json", Usage: "print the tenant as JSON"},
				},
				Action: action(readTenantPut),
			},
			{
				Name:      "get",
				Usage:     "show a tenant",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print it as JSON"}},
				Action:    action(readTenantGet),
			},
			{
				Name:   "list",
				Usage:  "list the tenants, in the order of their ids",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
				Action: action(readTenantList),
			},
			{
				Name:      "delete",
				Usage:     "delete a tenant: its API keys, its record and its destinations",
				ArgsUsage: "ID",
				Description: "Refused while the tenant's destinations have events not yet delivered, unless --force:\n" +
					"those events then stay in the events stream, undelivered, until its retention ends.",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "delete even with events not yet delivered"}},
				Action: action(readTenantDelete),
			},
		},
	}
}

// openTenants is dial, then the tenant store.
func (e *env) openTenants(ctx context.Context) (context.Context, *client, *tenant.Store, error) {
	ctx, cl, err := e.dial(ctx, 30*time.Second)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := tenant.Open(ctx, cl.js, nil)
	if err != nil {
		cl.close()
		return nil, nil, nil, err
	}
	return ctx, cl, s, nil
}

// tenantUsage makes a tenant's invalid field a usage error naming its flag.
func tenantUsage(err error) error {
	var fe *tenant.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	flag := "--" + fe.Field
	switch {
	case fe.Field == "id":
		return usagef("%s", fe.Reason)
	case strings.HasPrefix(fe.Field, "metadata."):
		flag = "--metadata " + strings.TrimPrefix(fe.Field, "metadata.")
	case strings.HasPrefix(fe.Field, "defaults."):
		flag = "--default-" + strings.ReplaceAll(strings.TrimPrefix(fe.Field, "defaults."), "_", "-")
	case strings.HasPrefix(fe.Field, "limits."):
		flag = "--" + strings.ReplaceAll(strings.TrimPrefix(fe.Field, "limits."), "_", "-")
	case fe.Field == "portal.frame_ancestors":
		flag = "--portal-frame-ancestor"
	case strings.HasPrefix(fe.Field, "portal."):
		flag = "--portal-" + strings.ReplaceAll(strings.TrimPrefix(fe.Field, "portal."), "_", "-")
	}
	return usagef("%s: %s", flag, fe.Reason)
}

type tenantPutOpts struct {
	cmdLine
	name     string
	metadata *[]string
	json     bool
	defaults tenant.Defaults
	limits   tenant.Limits
	portal   tenant.Portal

	t tenant.Tenant // Validate
}

func readTenantPut(c *cli.Context) *tenantPutOpts {
	o := &tenantPutOpts{cmdLine: readCmdLine(c), name: c.String("name"), metadata: listOf(c, "metadata"), json: c.Bool("json"),
		defaults: tenant.Defaults{MaxAttempts: c.Int("default-max-attempts"), BackoffBase: destination.Duration(c.Duration("default-backoff-base")),
			BackoffMax: destination.Duration(c.Duration("default-backoff-max")), Timeout: destination.Duration(c.Duration("default-timeout")),
			RateLimit: c.Float64("default-rate-limit"), Concurrency: c.Int("default-concurrency"), Signature: c.String("default-signature")},
		limits: tenant.Limits{MaxDestinations: c.Int("max-destinations"), PublishRate: c.Float64("publish-rate"), MaxInFlight: c.Int("max-in-flight")},
		portal: tenant.Portal{ProductName: c.String("portal-product-name"), AccentColor: c.String("portal-accent-color")}}
	if l := listOf(c, "portal-frame-ancestor"); l != nil {
		o.portal.FrameAncestors = *l
	}
	return o
}

func (o *tenantPutOpts) Validate() error {
	id, err := o.oneArg("ID")
	if err != nil {
		return err
	}
	o.t = tenant.Tenant{ID: id, Name: o.name, Defaults: o.defaults, Limits: o.limits, Portal: o.portal}
	if o.metadata != nil {
		o.t.Metadata = map[string]string{}
		for _, kv := range *o.metadata {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return usagef("--metadata %q: give KEY=VALUE", kv)
			}
			if _, dup := o.t.Metadata[k]; dup {
				return usagef("--metadata %s given twice", k)
			}
			o.t.Metadata[k] = v
		}
	}
	return tenantUsage(o.t.Validate())
}

func (o *tenantPutOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openTenants(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	t, created, err := s.Put(ctx, o.t)
	if err != nil {
		return tenantUsage(err)
	}
	if o.json {
		return jsonLines(e.out, []tenant.Tenant{t}, func(t tenant.Tenant) any { return t })
	}
	verb := "updated"
	if created {
		verb = "created"
	}
	fmt.Fprintf(e.out, "%s tenant %s\n", verb, t.ID)
	return nil
}

type tenantGetOpts struct {
	cmdLine
	json bool
	id   string // Validate
}

func readTenantGet(c *cli.Context) *tenantGetOpts {
	return &tenantGetOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *tenantGetOpts) Validate() (err error) {
	o.id, err = o.oneArg("ID")
	return err
}

func (o *tenantGetOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openTenants(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	t, err := s.Get(ctx, o.id)
	if err != nil {
		return err
	}
	if o.json {
		return jsonLines(e.out, []tenant.Tenant{t}, func(t tenant.Tenant) any { return t })
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nname\t%s\ncreated\t%s\nupdated\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339), t.UpdatedAt.Format(time.RFC3339))
	for _, k := range slices.Sorted(maps.Keys(t.Metadata)) {
		fmt.Fprintf(tw, "metadata %s\t%s\n", k, t.Metadata[k])
	}
	return tw.Flush()
}

type tenantListOpts struct {
	cmdLine
	json bool
}

func readTenantList(c *cli.Context) *tenantListOpts {
	return &tenantListOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *tenantListOpts) Validate() error {
	return o.noArgs("tenant list takes no arguments")
}

func (o *tenantListOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openTenants(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	var tw *tabwriter.Writer
	if !o.json {
		tw = tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCREATED")
	}
	for after := ""; ; {
		page, next, err := s.List(ctx, after, 1000)
		if err != nil {
			return err
		}
		if o.json {
			if err := jsonLines(e.out, page, func(t tenant.Tenant) any { return t }); err != nil {
				return err
			}
		} else {
			for _, t := range page {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339))
			}
		}
		if next == "" {
			break
		}
		after = next
	}
	if tw != nil {
		return tw.Flush()
	}
	return nil
}

type tenantDeleteOpts struct {
	cmdLine
	force bool
	id    string // Validate
}

func readTenantDelete(c *cli.Context) *tenantDeleteOpts {
	return &tenantDeleteOpts{cmdLine: readCmdLine(c), force: c.Bool("force")}
}

func (o *tenantDeleteOpts) Validate() (err error) {
	o.id, err = o.oneArg("ID")
	return err
}

func (o *tenantDeleteOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, s, err := e.openTenants(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	keys, err := api.OpenKeys(ctx, cl.js)
	if err != nil {
		return err
	}
	dests, err := destination.NewStore(ctx, cl.js)
	if err != nil {
		return err
	}
	ps, err := portal.Open(ctx, cl.js, nil)
	if err != nil {
		return err
	}
	removed, err := api.DeleteTenant(ctx, api.TenantDeletion{Tenants: s, Keys: keys, Dests: dests, Portal: ps, ID: o.id, Force: o.force})
	var pe *api.TenantPendingError
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("%w: add --force to delete it anyway", pe)
	case err != nil && removed.Deleted:
		return fmt.Errorf("tenant %s is deleted, but of its destinations only %d were removed (run this again to remove the others): %w", o.id, removed.Destinations, err)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.out, "deleted tenant %s, its %d API keys and its %d destinations\n", o.id, removed.Keys, removed.Destinations)
	return nil
}
