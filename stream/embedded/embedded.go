// Package embedded starts the NATS server with JetStream inside relay's
// process: the one-binary default. It is the only package of relay that
// links nats-server, so that clients (the producer, api/client, receivers)
// never do.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures the NATS server that relay starts in-process when
// no external server is given.
type Config struct {
	// DataDir is where JetStream stores its files (DataDir/jetstream).
	// Required.
	DataDir string
	// Host to listen on. Optional, default 127.0.0.1.
	Host string
	// Port to listen on; -1 picks a free port. Optional, default 4222.
	Port int
	// SyncAlways makes JetStream fsync every write. Optional, default false:
	// the server fsyncs every 2 minutes, and a power loss can lose what was
	// acknowledged since (a process crash cannot).
	SyncAlways bool
	// User and Password, or Token, require clients to authenticate. Optional.
	User, Password, Token string
	// MaxMemory caps JetStream's memory storage. Optional, default 256 MiB
	// (relay stores on disk; without a cap the server reserves 75% of RAM).
	MaxMemory int64
	// MaxStore caps JetStream's file storage. Optional, default what the
	// server takes from the data directory's free space.
	MaxStore int64
	// Name is the server's name, unique in a cluster. Optional, default
	// "relay-embedded".
	Name string
	// ClusterName, ClusterHost and ClusterPort make the server a node of a
	// JetStream cluster; Routes are the other nodes' cluster URLs
	// (nats://host:port). Optional: without ClusterName it runs alone.
	ClusterName string
	ClusterHost string
	ClusterPort int
	Routes      []string
	// ClusterSecret, when set, is the password every node's routes
	// authenticate with (user "relay"): a server that does not know it
	// cannot join. Each route without credentials of its own is given it.
	// Optional: without it any server that reaches the cluster port may
	// join.
	ClusterSecret string
	// Mappings are subject mappings (source to destination) of the
	// server's account, such as relay's stream.TenantMapping. Optional.
	Mappings map[string]string
	// Logf, when set, receives the server's notices and errors.
	Logf func(format string, args ...any)
	// Recovering, when set, is called every 10s while the server is still
	// recovering its JetStream store, with the time spent so far.
	Recovering func(waited time.Duration)
}

// RouteUser is the user a cluster's routes authenticate as when
// Config.ClusterSecret is set.
const RouteUser = "relay"

// Start is StartContext without a way to give up.
func Start(cfg Config) (*server.Server, error) {
	return StartContext(context.Background(), cfg)
}

// StartContext starts a JetStream-enabled nats-server and waits
// until it accepts connections. The server first recovers its JetStream
// store, which takes as long as the store is large (after a crash, about
// two seconds for 2 GB here), and it is waited for as long as that takes
// unless ctx ends; the server then has 10s to start listening. Call
// Shutdown and WaitForShutdown to stop it. A server given up on (ctx ended
// during its recovery) shuts down once its recovery is over: do not start
// another on the same DataDir in the same process before that.
func StartContext(ctx context.Context, cfg Config) (*server.Server, error) {
	s, _, err := start(ctx, cfg, startTiming{listen: 10 * time.Second, every: 10 * time.Second})
	return s, err
}

// startTiming is how long a starting server may take to listen once it has
// recovered its store, and how often a recovery still going on is reported
// (Config.Recovering).
type startTiming struct{ listen, every time.Duration }

// start is StartContext. When it fails after the server
// began to start, down is closed once that server has shut down.
func start(ctx context.Context, cfg Config, timing startTiming) (_ *server.Server, down <-chan struct{}, _ error) {
	if cfg.DataDir == "" {
		return nil, nil, errors.New("embedded NATS: a data directory is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = 4222
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = 256 << 20
	}
	if cfg.Name == "" {
		cfg.Name = "relay-embedded"
	}
	opts := &server.Options{
		ServerName:         cfg.Name,
		Host:               cfg.Host,
		Port:               cfg.Port,
		JetStream:          true,
		StoreDir:           filepath.Join(cfg.DataDir, "jetstream"),
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		SyncAlways:         cfg.SyncAlways,
		NoSigs:             true,
		Username:           cfg.User,
		Password:           cfg.Password,
		Authorization:      cfg.Token,
		MaxPayload:         4 << 20,
	}
	if len(cfg.Mappings) > 0 {
		gacc := server.NewAccount(server.DEFAULT_GLOBAL_ACCOUNT)
		for src, dst := range cfg.Mappings {
			if err := gacc.AddMapping(src, dst); err != nil {
				return nil, nil, fmt.Errorf("embedded NATS: mapping %s to %s: %w", src, dst, err)
			}
		}
		opts.Accounts = []*server.Account{gacc}
	}
	if cfg.ClusterName != "" {
		if cfg.ClusterHost == "" {
			cfg.ClusterHost = cfg.Host
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: cfg.ClusterHost, Port: cfg.ClusterPort}
		if cfg.ClusterSecret != "" {
			opts.Cluster.Username, opts.Cluster.Password = RouteUser, cfg.ClusterSecret
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, nil, fmt.Errorf("embedded NATS: route %q: %w", r, err)
			}
			if u.User == nil && cfg.ClusterSecret != "" {
				u.User = url.UserPassword(RouteUser, cfg.ClusterSecret)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	// The server reports a store it cannot write only in its log, and
	// then never accepts connections: find out first, and say so.
	if err := writable(opts.StoreDir); err != nil {
		return nil, nil, fmt.Errorf("embedded NATS: data directory %s is not writable (check its permissions, mount and free space): %w", cfg.DataDir, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("embedded NATS: not started: %w", err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("embedded NATS: %w", err)
	}
	l := &logger{f: cfg.Logf}
	s.SetLogger(l, false, false)
	// Start recovers the JetStream store before it starts listening, and
	// returns once it listens, or after a fatal error (which the logger
	// keeps).
	started := make(chan struct{})
	go func() {
		defer close(started)
		s.Start()
	}()
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	if cfg.Port == -1 {
		where = cfg.Host + " (a free port)"
	}
	fail := func(reason string, cause error) (*server.Server, <-chan struct{}, error) {
		// Shut down once Start has returned, not in the middle of a
		// recovery.
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-started
			s.Shutdown()
			s.WaitForShutdown()
		}()
		select {
		case <-started:
			<-stopped
		default:
		}
		err := fmt.Errorf("embedded NATS did not start listening on %s: %s", where, reason)
		if cause != nil {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		return nil, stopped, err
	}
	began := time.Now()
	stoppedWhile := func(what string) (*server.Server, <-chan struct{}, error) {
		return fail(fmt.Sprintf("stopped after %s while %s", time.Since(began).Round(time.Millisecond), what), ctx.Err())
	}
	report := time.NewTicker(timing.every)
	defer report.Stop()
	for recovering := true; recovering; {
		// A stop comes first, even when Start has returned meanwhile.
		if ctx.Err() != nil {
			return stoppedWhile("it was recovering its JetStream store")
		}
		select {
		case <-started:
			recovering = false
		case <-ctx.Done():
		case <-report.C:
			if cfg.Recovering != nil {
				cfg.Recovering(time.Since(began))
			}
		}
	}
	for deadline := time.Now().Add(timing.listen); ; {
		if ctx.Err() != nil {
			return stoppedWhile("waiting for it to listen")
		}
		if s.ReadyForConnections(100 * time.Millisecond) {
			return s, nil, nil
		}
		fatal, firstErr := l.failure()
		if fatal != "" || time.Now().After(deadline) {
			switch {
			case fatal != "":
			case firstErr != "":
				fatal = fmt.Sprintf("within %s of recovering its JetStream store; it reported: %s", timing.listen, firstErr)
			default:
				fatal = fmt.Sprintf("within %s of recovering its JetStream store, and reported no error", timing.listen)
			}
			return fail(fatal, nil)
		}
	}
}

// writable makes dir if needed and checks that a file can be made in it.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".relay-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	err = f.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	return err
}

// logger passes the server's log to f (when set) and keeps its first fatal
// error and first error, which Start reports if the server does
// not start. Only a fatal error ends the wait early: a server that joins a
// cluster logs errors while its peers are not up yet.
type logger struct {
	f               func(string, ...any)
	mu              sync.Mutex
	fatal, firstErr string
}

func (l *logger) log(prefix, format string, v ...any) {
	if l.f != nil {
		l.f(prefix+format, v...)
	}
}

func (l *logger) keep(to *string, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if *to == "" {
		*to = fmt.Sprintf(format, v...)
	}
}

func (l *logger) failure() (fatal, firstErr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal, l.firstErr
}

func (l *logger) Noticef(format string, v ...any) { l.log("nats: ", format, v...) }
func (l *logger) Warnf(format string, v ...any)   { l.log("nats warning: ", format, v...) }
func (l *logger) Fatalf(format string, v ...any) {
	l.keep(&l.fatal, format, v...)
	l.log("nats fatal: ", format, v...)
}
func (l *logger) Errorf(format string, v ...any) {
	l.keep(&l.firstErr, format, v...)
	l.log("nats error: ", format, v...)
}
func (l *logger) Debugf(string, ...any) {}
func (l *logger) Tracef(string, ...any) {}
