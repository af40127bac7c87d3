package stream

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
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
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if cfg.Logf != nil {
		s.SetLogger(logger{cfg.Logf}, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded NATS did not start listening on %s:%d within 10s (is the port in use?)", cfg.Host, cfg.Port)
	}
	return s, nil
}

type logger struct{ f func(string, ...any) }

func (l logger) Noticef(format string, v ...any) { l.f("nats: "+format, v...) }
func (l logger) Warnf(format string, v ...any)   { l.f("nats warning: "+format, v...) }
func (l logger) Fatalf(format string, v ...any)  { l.f("nats fatal: "+format, v...) }
func (l logger) Errorf(format string, v ...any)  { l.f("nats error: "+format, v...) }
func (l logger) Debugf(string, ...any)           {}
func (l logger) Tracef(string, ...any)           {}
