package stream

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnConfig says how to reach NATS. All fields are optional but URL.
type ConnConfig struct {
	URL         string // e.g. nats://127.0.0.1:4222; a comma-separated list for a cluster
	Name        string // client name shown by the server
	CredsFile   string // NATS credentials (JWT + NKey seed)
	NKeyFile    string // NKey seed file
	User        string
	Password    string
	Token       string
	TLSCA       string // CA bundle to verify the server
	TLSCert     string // client certificate (with TLSKey)
	TLSKey      string
	ConnectWait time.Duration // default 5s
	// Logf receives asynchronous connection errors (slow consumer,
	// permissions), disconnects and reconnects. Optional: without it they
	// are not reported.
	Logf func(format string, args ...any)
}

// Connect dials NATS and keeps reconnecting forever once connected.
func Connect(cfg ConnConfig) (*nats.Conn, error) {
	if cfg.URL == "" {
		return nil, errors.New("no NATS URL given")
	}
	if cfg.ConnectWait == 0 {
		cfg.ConnectWait = 5 * time.Second
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(cfg.ConnectWait),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.CustomInboxPrefix(InboxPrefix),
	}
	if cfg.Logf != nil {
		opts = append(opts,
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
				if sub != nil {
					cfg.Logf("nats: %v (subscription %s)", err, sub.Subject)
					return
				}
				cfg.Logf("nats: %v", err)
			}),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil { // nil: closed on purpose
					cfg.Logf("nats: disconnected: %v (reconnecting)", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				cfg.Logf("nats: reconnected to %s", nc.ConnectedUrlRedacted())
			}),
		)
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nkey file %s: %w", cfg.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		if cfg.TLSCert == "" || cfg.TLSKey == "" {
			return nil, errors.New("a TLS client certificate needs both --tls-cert and --tls-key")
		}
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURLs(cfg.URL), err)
	}
	return nc, nil
}

// redactURLs returns a NATS URL (or a comma-separated list of them) fit to
// print: the userinfo of each, a user and password or a token, replaced by
// "xxxxx".
func redactURLs(list string) string {
	urls := strings.Split(list, ",")
	for i, s := range urls {
		at := strings.LastIndex(s, "@")
		if at < 0 {
			continue
		}
		start := 0
		if j := strings.Index(s, "://"); j >= 0 && j < at {
			start = j + len("://")
		}
		urls[i] = s[:start] + "xxxxx" + s[at:]
	}
	return strings.Join(urls, ",")
}
