package stream

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures the NATS server that relay starts in-process when
// no external server is given.
type EmbeddedConfig struct {
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
	// Logf, when set, receives the server's notices and errors.
	Logf func(format string, args ...any)
}

// StartEmbedded starts a JetStream-enabled nats-server and waits until it
// accepts connections. Call Shutdown and WaitForShutdown to stop it.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded NATS: a data directory is required")
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
		SyncAlways:         cfg.SyncAlways,
		NoSigs:             true,
		Username:           cfg.User,
		Password:           cfg.Password,
		Authorization:      cfg.Token,
		MaxPayload:         4 << 20,
	}
	if cfg.ClusterName != "" {
		if cfg.ClusterHost == "" {
			cfg.ClusterHost = cfg.Host
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: cfg.ClusterHost, Port: cfg.ClusterPort}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded NATS: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	// The server reports a store it cannot write only in its log, and
	// then never accepts connections: find out first, and say so.
	if err := writable(opts.StoreDir); err != nil {
		return nil, fmt.Errorf("embedded NATS: data directory %s is not writable (check its permissions, mount and free space): %w", cfg.DataDir, err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	l := &logger{f: cfg.Logf}
	s.SetLogger(l, false, false)
	go s.Start()
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	if cfg.Port == -1 {
		where = cfg.Host + " (a free port)"
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s.ReadyForConnections(100 * time.Millisecond) {
			return s, nil
		}
		fatal, firstErr := l.failure()
		if fatal != "" || time.Now().After(deadline) {
			s.Shutdown()
			switch {
			case fatal != "":
			case firstErr != "":
				fatal = "within 10s; it reported: " + firstErr
			default:
				fatal = "within 10s, and reported no error"
			}
			return nil, fmt.Errorf("embedded NATS did not start listening on %s: %s", where, fatal)
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
// error and first error, which StartEmbedded reports if the server does
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
