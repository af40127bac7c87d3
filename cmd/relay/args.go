package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves the positional arguments of the command that args
// select behind its flags, so "relay dest add NAME --url U" works: urfave/cli
// v2 stops reading flags at the first positional argument. Global flags given
// before the command ("relay --nats-url U stats") move behind it too, where
// the command, which defines them as well, reads them.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	// before[k] are the flags given before path[k] (before[len(path)] those
	// after the last command name, up to its first positional argument).
	var path []string
	before := [][][]string{nil}
	i := 1
	flags, cmds := app.Flags, app.Commands
	for i < len(args) {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			c := findCommand(cmds, a)
			if c == nil {
				break
			}
			path = append(path, a)
			before = append(before, nil)
			flags, cmds = c.Flags, c.Subcommands
			i++
			continue
		}
		flag := []string{a}
		i++
		if takesValue(flags, a) && i < len(args) {
			flag = append(flag, args[i])
			i++
		}
		before[len(path)] = append(before[len(path)], flag)
	}
	// flags are now the selected command's: move the global flags it
	// defines from before it to behind it, in their order, ahead of its
	// own (so one given after the command wins).
	var moved []string
	out := []string{args[0]}
	for k := range path {
		for _, flag := range before[k] {
			if name := flagName(flag[0]); isGlobalFlag(name) && defines(flags, name) {
				moved = append(moved, flag...)
			} else {
				out = append(out, flag...)
			}
		}
		out = append(out, path[k])
	}
	out = append(out, moved...)
	for _, flag := range before[len(path)] {
		out = append(out, flag...)
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

// flagName is the name in a flag argument: "--nats-url=u" gives "nats-url".
func flagName(a string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	return name
}

// defines reports whether flags has one named name.
func defines(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
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
