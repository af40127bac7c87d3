package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/kind"
)

// readConfig parses --config NAME=VALUE and reads --config-file NAME=FILE
// into Settings.Config.
func (s *destSettings) readConfig() error {
	if s.config == nil && s.configFile == nil {
		return nil
	}
	cfg := map[string]string{}
	if s.config != nil {
		kv, err := parseKV("config", *s.config)
		if err != nil {
			return err
		}
		maps.Copy(cfg, kv)
	}
	if s.configFile != nil {
		files, err := parseKV("config-file", *s.configFile)
		if err != nil {
			return err
		}
		for name, path := range files {
			if _, dup := cfg[name]; dup {
				return usagef("--config %s and --config-file %s: give the field once", name, name)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return usagef("--config-file %s: %v", name, err)
			}
			cfg[name] = strings.TrimRight(string(b), "\r\n")
		}
	}
	s.Config = cfg
	return nil
}

// targetText shows a non-HTTP destination's target: its kind and config,
// credentials by name only.
func targetText(d destination.Destination) string {
	var b strings.Builder
	b.WriteString(d.Kind)
	for _, k := range slices.Sorted(maps.Keys(d.Config)) {
		fmt.Fprintf(&b, " %s=%s", k, d.Config[k])
	}
	for _, k := range slices.Sorted(maps.Keys(d.Credentials)) {
		fmt.Fprintf(&b, " %s=(set)", k)
	}
	return b.String()
}

func destTypesCommand() *cli.Command {
	return &cli.Command{
		Name:      "types",
		Usage:     "list the kinds of destination relay delivers to, or one kind's configuration fields",
		ArgsUsage: "[KIND]",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"}},
		Action:    action(readDestTypes),
	}
}

// destTypesOpts are the options of 'relay dest types'.
type destTypesOpts struct {
	cmdLine
	json bool
}

func readDestTypes(c *cli.Context) *destTypesOpts {
	return &destTypesOpts{cmdLine: readCmdLine(c), json: c.Bool("json")}
}

func (o *destTypesOpts) Validate() error {
	if len(o.args) > 1 {
		return usagef("give one kind at most")
	}
	if len(o.args) == 1 && o.args[0] != kind.HTTP {
		if _, ok := kind.Lookup(o.args[0]); !ok {
			return usagef("unknown kind %q: use one of %s", o.args[0], strings.Join(kind.Names(), ", "))
		}
	}
	return nil
}

func (o *destTypesOpts) Run(_ context.Context, e *env) error {
	type view struct {
		Name   string       `json:"name"`
		Title  string       `json:"title"`
		Fields []kind.Field `json:"fields"`
	}
	var out []view
	if len(o.args) == 0 || o.args[0] == kind.HTTP {
		out = append(out, view{Name: kind.HTTP, Title: "HTTP (webhooks): a POST per event to --url; its settings are the flags of 'relay dest add'", Fields: []kind.Field{}})
	}
	for _, k := range kind.All() {
		if len(o.args) == 0 || o.args[0] == k.Name() {
			out = append(out, view{Name: k.Name(), Title: k.Title() + ": " + k.Description(), Fields: k.Fields()})
		}
	}
	if o.json {
		return jsonLines(e.out, out, func(v view) any { return v })
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	for i, v := range out {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "%s\t%s\n", v.Name, v.Title)
		if len(o.args) == 0 {
			continue
		}
		for _, f := range v.Fields {
			var notes []string
			if f.Required {
				notes = append(notes, "required")
			}
			if f.Sensitive {
				notes = append(notes, "credential")
			}
			if f.Default != "" {
				notes = append(notes, "default "+f.Default)
			}
			if len(f.Values) > 0 {
				notes = append(notes, "one of "+strings.Join(f.Values, ", "))
			}
			note := ""
			if len(notes) > 0 {
				note = " (" + strings.Join(notes, "; ") + ")"
			}
			fmt.Fprintf(tw, "  --config %s=%s\t%s%s\n", f.Name, strings.ToUpper(string(f.Type)), f.Help, note)
		}
	}
	return tw.Flush()
}
