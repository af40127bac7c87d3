package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/api"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/tenant"
)

func apiKeyCommand() *cli.Command {
	return &cli.Command{
		Name:  "api-key",
		Usage: "manage the HTTP API's keys (only a hash of each is stored)",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create a key and print it, the only time it is shown",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Usage: "the key's name, unique, in logs and 'api-key list' (required)"},
					&cli.StringFlag{Name: "scope", Usage: "publish (publish events only), read (read everything but secrets) or admin (everything) (required)"},
					&cli.StringFlag{Name: "tenant", Usage: "confine the key to this tenant: it sees and changes that tenant's resources only (default: a key of no tenant)"},
				},
				Action: action(readAPIKeyCreate),
			},
			{
				Name:   "list",
				Usage:  "list the keys: name, scope, id, created (never the key)",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
				Action: action(readAPIKeyList),
			},
			{
				Name:      "revoke",
				Usage:     "delete a key: requests with it fail from then on",
				ArgsUsage: "NAME",
				Action:    action(readAPIKeyRevoke),
			},
		},
	}
}

// openKeys is dial, then the key store.
func (e *env) openKeys(ctx context.Context) (context.Context, *client, *api.Keys, error) {
	ctx, cl, err := e.dial(ctx, 30*time.Second)
	if err != nil {
		return nil, nil, nil, err
	}
	k, err := api.OpenKeys(ctx, cl.js)
	if err != nil {
		cl.close()
		return nil, nil, nil, err
	}
	return ctx, cl, k, nil
}

type apiKeyCreateOpts struct {
	cmdLine
	name, scopeText string

	scope api.Scope // Validate
}

func readAPIKeyCreate(c *cli.Context) *apiKeyCreateOpts {
	return &apiKeyCreateOpts{cmdLine: readCmdLine(c), name: c.String("name"), scopeText: c.String("scope")}
}

func (o *apiKeyCreateOpts) Validate() (err error) {
	if err := o.noArgs("api-key create takes no arguments: give --name and --scope"); err != nil {
		return err
	}
	switch {
	case o.name == "":
		return o.missing("name")
	case o.scopeText == "":
		return o.missing("scope")
	}
	if err := api.ValidateName(o.name); err != nil {
		return usagef("--name: %v", err)
	}
	if o.scope, err = api.ParseScope(o.scopeText); err != nil {
		return usagef("--scope: %v", err)
	}
	if o.tenant != "" {
		if err := stream.ValidateTenantID(o.tenant); err != nil {
			return usagef("--tenant: %v", err)
		}
	}
	return nil
}

func (o *apiKeyCreateOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, keys, err := e.openKeys(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	if o.tenant != "" {
		ts, err := tenant.Open(ctx, cl.js, nil)
		if err != nil {
			return err
		}
		if _, err := ts.Get(ctx, o.tenant); errors.Is(err, tenant.ErrNotFound) {
			return usagef("--tenant: %v (create it first with 'relay tenant put %s')", err, o.tenant)
		} else if err != nil {
			return err
		}
	}
	key, rec, err := keys.CreateFor(ctx, o.tenant, o.name, o.scope)
	if err != nil {
		return err
	}
	if rec.Tenant != "" {
		fmt.Fprintf(e.out, "created API key %s of tenant %s (scope %s, id %s)\n", rec.Name, rec.Tenant, rec.Scope, rec.ID)
	} else {
		fmt.Fprintf(e.out, "created API key %s (scope %s, id %s)\n", rec.Name, rec.Scope, rec.ID)
	}
	fmt.Fprintf(e.out, "key (shown once; send it as 'Authorization: Bearer <key>'): %s\n", key)
	return nil
}

type apiKeyListOpts struct {
	cmdLine
	json bool
}

func readAPIKeyList(c *cli.Context) *apiKeyListOpts {
	return &apiKeyListOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *apiKeyListOpts) Validate() error {
	return o.noArgs("api-key list takes no arguments")
}

func (o *apiKeyListOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, keys, err := e.openKeys(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	all, err := keys.List(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return jsonLines(e.out, all, func(k api.Key) any { return k })
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPE\tTENANT\tID\tCREATED")
	for _, k := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.Name, k.Scope, cmp.Or(k.Tenant, "-"), k.ID, k.Created.Format(time.RFC3339))
	}
	return tw.Flush()
}

type apiKeyRevokeOpts struct {
	cmdLine
	name string // Validate
}

func readAPIKeyRevoke(c *cli.Context) *apiKeyRevokeOpts {
	return &apiKeyRevokeOpts{cmdLine: readCmdLine(c)}
}

func (o *apiKeyRevokeOpts) Validate() (err error) {
	o.name, err = o.oneArg("NAME")
	return err
}

func (o *apiKeyRevokeOpts) Run(ctx context.Context, e *env) error {
	ctx, cl, keys, err := e.openKeys(ctx)
	if err != nil {
		return err
	}
	defer cl.close()
	k, err := keys.Revoke(ctx, o.name)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "revoked API key %s (id %s)\n", k.Name, k.ID)
	return nil
}
