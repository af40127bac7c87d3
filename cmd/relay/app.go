package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/internal/version"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake in how relay was called (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Main runs the relay CLI with args (args[0] is the program name) and returns
// the exit code: 0 success, 1 error, 2 usage error.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := App(stdin, stdout, stderr)
	err := app.Run(interspersed(app, args))
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "relay: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitError
}

const defaultNATSURL = "nats://127.0.0.1:4222"

// App builds the CLI. Tests call it with buffers.
func App(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "relay",
		Usage:     "deliver events from NATS JetStream to HTTP destinations, and never lose one",
		Version:   version.Get().Version,
		Reader:    stdin,
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by Main, with the right exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return flagUsageError(c, err)
		},
		Flags: globalFlags(),
		// Reached without a command, or with one relay does not know.
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("unknown command %q (see 'relay --help')", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		Commands: finish([]*cli.Command{
			versionCommand(),
			runCommand(),
			publishCommand(),
			destCommand(),
			dlqCommand(),
			replayCommand(),
			statsCommand(),
			attemptsCommand(),
			eventsCommand(),
			apiKeyCommand(),
			tenantCommand(),
			eventTypeCommand(),
			sinkCommand(),
			docsCommand(),
		}, ""),
	}
}

// globalCategory groups the global flags in every command's help.
const globalCategory = "global (before or after the command)"

// globalFlags are the connection, secret key and log flags. They are defined
// on the app and again on every command (a fresh copy each: urfave/cli
// records in a flag whether it was set), so "relay run --nats-url U" works
// like "relay --nats-url U run" and each command's help lists them;
// interspersed moves those given before the command behind it, where the
// command reads them.
func globalFlags() []cli.Flag {
	fs := []cli.Flag{
		&cli.StringFlag{Name: "nats-url", EnvVars: []string{"RELAY_NATS_URL"}, Usage: "NATS server URL(s), comma-separated; 'relay run' without it starts an embedded server; other commands default to " + defaultNATSURL},
		&cli.StringFlag{Name: "nats-creds", EnvVars: []string{"RELAY_NATS_CREDS"}, Usage: "NATS credentials file", TakesFile: true},
		&cli.StringFlag{Name: "nats-nkey", EnvVars: []string{"RELAY_NATS_NKEY"}, Usage: "NATS NKey seed file", TakesFile: true},
		&cli.StringFlag{Name: "nats-user", EnvVars: []string{"RELAY_NATS_USER"}, Usage: "NATS user"},
		&cli.StringFlag{Name: "nats-password", EnvVars: []string{"RELAY_NATS_PASSWORD"}, Usage: "NATS password"},
		&cli.StringFlag{Name: "nats-token", EnvVars: []string{"RELAY_NATS_TOKEN"}, Usage: "NATS token"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"RELAY_TLS_CA"}, Usage: "CA bundle to verify the NATS server", TakesFile: true},
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"RELAY_TLS_CERT"}, Usage: "client certificate for NATS", TakesFile: true},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"RELAY_TLS_KEY"}, Usage: "client key for NATS", TakesFile: true},
		&cli.StringFlag{Name: "secret-key", EnvVars: []string{"RELAY_SECRET_KEY"}, Usage: "key that encrypts destination secrets at rest (at least 16 random bytes; prefer the environment variable or --secret-key-file)"},
		&cli.StringFlag{Name: "secret-key-file", EnvVars: []string{"RELAY_SECRET_KEY_FILE"}, Usage: "file holding the key that encrypts destination secrets at rest", TakesFile: true},
		&cli.StringFlag{Name: "previous-secret-key", EnvVars: []string{"RELAY_PREVIOUS_SECRET_KEY"}, Usage: "during a key rotation, the old key: secrets sealed with it still open, until 'relay dest rekey' seals them with the new one"},
		&cli.StringFlag{Name: "previous-secret-key-file", EnvVars: []string{"RELAY_PREVIOUS_SECRET_KEY_FILE"}, Usage: "file holding the previous key (see --previous-secret-key)", TakesFile: true},
		&cli.StringFlag{Name: "log-level", EnvVars: []string{"RELAY_LOG_LEVEL"}, Value: "info", Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", EnvVars: []string{"RELAY_LOG_FORMAT"}, Value: "text", Usage: "text or json"},
	}
	for _, f := range fs {
		f.(*cli.StringFlag).Category = globalCategory
	}
	return fs
}

// offlineCommands talk to no NATS server: of the global flags they take
// only the log ones.
var offlineCommands = map[string]bool{"sink": true, "version": true}

// withGlobalFlags appends the global flags c does not define itself.
func withGlobalFlags(c *cli.Command, path string) {
	own := map[string]bool{}
	for _, f := range c.Flags {
		for _, n := range f.Names() {
			own[n] = true
		}
	}
	for _, f := range globalFlags() {
		n := f.Names()[0]
		if own[n] || offlineCommands[strings.TrimPrefix(path, "_")] && !strings.HasPrefix(n, "log-") {
			continue
		}
		c.Flags = append(c.Flags, f)
	}
}

// isGlobalFlag reports whether name is one of globalFlags.
func isGlobalFlag(name string) bool {
	for _, f := range globalFlags() {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:   "version",
		Usage:  "print relay's version, the commit it was built from, the build date and the Go version",
		Action: action(func(c *cli.Context) *versionOpts { return &versionOpts{readCmdLine(c)} }),
	}
}

// versionOpts are the options of 'relay version'.
type versionOpts struct{ cmdLine }

func (o *versionOpts) Validate() error { return o.noArgs("version takes no arguments") }

func (o *versionOpts) Run(_ context.Context, e *env) error {
	fmt.Fprint(e.out, version.Get())
	return nil
}

// finish makes flag errors of every command usage errors (exit 2) and gives
// every flag without one an environment variable: RELAY_ and the command path
// and flag name in upper case, e.g. RELAY_DEST_ADD_URL.
func finish(cmds []*cli.Command, path string) []*cli.Command {
	for _, c := range cmds {
		c.OnUsageError = func(cc *cli.Context, err error, _ bool) error {
			return flagUsageError(cc, err)
		}
		p := path + "_" + c.Name
		if len(c.Subcommands) > 0 && c.Action == nil {
			// 'relay dest remove x': urfave/cli would say "No help topic
			// for 'remove'" and exit 1.
			c.Action = func(cc *cli.Context) error {
				if cc.NArg() > 0 {
					return usagef("unknown command %q for 'relay %s' (see 'relay %s --help')", cc.Args().First(), commandPath(cc), commandPath(cc))
				}
				return cli.ShowSubcommandHelp(cc)
			}
		}
		withGlobalFlags(c, p)
		for _, f := range c.Flags {
			setEnv(f, envName(p+"_"+f.Names()[0]))
		}
		finish(c.Subcommands, p)
	}
	return cmds
}

// badValue matches the flag package's error for a value a flag cannot
// parse: `invalid value "5" for flag -timeout: parse error`.
var badValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([a-z0-9-]+): parse error$`)

// flagUsageError is a flag parsing error as a usage error, saying what the
// flag takes where the flag package says only "parse error" (a duration
// needs a unit: "--timeout 5" is not one).
func flagUsageError(c *cli.Context, err error) error {
	if m := badValue.FindStringSubmatch(err.Error()); m != nil && c != nil && c.Command != nil {
		for _, f := range c.Command.Flags {
			if !slices.Contains(f.Names(), m[2]) {
				continue
			}
			want := ""
			switch f.(type) {
			case *cli.DurationFlag:
				want = "a duration with a unit, e.g. 5s, 500ms, 2m or 1h"
			case *cli.IntFlag, *cli.Int64Flag, *cli.Uint64Flag:
				want = "a whole number"
			case *cli.Float64Flag:
				want = "a number"
			}
			if want != "" {
				return usagef("--%s %q: not valid; give %s (see 'relay %s --help')", m[2], m[1], want, commandPath(c))
			}
		}
	}
	return usagef("%v (see --help)", err)
}

func envName(s string) string {
	return "RELAY" + strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

func setEnv(f cli.Flag, name string) {
	set := func(vars *[]string) {
		if len(*vars) == 0 {
			*vars = []string{name}
		}
	}
	switch f := f.(type) {
	case *cli.StringFlag:
		set(&f.EnvVars)
	case *cli.BoolFlag:
		set(&f.EnvVars)
	case *cli.IntFlag:
		set(&f.EnvVars)
	case *cli.Int64Flag:
		set(&f.EnvVars)
	case *cli.DurationFlag:
		set(&f.EnvVars)
	case *cli.Float64Flag:
		set(&f.EnvVars)
	case *cli.StringSliceFlag:
		set(&f.EnvVars)
	case *cli.Uint64Flag:
		set(&f.EnvVars)
	case *cli.Uint64SliceFlag:
		set(&f.EnvVars)
	case *cli.GenericFlag:
		set(&f.EnvVars)
	default:
		panic(fmt.Sprintf("relay: flag %s of type %T has no environment variable", f.Names()[0], f))
	}
}

// commandPath is the command c runs as typed after "relay", e.g. "dest add"
// (urfave/cli's FullName gives only "add" for a subcommand).
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name {
			names = append(names, x.Command.Name)
		}
	}
	slices.Reverse(names)
	return strings.Join(slices.Compact(names), " ")
}

// parseKV reads "K=V" arguments.
func parseKV(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef("--%s %q: expected NAME=VALUE", flag, v)
		}
		out[strings.TrimSpace(k)] = val
	}
	return out, nil
}
