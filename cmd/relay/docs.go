package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// docsCommand prints reference documentation generated from the CLI
// definition. It is hidden: it is for relay's maintainers, and
// TestCLIDocsUpToDate fails when docs/cli.md differs from its output.
func docsCommand() *cli.Command {
	return &cli.Command{
		Name:   "docs",
		Usage:  "print generated documentation",
		Hidden: true,
		Subcommands: []*cli.Command{
			{
				Name:   "cli",
				Usage:  "print the CLI reference in Markdown (docs/cli.md)",
				Action: action(func(c *cli.Context) *docsCLIOpts { return &docsCLIOpts{readCmdLine(c)} }),
			},
		},
	}
}

// docsCLIOpts are the options of 'relay docs cli'.
type docsCLIOpts struct{ cmdLine }

func (o *docsCLIOpts) Validate() error { return o.noArgs("docs cli takes no arguments") }

func (o *docsCLIOpts) Run(_ context.Context, e *env) error { return writeCLIDocs(e.out) }

// regenerateCLIDocs is the command that writes docs/cli.md.
const regenerateCLIDocs = "make docs (go run ./cmd/relay docs cli > docs/cli.md)"

// exitCodes are relay's exit codes, documented in docs/cli.md.
var exitCodes = []struct {
	code int
	what string
}{
	{exitOK, "success"},
	{exitError, "an error (the message says what to do)"},
	{exitUsage, "a usage error: a bad flag or argument; nothing was changed"},
}

// writeCLIDocs writes the Markdown reference of every visible command of a
// freshly built App (one that has not run, so no flag holds a value read
// from the environment): the global flags once, then each command in the
// CLI's order with its own flags in their order.
func writeCLIDocs(out io.Writer) error {
	app := App(nil, io.Discard, io.Discard)
	w := bufio.NewWriter(out)
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }

	p("<!-- Generated from the CLI definition by %s. Do not edit. -->\n\n", regenerateCLIDocs)
	p("# relay CLI reference\n\n")
	p("%s\n\n", mdText(app.Usage))
	p("```\nrelay [global flags] COMMAND [flags] [arguments]\n```\n\n")
	p("Flags may come before or after a command's arguments. Every flag can also be set through\n")
	p("the environment variable listed with it. `relay COMMAND --help` prints the same reference.\n\n")

	p("## Commands\n\n")
	var index func(cmds []*cli.Command, path string, depth int)
	index = func(cmds []*cli.Command, path string, depth int) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			full := path + " " + c.Name
			p("%s- [`%s`](#%s): %s\n", strings.Repeat("  ", depth), full, anchor(full), mdText(c.Usage))
			index(c.Subcommands, full, depth+1)
		}
	}
	index(app.Commands, "relay", 0)
	p("\n")

	p("## Exit codes\n\n")
	p("| Code | Meaning |\n|---|---|\n")
	for _, e := range exitCodes {
		p("| %d | %s |\n", e.code, cell(e.what))
	}
	p("\n")

	p("## Global flags\n\n")
	p("Given before or after the command: `relay --nats-url U stats` and `relay stats --nats-url U`\n")
	p("are the same. Every command takes them, except where its section says otherwise.\n\n")
	flagTable(w, app.Flags)

	var section func(cmds []*cli.Command, path string)
	section = func(cmds []*cli.Command, path string) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			full := path + " " + c.Name
			p("\n## %s\n\n", full)
			p("%s\n\n", mdText(c.Usage))
			synopsis := full
			if len(c.Subcommands) > 0 {
				synopsis += " COMMAND"
			}
			if own := ownFlags(c); len(own) > 0 {
				synopsis += " [flags]"
			}
			if c.ArgsUsage != "" {
				synopsis += " " + c.ArgsUsage
			}
			p("```\n%s\n```\n", synopsis)
			for _, para := range paragraphs(c.Description) {
				p("\n%s\n", mdText(para))
			}
			if len(c.Subcommands) > 0 {
				p("\nCommands:\n\n")
				for _, s := range c.Subcommands {
					if !s.Hidden {
						p("- [`%s`](#%s): %s\n", full+" "+s.Name, anchor(full+" "+s.Name), mdText(s.Usage))
					}
				}
			}
			if g := globalsOf(c); len(g) < len(app.Flags) {
				if len(g) == 0 {
					p("\nTakes none of the global flags.\n")
				} else {
					p("\nOf the global flags, takes only %s.\n", strings.Join(g, ", "))
				}
			}
			if own := ownFlags(c); len(own) > 0 {
				p("\n")
				flagTable(w, own)
			}
			section(c.Subcommands, full)
		}
	}
	section(app.Commands, "relay")
	return w.Flush()
}

// isGlobal reports whether f is one of the global flags that finish adds
// to every command.
func isGlobal(f cli.Flag) bool {
	sf, ok := f.(*cli.StringFlag)
	return ok && sf.Category == globalCategory && isGlobalFlag(f.Names()[0])
}

// ownFlags are c's visible flags but the global ones, in c's order.
func ownFlags(c *cli.Command) []cli.Flag {
	var own []cli.Flag
	for _, f := range c.Flags {
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue
		}
		if !isGlobal(f) {
			own = append(own, f)
		}
	}
	return own
}

// globalsOf lists the global flags c takes, as `--name`, in c's order.
func globalsOf(c *cli.Command) []string {
	var g []string
	for _, f := range c.Flags {
		if isGlobal(f) {
			g = append(g, "`--"+f.Names()[0]+"`")
		}
	}
	return g
}

// flagTable writes a Markdown table of flags: name, aliases, environment
// variables, default and usage.
func flagTable(w io.Writer, flags []cli.Flag) {
	fmt.Fprintf(w, "| Flag | Aliases | Environment | Default | Usage |\n|---|---|---|---|---|\n")
	for _, f := range flags {
		names := f.Names()
		var aliases []string
		for _, a := range names[1:] {
			aliases = append(aliases, code(dashes(a)))
		}
		var env []string
		usage := ""
		if df, ok := f.(cli.DocGenerationFlag); ok {
			for _, e := range df.GetEnvVars() {
				env = append(env, code(e))
			}
			usage = df.GetUsage()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", code(dashes(names[0])), strings.Join(aliases, ", "),
			strings.Join(env, ", "), cell(defaultText(f)), cell(usage))
	}
}

// defaultText is what the flag's help shows as its default, without the
// quotes around a string, and empty for a zero value (false, 0, 0s) that
// the flag's definition does not spell out with DefaultText.
func defaultText(f cli.Flag) string {
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return ""
	}
	s := df.GetDefaultText()
	if sf, ok := f.(*cli.StringFlag); ok && sf.DefaultText == "" {
		if u, err := strconv.Unquote(s); err == nil {
			s = u
		}
	}
	switch s {
	case "false", "0", "0s":
		if !hasDefaultText(f) {
			return ""
		}
	}
	return s
}

// hasDefaultText reports whether f's definition sets DefaultText.
func hasDefaultText(f cli.Flag) bool {
	switch f := f.(type) {
	case *cli.StringFlag:
		return f.DefaultText != ""
	case *cli.BoolFlag:
		return f.DefaultText != ""
	case *cli.IntFlag:
		return f.DefaultText != ""
	case *cli.Int64Flag:
		return f.DefaultText != ""
	case *cli.Uint64Flag:
		return f.DefaultText != ""
	case *cli.Float64Flag:
		return f.DefaultText != ""
	case *cli.DurationFlag:
		return f.DefaultText != ""
	}
	return false
}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func code(s string) string { return "`" + s + "`" }

// anchor is the fragment GitHub gives the heading "## "+title.
func anchor(title string) string {
	return strings.ReplaceAll(strings.ToLower(title), " ", "-")
}

// paragraphs splits a description at its blank lines and joins the lines
// of each paragraph, so a line that starts with "-" or "1." does not turn
// into a Markdown list.
func paragraphs(s string) []string {
	var out []string
	for _, para := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if para = strings.Join(strings.Fields(para), " "); para != "" {
			out = append(out, para)
		}
	}
	return out
}

// mdText escapes what Markdown would read as markup in plain text: "<"
// (an HTML tag, as in whsec_<base64>) and a leading block marker.
func mdText(s string) string {
	s = strings.ReplaceAll(s, "<", "&lt;")
	if s != "" && strings.ContainsRune("#>+-*=", rune(s[0])) {
		s = `\` + s
	}
	return s
}

// cell escapes text for a table cell: "<" as in mdText, and "|", which
// ends the cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("<", "&lt;", "|", `\|`).Replace(s)
}
