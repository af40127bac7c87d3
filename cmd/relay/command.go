package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/stream"
)

// command is one CLI command's options. A small function copies them from
// the command line, without checking anything; Validate checks them (a
// usageError, exit 2, for bad input), filling in the values it parses; Run
// does the work, writing only to env's writers.
type command interface {
	Validate() error
	Run(ctx context.Context, e *env) error
}

// action is the Action of a command whose options read copies from the
// command line: read, Validate, then Run with a context cancelled on SIGINT
// or SIGTERM.
func action[T command](read func(c *cli.Context) T) cli.ActionFunc {
	return func(c *cli.Context) error {
		opts := read(c)
		if err := opts.Validate(); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return opts.Run(ctx, newEnv(c))
	}
}

// cmdLine is what every command's options keep of its command line.
type cmdLine struct {
	path string   // the command as typed after "relay", e.g. "dest add"
	args []string // the positional arguments
	// tenant is --tenant, of the commands that take one (tenantFlag).
	tenant string
}

func readCmdLine(c *cli.Context) cmdLine {
	return cmdLine{path: commandPath(c), args: c.Args().Slice(), tenant: c.String("tenant")}
}

// tenantFlag is --tenant of a command about a tenant's destinations.
func tenantFlag() cli.Flag {
	return &cli.StringFlag{Name: "tenant", EnvVars: []string{"RELAY_TENANT"}, Usage: "the tenant whose destinations the command is about (default: those of no tenant)"}
}

// destArg is the command's only argument, a destination's name, as relay
// refers to it: with --tenant, that tenant's destination of that name
// (stream.DestRef).
func (l cmdLine) destArg() (string, error) {
	name, err := l.oneArg("NAME")
	if err != nil {
		return "", err
	}
	return l.destRef("NAME", name)
}

// destRef is destination name, given as what, of --tenant (if given).
func (l cmdLine) destRef(what, name string) (string, error) {
	if l.tenant != "" {
		if err := stream.ValidateTenantID(l.tenant); err != nil {
			return "", usagef("--tenant: %v", err)
		}
	}
	if strings.Contains(name, stream.RefSep) {
		return "", usagef("%s %q: a tenant's destination is named with --tenant TENANT and its name", what, name)
	}
	return stream.DestRef(l.tenant, name), nil
}

// missing is the error of a required flag that was not given.
func (l cmdLine) missing(flag string) error {
	return usagef("--%s is required (see 'relay %s --help')", flag, l.path)
}

// oneArg is the command's only argument, what it names.
func (l cmdLine) oneArg(what string) (string, error) {
	if len(l.args) != 1 {
		return "", usagef("expected exactly one argument, %s; got %d", what, len(l.args))
	}
	a := strings.TrimSpace(l.args[0])
	if a == "" {
		return "", usagef("%s must not be empty", what)
	}
	return a, nil
}

// noArgs refuses positional arguments with msg.
func (l cmdLine) noArgs(msg string) error {
	if len(l.args) > 0 {
		return usageError{msg}
	}
	return nil
}

// env is what a command runs with beside its options: the standard streams
// and the global flags.
type env struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	global globalOpts
}

func newEnv(c *cli.Context) *env {
	return &env{in: c.App.Reader, out: c.App.Writer, errOut: c.App.ErrWriter, global: readGlobals(c)}
}

// globalOpts are the global flags: connection, secret keys and logging.
type globalOpts struct {
	natsURL string
	conn    stream.ConnConfig // all but the URL

	secretKey, secretKeyFile     string
	previousKey, previousKeyFile string

	logLevel, logFormat string
}

func readGlobals(c *cli.Context) globalOpts {
	return globalOpts{
		natsURL: c.String("nats-url"),
		conn: stream.ConnConfig{
			Name:      "relay " + c.Command.Name,
			CredsFile: c.String("nats-creds"),
			NKeyFile:  c.String("nats-nkey"),
			User:      c.String("nats-user"),
			Password:  c.String("nats-password"),
			Token:     c.String("nats-token"),
			TLSCA:     c.String("tls-ca"),
			TLSCert:   c.String("tls-cert"),
			TLSKey:    c.String("tls-key"),
		},
		secretKey:       c.String("secret-key"),
		secretKeyFile:   c.String("secret-key-file"),
		previousKey:     c.String("previous-secret-key"),
		previousKeyFile: c.String("previous-secret-key-file"),
		logLevel:        c.String("log-level"),
		logFormat:       c.String("log-format"),
	}
}

// connConfig is the connection to url the global flags describe.
func (g globalOpts) connConfig(url string) stream.ConnConfig {
	cc := g.conn
	cc.URL = url
	return cc
}

// logger is the logger of --log-level and --log-format, writing to the
// error stream.
func (e *env) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(e.global.logLevel)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", e.global.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch e.global.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(e.errOut, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.errOut, opts)), nil
	}
	return nil, usagef("--log-format %q: use text or json", e.global.logFormat)
}

// secretKeys reads the secret key and the previous one (during a key
// rotation; previous is nil or holds it), each from its flag, its
// environment variable or its file.
func (g globalOpts) secretKeys() (key []byte, previous [][]byte, err error) {
	key, err = keyFrom("secret-key", "RELAY_SECRET_KEY", g.secretKey, g.secretKeyFile)
	if err != nil {
		return nil, nil, err
	}
	prev, err := keyFrom("previous-secret-key", "RELAY_PREVIOUS_SECRET_KEY", g.previousKey, g.previousKeyFile)
	if err != nil || prev == nil {
		return key, nil, err
	}
	if key == nil {
		return nil, nil, usagef("--previous-secret-key is the old key of a rotation: give the new one too (--secret-key or --secret-key-file)")
	}
	return key, [][]byte{prev}, nil
}

// keyFrom reads one key, given as --flag (k) or --flag-file (f).
func keyFrom(flag, env, k, f string) ([]byte, error) {
	if k != "" && f != "" {
		return nil, usagef("give the %s once: --%s (%s) or --%s-file", strings.ReplaceAll(flag, "-", " "), flag, env, flag)
	}
	if f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--%s-file: %w", flag, err)
		}
		k = strings.TrimSpace(string(b))
		if k == "" {
			return nil, fmt.Errorf("--%s-file %s is empty", flag, f)
		}
	}
	if k == "" {
		return nil, nil
	}
	if len(k) < destination.MinKeyLen {
		return nil, usagef("the %s is %d bytes; use at least %d random bytes (openssl rand -base64 32)", strings.ReplaceAll(flag, "-", " "), len(k), destination.MinKeyLen)
	}
	return []byte(k), nil
}

// client is a client command's connection to NATS.
type client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	g      globalOpts
	cancel context.CancelFunc
}

// dial connects a client command to NATS (--nats-url, or the default
// address). The context it returns ends after limit, so a command never
// hangs forever; close closes the connection and ends the context.
func (e *env) dial(ctx context.Context, limit time.Duration) (context.Context, *client, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	url := e.global.natsURL
	if url == "" {
		url = defaultNATSURL
	}
	nc, err := stream.Connect(e.global.connConfig(url))
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("%w (is 'relay run' running? set --nats-url or RELAY_NATS_URL)", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		cancel()
		return nil, nil, err
	}
	return ctx, &client{nc: nc, js: js, g: e.global, cancel: cancel}, nil
}

func (cl *client) close() {
	cl.nc.Close()
	cl.cancel()
}

// dests opens the destination store with the secret keys, if any (opts
// after them).
func (cl *client) dests(ctx context.Context, opts ...destination.StoreOption) (*destination.Store, error) {
	key, previous, err := cl.g.secretKeys()
	if err != nil {
		return nil, err
	}
	return destination.NewStore(ctx, cl.js, append([]destination.StoreOption{destination.WithSecretKey(key, previous...)}, opts...)...)
}

// deadLetters opens the dead-letter store.
func (cl *client) deadLetters(ctx context.Context) (*dlq.Store, error) {
	return dlq.Open(ctx, cl.js)
}

// openDests is dial, then the destination store.
func (e *env) openDests(ctx context.Context, limit time.Duration, opts ...destination.StoreOption) (context.Context, *client, *destination.Store, error) {
	ctx, cl, err := e.dial(ctx, limit)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := cl.dests(ctx, opts...)
	if err != nil {
		cl.close()
		return nil, nil, nil, err
	}
	return ctx, cl, st, nil
}

// openDeadLetters is dial, then the dead-letter store.
func (e *env) openDeadLetters(ctx context.Context, limit time.Duration) (context.Context, *client, *dlq.Store, error) {
	ctx, cl, err := e.dial(ctx, limit)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := cl.deadLetters(ctx)
	if err != nil {
		cl.close()
		return nil, nil, nil, err
	}
	return ctx, cl, st, nil
}

// setOnly is the value of flag name if it was given, else nil.
func setOnly[T any](c *cli.Context, name string, get func(string) T) *T {
	if !c.IsSet(name) {
		return nil
	}
	v := get(name)
	return &v
}
