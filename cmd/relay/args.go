package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves the positional arguments of the command that args
// select behind its flags, so "relay dest add NAME --url U" works: urfave/cli
// v2 stops reading flags at the first positional argument.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	i := 1
	// Global flags, then the command path.
	flags, cmds := app.Flags, app.Commands
	for i < len(args) {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			c := findCommand(cmds, a)
			if c == nil {
				break
			}
			out = append(out, a)
			flags, cmds = c.Flags, c.Subcommands
			i++
			continue
		}
		out = append(out, a)
		i++
		if takesValue(flags, a) && i < len(args) {
			out = append(out, args[i])
			i++
		}
	}
	var pos []string
	for i < len(args) {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			out = append(out, a)
			i++
			if takesValue(flags, a) && i < len(args) {
				out = append(out, args[i])
				i++
			}
			continue
		}
		pos = append(pos, a)
		i++
	}
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name || c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether the flag argument a (like "--url" or "-H") needs
// the next argument as its value.
func takesValue(flags []cli.Flag, a string) bool {
	if strings.Contains(a, "=") {
		return false
	}
	name := strings.TrimLeft(a, "-")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			switch f.(type) {
			case *cli.BoolFlag:
				return false
			}
			if ht, ok := f.(interface{ TakesValue() bool }); ok {
				return ht.TakesValue()
			}
			return true
		}
	}
	return false
}
