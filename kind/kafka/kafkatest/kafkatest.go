// Package kafkatest runs a Kafka broker for tests: franz-go's kfake, a
// one-broker cluster in the test's process on a free loopback port, which
// tests can stop and restart on the same address with what it stored.
//
//	srv := kafkatest.Start(t)
//	p, _ := kafka.New().Open(srv.Config(), kind.Env{})
//	...
//	got := srv.WaitFor(t, 1)
package kafkatest

import (
	"bytes"
	"cmp"
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
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/relaydev/relay/kind"
)

// Topic is the topic a Server creates and Config names.
const Topic = "relay-events"

// Partitions is the number of partitions of the Server's topics unless
// WithPartitions says otherwise.
const Partitions = 4

// readTimeout bounds one reading of what the Server stored.
const readTimeout = 10 * time.Second

// Received is one record the Server stored.
type Received struct {
	Topic     string
	Partition int32
	Offset    int64
	// Key is the record's key, nil for none.
	Key  []byte
	Body []byte
	// Headers are the record's headers by name (the last value of a name
	// repeated).
	Headers   map[string]string
	Timestamp time.Time
}

// Option changes what Start starts.
type Option func(*options)

type options struct {
	topics     []string
	partitions int32
	mechanism  string // kind's spelling: plain, scram-sha-256, scram-sha-512
	user, pass string
	tls        bool
	port       int
}

// WithTopics creates these topics too (Config names Topic).
func WithTopics(names ...string) Option {
	return func(o *options) { o.topics = append(o.topics, names...) }
}

// WithPartitions sets the topics' number of partitions.
func WithPartitions(n int32) Option {
	return func(o *options) { o.partitions = n }
}

// WithSASL makes the broker require SASL: mechanism is plain,
// scram-sha-256 or scram-sha-512, and user (with password) is its only
// user, a superuser. Config has the credentials.
func WithSASL(mechanism, user, password string) Option {
	return func(o *options) { o.mechanism, o.user, o.pass = mechanism, user, password }
}

// WithTLS makes the broker speak TLS only, with a certificate for
// 127.0.0.1 and localhost signed by a CA of its own (CAPEM). Config has
// tls=true and the CA.
func WithTLS() Option {
	return func(o *options) { o.tls = true }
}

// WithPort listens on port (of 127.0.0.1) instead of a free one: a test
// can then show a publisher configured before its broker started.
func WithPort(port int) Option {
	return func(o *options) { o.port = port }
}

// Server is a one-broker Kafka cluster.
type Server struct {
	tb   testing.TB
	opts options
	dir  string // kfake's DataDir: what it stored survives Restart

	caPEM     string
	serverTLS *tls.Config
	clientTLS *tls.Config

	mu      sync.Mutex
	cluster *kfake.Cluster // nil when stopped
	port    int
	stored  []Received // the last reading, what Messages lists while stopped
}

// Start starts a Server on a free loopback port, with Topic (and the
// WithTopics) created; it stops when the test ends.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s := &Server{tb: tb, opts: options{partitions: Partitions}, dir: tb.TempDir()}
	for _, o := range opts {
		o(&s.opts)
	}
	switch s.opts.mechanism {
	case "", "plain", "scram-sha-256", "scram-sha-512":
	default:
		tb.Fatalf("kafkatest: SASL mechanism %q is not plain, scram-sha-256 or scram-sha-512", s.opts.mechanism)
	}
	if s.opts.tls {
		s.makeCertificates()
	}
	s.start(s.opts.port)
	tb.Cleanup(s.close)
	return s
}

func (s *Server) start(port int) {
	s.tb.Helper()
	topics := append([]string{Topic}, s.opts.topics...)
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ClusterID("relay-kafkatest"),
		kfake.DataDir(s.dir),
		kfake.SeedTopics(s.opts.partitions, topics...),
	}
	if s.opts.mechanism != "" {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(map[string]string{
			"plain":         "PLAIN",
			"scram-sha-256": "SCRAM-SHA-256",
			"scram-sha-512": "SCRAM-SHA-512",
		}[s.opts.mechanism], s.opts.user, s.opts.pass))
	}
	if s.serverTLS != nil {
		opts = append(opts, kfake.TLS(s.serverTLS))
	}
	c, err := kfake.NewCluster(opts...)
	require.NoError(s.tb, err, "kafkatest: start kfake")
	if s.opts.mechanism == "plain" {
		refusePlainLikeKafka(c, s.opts.user, s.opts.pass)
	}
	_, p, err := net.SplitHostPort(c.ListenAddrs()[0])
	require.NoError(s.tb, err)
	s.port, err = strconv.Atoi(p)
	require.NoError(s.tb, err)
	s.cluster = c
}

// refusePlainLikeKafka makes c answer a PLAIN login with the wrong
// credentials the way Kafka does, a SaslAuthenticate response with
// SASL_AUTHENTICATION_FAILED, where kfake itself just closes the
// connection. (A wrong SCRAM login still gets kfake's closed connection.)
func refusePlainLikeKafka(c *kfake.Cluster, user, pass string) {
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SASLAuthenticateRequest)
		// PLAIN's message is authzid NUL user NUL password.
		parts := bytes.Split(req.SASLAuthBytes, []byte{0})
		if len(parts) == 3 && string(parts[1]) == user && string(parts[2]) == pass {
			return nil, nil, false // kfake logs in
		}
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr("Authentication failed: Invalid username or password")
		return resp, nil, true
	})
}

// Addr is the broker's host:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// CAPEM is the PEM of the CA that signed the broker's certificate, "" without
// WithTLS.
func (s *Server) CAPEM() string { return s.caPEM }

// Config is a kafka destination's configuration reaching the Server's
// Topic, with its SASL credentials and TLS CA if it has them.
func (s *Server) Config() kind.Config {
	c := kind.Config{"brokers": s.Addr(), "topic": Topic}
	if s.opts.mechanism != "" {
		c["sasl_mechanism"] = s.opts.mechanism
		c["sasl_username"] = s.opts.user
		c["sasl_password"] = s.opts.pass
	}
	if s.opts.tls {
		c["tls"] = "true"
		c["tls_ca"] = s.caPEM
	}
	return c
}

// Stop stops the broker, having read what it stored (Messages lists it
// while the broker is stopped). Connections to it are closed; new ones are
// refused. Stopping a stopped Server does nothing.
func (s *Server) Stop() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		return
	}
	got, err := s.read()
	require.NoError(s.tb, err, "kafkatest: read before stopping")
	s.stored = got
	s.cluster.Close()
	s.cluster = nil
}

// Restart starts the stopped broker again on the same address, with what
// it stored (kfake persists to a directory of the test's). Restarting a
// running Server stops it first.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start(s.port)
}

func (s *Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster != nil {
		s.cluster.Close()
		s.cluster = nil
	}
}

// Messages returns every record of the Server's topics, by topic (Topic
// first), partition and offset. While the broker is stopped it returns
// what it had when it stopped.
func (s *Server) Messages(tb testing.TB) []Received {
	tb.Helper()
	got, err := s.messages()
	require.NoError(tb, err, "kafkatest: read records")
	return got
}

// WaitFor waits up to 15s for the Server to hold at least n records and
// returns them all (see Messages).
func (s *Server) WaitFor(tb testing.TB, n int) []Received {
	tb.Helper()
	var got []Received
	require.EventuallyWithT(tb, func(c *assert.CollectT) {
		all, err := s.messages()
		require.NoError(c, err)
		require.GreaterOrEqual(c, len(all), n, "records arrived")
		got = all
	}, 15*time.Second, 50*time.Millisecond, "kafkatest: waiting for %d records", n)
	return got
}

func (s *Server) messages() ([]Received, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		return slices.Clone(s.stored), nil
	}
	got, err := s.read()
	if err != nil {
		return nil, err
	}
	s.stored = got
	return slices.Clone(got), nil
}

// read consumes every topic from its start to its end. Called with s.mu.
func (s *Server) read() ([]Received, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	opts := []kgo.Opt{
		kgo.SeedBrokers(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))),
		kgo.ClientID("kafkatest-reader"),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
	if s.clientTLS != nil {
		opts = append(opts, kgo.DialTLSConfig(s.clientTLS))
	}
	if m := s.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()

	topics := append([]string{Topic}, s.opts.topics...)
	ends, err := endOffsets(ctx, cl, topics)
	if err != nil {
		return nil, err
	}
	want := 0
	consume := make(map[string]map[int32]kgo.Offset)
	for t, parts := range ends {
		consume[t] = make(map[int32]kgo.Offset)
		for p, end := range parts {
			if end > 0 {
				consume[t][p] = kgo.NewOffset().AtStart()
				want += int(end)
			}
		}
	}
	var got []Received
	if want > 0 {
		cl.AddConsumePartitions(consume)
	}
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%d of %d records read: %w", len(got), want, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("%s/%d: %w", t, p, err))
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Topic][r.Partition] {
				return // written since we looked
			}
			h := make(map[string]string, len(r.Headers))
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			got = append(got, Received{
				Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				Key: r.Key, Body: r.Value, Headers: h, Timestamp: r.Timestamp,
			})
		})
	}
	slices.SortFunc(got, func(a, b Received) int {
		if a.Topic != b.Topic {
			return slices.Index(topics, a.Topic) - slices.Index(topics, b.Topic)
		}
		if a.Partition != b.Partition {
			return cmp.Compare(a.Partition, b.Partition)
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	return got, nil
}

// endOffsets returns each partition's high watermark.
func endOffsets(ctx context.Context, cl *kgo.Client, topics []string) (map[string]map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, mt)
	}
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.ReplicaID = -1
	for _, mt := range mresp.Topics {
		if mt.ErrorCode != 0 {
			return nil, fmt.Errorf("metadata of %s: error code %d", *mt.Topic, mt.ErrorCode)
		}
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = *mt.Topic
		for _, mp := range mt.Partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition = mp.Partition
			lp.Timestamp = -1 // the end
			lt.Partitions = append(lt.Partitions, lp)
		}
		lo.Topics = append(lo.Topics, lt)
	}
	lresp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	ends := make(map[string]map[int32]int64)
	for _, lt := range lresp.Topics {
		ends[lt.Topic] = make(map[int32]int64)
		for _, lp := range lt.Partitions {
			if lp.ErrorCode != 0 {
				return nil, fmt.Errorf("end offset of %s/%d: error code %d", lt.Topic, lp.Partition, lp.ErrorCode)
			}
			ends[lt.Topic][lp.Partition] = lp.Offset
		}
	}
	return ends, nil
}

func (s *Server) mechanism() sasl.Mechanism {
	o := s.opts
	switch o.mechanism {
	case "plain":
		return plain.Auth{User: o.user, Pass: o.pass}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: o.user, Pass: o.pass}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: o.user, Pass: o.pass}.AsSha512Mechanism()
	}
	return nil
}

// makeCertificates makes a CA and the broker's certificate signed by it.
func (s *Server) makeCertificates() {
	tb := s.tb
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(tb, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kafkatest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(tb, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(tb, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(tb, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(tb, err)

	s.caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	s.serverTLS = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	s.clientTLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
}
