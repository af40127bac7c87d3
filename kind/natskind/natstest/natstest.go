// Package natstest starts a NATS server with JetStream inside a test, for
// the tests of the nats destination kind and of relay's deliveries to it.
//
// The server listens on a free loopback port and stores its streams in a
// directory of the test's: Stop and Restart take it down and bring it back
// on the same address with the same data, so that what a stream confirmed
// before is still there after.
package natstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/relaydev/relay/kind"
)

// The stream the server is started with, and the subject it captures.
const (
	Stream  = "RELAY"
	Subject = "relay.events"
)

// Options configure a test server. The zero value is a server without
// authentication whose stream Stream captures Subject.
type Options struct {
	// Token requires clients to present it.
	Token string
	// User and Password require clients to log in.
	User, Password string
	// NKeySeed is a user nkey seed (SU...) whose public key the server
	// accepts; Config carries it as nkey_seed.
	NKeySeed string
	// DenyPublish are subjects User may not publish to (User is required).
	DenyPublish []string
	// MaxPayload caps a message's size (data and headers), default 1 MiB.
	MaxPayload int32
	// NoStream starts the server without a stream.
	NoStream bool
	// TLS makes the server require TLS, with a certificate for 127.0.0.1
	// signed by a CA of its own (CA); Config then has a tls:// URL and the
	// CA as tls_ca.
	TLS bool
}

// Server is a NATS server of a test.
type Server struct {
	t    testing.TB
	opts Options
	dir  string

	// ca is the PEM certificate of the CA that signed cert (TLS only).
	ca   string
	cert tls.Certificate

	mu   sync.Mutex
	srv  *server.Server // nil while stopped
	port int
}

// Received is a message a stream stored.
type Received struct {
	// Seq is its sequence in the stream.
	Seq     uint64
	Subject string
	Header  nats.Header
	Body    []byte
}

// Start starts a server with the zero Options; it is stopped when the test
// ends.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith starts a server configured by o; it is stopped when the test
// ends.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	if len(o.DenyPublish) > 0 && o.User == "" {
		t.Fatal("natstest: DenyPublish needs a User")
	}
	s := &Server{t: t, opts: o, dir: t.TempDir(), port: -1}
	if o.TLS {
		s.ca, s.cert = certificates(t)
	}
	t.Cleanup(s.Stop)
	s.start()
	if !o.NoStream {
		s.CreateStream(t, jetstream.StreamConfig{Name: Stream, Subjects: []string{Subject}})
	}
	return s
}

// start starts the server on s.port (a free one when -1). s.mu is not held.
func (s *Server) start() {
	s.t.Helper()
	o := &server.Options{
		ServerName:         "natstest",
		Host:               "127.0.0.1",
		Port:               s.port,
		JetStream:          true,
		StoreDir:           s.dir,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
		MaxPayload:         s.opts.MaxPayload,
		NoSigs:             true,
		NoLog:              true,
		Authorization:      s.opts.Token,
	}
	if s.opts.TLS {
		o.TLS = true
		o.TLSTimeout = 5
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{s.cert}, MinVersion: tls.VersionTLS12}
	}
	if s.opts.User != "" {
		u := &server.User{Username: s.opts.User, Password: s.opts.Password}
		if len(s.opts.DenyPublish) > 0 {
			u.Permissions = &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: s.opts.DenyPublish}}
		}
		o.Users = []*server.User{u}
	}
	if s.opts.NKeySeed != "" {
		kp, err := nkeys.FromSeed([]byte(s.opts.NKeySeed))
		if err != nil {
			s.t.Fatalf("natstest: NKeySeed: %v", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			s.t.Fatalf("natstest: NKeySeed: %v", err)
		}
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	}
	srv, err := server.NewServer(o)
	if err != nil {
		s.t.Fatalf("natstest: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		s.t.Fatalf("natstest: the server did not start listening on 127.0.0.1:%d", s.port)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv = srv
	s.port = srv.Addr().(*net.TCPAddr).Port
}

// Addr is the server's host:port, the same after a Restart.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL is the server's URL: nats://, or tls:// with Options.TLS.
func (s *Server) URL() string {
	if s.opts.TLS {
		return "tls://" + s.Addr()
	}
	return "nats://" + s.Addr()
}

// CA is the PEM certificate of the CA that signed the server's certificate
// (with Options.TLS), "" otherwise.
func (s *Server) CA() string { return s.ca }

// Config is a nats destination's configuration reaching the server's
// stream, with the server's credentials.
func (s *Server) Config() kind.Config {
	c := kind.Config{"url": s.URL(), "subject": Subject}
	if s.opts.Token != "" {
		c["token"] = s.opts.Token
	}
	if s.opts.User != "" {
		c["username"], c["password"] = s.opts.User, s.opts.Password
	}
	if s.opts.NKeySeed != "" {
		c["nkey_seed"] = s.opts.NKeySeed
	}
	if s.opts.TLS {
		c["tls_ca"] = s.ca
	}
	return c
}

// Stop shuts the server down and waits for it to be down. Its data stays.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart stops the server if it runs, and starts it again on the same
// address with the same data.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Connect is a client connection to the server with its credentials,
// closed when the test ends.
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := s.connect()
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// CreateStream creates a stream on the server.
func (s *Server) CreateStream(t testing.TB, cfg jetstream.StreamConfig) {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("natstest: create stream %s: %v", cfg.Name, err)
	}
}

// Messages are the messages stream Stream holds, in order.
func (s *Server) Messages(t testing.TB) []Received {
	t.Helper()
	return s.StreamMessages(t, Stream)
}

// StreamMessages are the messages stream name holds, in order.
func (s *Server) StreamMessages(t testing.TB, name string) []Received {
	t.Helper()
	got, err := s.read(name)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return got
}

func (s *Server) read(name string) ([]Received, error) {
	nc, err := s.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	str, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	st := str.CachedInfo().State
	var out []Received
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s seq %d: %w", name, seq, err)
		}
		out = append(out, Received{Seq: m.Sequence, Subject: m.Subject, Header: m.Header, Body: m.Data})
	}
	return out, nil
}

// connect is a client connection to the server with its credentials.
func (s *Server) connect() (*nats.Conn, error) {
	var opts []nats.Option
	if s.opts.Token != "" {
		opts = append(opts, nats.Token(s.opts.Token))
	}
	if s.opts.User != "" {
		opts = append(opts, nats.UserInfo(s.opts.User, s.opts.Password))
	}
	if s.opts.NKeySeed != "" {
		kp, err := nkeys.FromSeed([]byte(s.opts.NKeySeed))
		if err != nil {
			return nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	if s.opts.TLS {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(s.ca))
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	return nats.Connect(s.URL(), opts...)
}

// WaitFor waits up to 10 seconds for stream Stream to hold at least n
// messages, and returns them.
func (s *Server) WaitFor(t testing.TB, n int) []Received {
	t.Helper()
	deadline := time.After(10 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		got, err := s.read(Stream)
		if err == nil && len(got) >= n {
			return got
		}
		select {
		case <-deadline:
			t.Fatalf("natstest: stream %s holds %d messages after 10s, want %d (last error: %v)", Stream, len(got), n, err)
		case <-poll.C:
		}
	}
}

// certificates makes a CA, and a server certificate for 127.0.0.1 it
// signed: the CA's PEM certificate and the server's key pair.
func certificates(t testing.TB) (string, tls.Certificate) {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatalf("natstest: certificates: %v", err)
		}
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "natstest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	caCert, err := x509.ParseCertificate(caDER)
	must(err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	must(err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
