package rabbitmq_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/rabbitmq"
	"github.com/relaydev/relay/kind/rabbitmq/rabbittest"
)

// message is a typed, signed event of tenant acme.
func message(id string) kind.Message {
	return kind.Message{
		ID:          id,
		Type:        "order.created",
		Tenant:      "acme",
		Dest:        "orders",
		Key:         "order-1",
		Body:        []byte(`{"id":"` + id + `"}`),
		ContentType: "application/json",
		Timestamp:   1700000000,
		Signature:   "v1,c2lnbmF0dXJl",
		Attempt:     1,
	}
}

// open opens a publisher for c (checked first), closed at the test's end.
func open(t *testing.T, c kind.Config, env kind.Env) kind.Publisher {
	t.Helper()
	k := rabbitmq.New()
	require.NoError(t, kind.Check(k, c))
	p, err := k.Open(c, env)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func publish(t *testing.T, p kind.Publisher, m kind.Message) kind.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return p.Publish(ctx, m)
}

func requireDelivered(t *testing.T, a kind.Answer) {
	t.Helper()
	require.NoError(t, a.Err, "code %q", a.Code)
	require.False(t, a.Permanent)
}

func TestDelivered(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	p := open(t, s.Config(), kind.Env{})

	m := message("msg-1")
	a := publish(t, p, m)
	requireDelivered(t, a)
	require.Equal(t, fmt.Sprintf("confirmed: exchange %q, routing key %q", s.Target().Exchange, "order.created"), a.Detail)

	got := s.WaitFor(t, 1)
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, m.Body, r.Body)
	require.Equal(t, s.Target().Exchange, r.Exchange)
	require.Equal(t, "order.created", r.RoutingKey)
	require.Equal(t, "msg-1", r.MessageID)
	require.Equal(t, "order.created", r.Type)
	require.Equal(t, "application/json", r.ContentType)
	require.Equal(t, "relay", r.AppID)
	require.Equal(t, uint8(amqp.Persistent), r.DeliveryMode)
	require.Equal(t, int64(1700000000), r.Timestamp.Unix())
	require.Equal(t, map[string]any{
		"webhook-id":        "msg-1",
		"webhook-timestamp": "1700000000",
		"webhook-signature": "v1,c2lnbmF0dXJl",
		"relay-event-type":  "order.created",
		"relay-tenant":      "acme",
		"relay-destination": "orders",
	}, r.Headers)
}

func TestDeliveredUntypedWithFixedKey(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	c := s.Config()
	c["routing_key"] = "fixed.key"
	c["persistent"] = "false"
	p := open(t, c, kind.Env{})

	m := kind.Message{ID: "msg-2", Dest: "orders", Body: []byte("plain"), ContentType: "text/plain", Timestamp: 1700000001}
	requireDelivered(t, publish(t, p, m))

	r := s.WaitFor(t, 1)[0]
	require.Equal(t, []byte("plain"), r.Body)
	require.Equal(t, "fixed.key", r.RoutingKey)
	require.Equal(t, "", r.Type)
	require.Equal(t, "text/plain", r.ContentType)
	require.Equal(t, uint8(amqp.Transient), r.DeliveryMode)
	require.Equal(t, map[string]any{
		"webhook-id":        "msg-2",
		"webhook-timestamp": "1700000001",
		"relay-destination": "orders",
	}, r.Headers)
}

func TestDefaultExchange(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	c := s.Config()
	c["exchange"] = ""
	c["routing_key"] = s.Target().Queue
	p := open(t, c, kind.Env{})

	a := publish(t, p, message("msg-3"))
	requireDelivered(t, a)
	require.Equal(t, fmt.Sprintf("confirmed: exchange \"\", routing key %q", s.Target().Queue), a.Detail)
	require.Equal(t, "msg-3", s.WaitFor(t, 1)[0].MessageID)
}

func TestBrokerDownThenRestarted(t *testing.T) {
	t.Parallel()
	s := rabbittest.Start(t)
	t.Logf("rabbitmq-server started in %s", s.StartupTime())
	p := open(t, s.Config(), kind.Env{})

	requireDelivered(t, publish(t, p, message("before")))

	s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	a := p.Publish(ctx, message("while-down"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent, "%v", a.Err)
	require.Less(t, time.Since(start), 3*time.Second+500*time.Millisecond)

	s.Restart()
	t.Logf("rabbitmq-server restarted in %s", s.StartupTime())
	requireDelivered(t, publish(t, p, message("after")))

	// What the broker confirmed before its crash is still there.
	got := s.WaitFor(t, 2)
	ids := make([]string, len(got))
	for i, r := range got {
		ids[i] = r.MessageID
	}
	require.Equal(t, []string{"before", "after"}, ids)
}

func TestBrokerNeverStarted(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	p := open(t, kind.Config{"url": "amqp://" + addr, "username": "guest", "password": "guest", "exchange": "x"}, kind.Env{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a := p.Publish(ctx, message("m"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	var opErr *net.OpError
	require.ErrorAs(t, a.Err, &opErr)
}

// TestSilentBroker: a broker that accepts connections and says nothing
// makes Publish answer Retry at its deadline, and Close end at once.
func TestSilentBroker(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	conns.Add(1)
	go func() {
		defer conns.Done()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var buf [512]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		conns.Wait()
	})

	k := rabbitmq.New()
	p, err := k.Open(kind.Config{"url": "amqp://" + l.Addr().String(), "username": "guest", "password": "guest", "exchange": "x"}, kind.Env{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	a := p.Publish(ctx, message("m"))
	require.ErrorIs(t, a.Err, context.DeadlineExceeded)
	require.False(t, a.Permanent)
	require.Less(t, time.Since(start), time.Second)

	start = time.Now()
	require.NoError(t, p.Close())
	require.Less(t, time.Since(start), time.Second)
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	// After the parallel subtests: nothing arrived.
	t.Cleanup(func() { require.Empty(t, s.Messages(t)) })
	for _, tc := range []struct {
		name   string
		config func(kind.Config)
		code   string
	}{
		{"no such exchange", func(c kind.Config) { c["exchange"] = "no-such-exchange" }, "404 NOT_FOUND"},
		{"unroutable", func(c kind.Config) { c["exchange"] = ""; c["routing_key"] = "no-such-queue" }, "312 NO_ROUTE"},
		{"wrong password", func(c kind.Config) { c["password"] = "wrong" }, "403 ACCESS_REFUSED"},
		{"no such vhost", func(c kind.Config) { c["vhost"] = "no-such-vhost" }, "530 NOT_ALLOWED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := s.Config()
			tc.config(c)
			p := open(t, c, kind.Env{})
			for range 2 { // the second on a new channel, or connection
				a := publish(t, p, message("m"))
				require.Error(t, a.Err)
				require.True(t, a.Permanent, "%v", a.Err)
				require.Equal(t, tc.code, a.Code)
				require.NotContains(t, a.Err.Error(), "wrong")
			}
		})
	}
}

// TestPermanentThenDelivered: a channel the broker closed (404) is not
// reused, and the connection carries on.
func TestPermanentThenDelivered(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	p := open(t, s.Config(), kind.Env{})
	requireDelivered(t, publish(t, p, message("first")))

	deleteExchange(t, s, s.Target().Exchange)
	a := publish(t, p, message("lost"))
	require.True(t, a.Permanent)
	require.Equal(t, "404 NOT_FOUND", a.Code)

	redeclare(t, s)
	requireDelivered(t, publish(t, p, message("second")))
	got := s.WaitFor(t, 2)
	require.Equal(t, "first", got[0].MessageID)
	require.Equal(t, "second", got[1].MessageID)
}

// TestNack: a full queue that rejects publishes makes RabbitMQ nack.
func TestNack(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	queue := s.Target().Queue + "-full"
	withChannel(t, s, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(queue, false, true, false, false, amqp.Table{
			"x-max-length": int32(1),
			"x-overflow":   "reject-publish",
		})
		return err
	})
	c := s.Config()
	c["exchange"] = ""
	c["routing_key"] = queue
	p := open(t, c, kind.Env{})

	requireDelivered(t, publish(t, p, message("fits")))
	a := publish(t, p, message("overflows"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.Equal(t, "basic.nack", a.Code)
}

func TestOrder(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	c := s.Config()
	require.True(t, rabbitmq.New().Ordered(c))
	p := open(t, c, kind.Env{})

	const n = 50
	for i := range n {
		requireDelivered(t, publish(t, p, message(strconv.Itoa(i))))
	}
	got := s.WaitFor(t, n)
	require.Len(t, got, n)
	for i, r := range got {
		require.Equal(t, strconv.Itoa(i), r.MessageID)
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	p := open(t, s.Config(), kind.Env{})

	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	answers := make(chan kind.Answer, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				answers <- p.Publish(ctx, message(fmt.Sprintf("%d-%d", g, i)))
				cancel()
			}
		})
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		requireDelivered(t, a)
	}

	got := s.WaitFor(t, goroutines*each)
	require.Len(t, got, goroutines*each)
	seen := map[string]bool{}
	for _, r := range got {
		require.False(t, seen[r.MessageID], "duplicate %s", r.MessageID)
		seen[r.MessageID] = true
		require.Equal(t, []byte(`{"id":"`+r.MessageID+`"}`), r.Body)
	}
}

func TestDialThroughEnv(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	var calls atomic.Int32
	var addrs sync.Map
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		calls.Add(1)
		addrs.Store(addr, true)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	p := open(t, s.Config(), kind.Env{Dial: dial})
	requireDelivered(t, publish(t, p, message("a")))
	requireDelivered(t, publish(t, p, message("b")))
	require.Equal(t, int32(1), calls.Load(), "one connection for both")
	_, ok := addrs.Load(s.Addr())
	require.True(t, ok)
}

func TestDialRefused(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	errBlocked := errors.New("address blocked by relay's guard")
	var calls atomic.Int32
	dial := func(context.Context, string, string) (net.Conn, error) {
		calls.Add(1)
		return nil, errBlocked
	}
	p := open(t, s.Config(), kind.Env{Dial: dial})
	for range 2 {
		a := publish(t, p, message("m"))
		require.ErrorIs(t, a.Err, errBlocked)
		require.False(t, a.Permanent)
	}
	require.Equal(t, int32(2), calls.Load(), "each publish tries again")
	require.Empty(t, s.Messages(t))
}

func TestClose(t *testing.T) {
	t.Parallel()
	s := rabbittest.Shared(t)
	k := rabbitmq.New()
	p, err := k.Open(s.Config(), kind.Env{})
	require.NoError(t, err)
	requireDelivered(t, publish(t, p, message("m")))

	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	a := publish(t, p, message("late"))
	require.ErrorIs(t, a.Err, kind.ErrClosed)
	require.False(t, a.Permanent)

	// Closing a publisher that never connected.
	p, err = k.Open(s.Config(), kind.Env{})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.ErrorIs(t, publish(t, p, message("late")).Err, kind.ErrClosed)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ca := caPEM(t)
	good := func(extra ...string) kind.Config {
		c := kind.Config{"url": "amqp://rabbitmq.example.com", "username": "relay", "password": "secret", "exchange": "events"}
		for i := 0; i+1 < len(extra); i += 2 {
			c[extra[i]] = extra[i+1]
		}
		return c
	}
	longName := strings.Repeat("a", 256)
	for _, tc := range []struct {
		name  string
		c     kind.Config
		field string // "" for valid
	}{
		{"minimal", good(), ""},
		{"port and vhost", good("url", "amqp://10.0.0.1:5673/", "vhost", "prod"), ""},
		{"amqps with CA", good("url", "amqps://rabbitmq.example.com", "tls_ca", ca), ""},
		{"ipv6", good("url", "amqp://[::1]:5672"), ""},
		{"default exchange with queue", good("exchange", "", "routing_key", "orders"), ""},
		{"fixed routing key", good("routing_key", "orders.#", "persistent", "false"), ""},
		{"no url", good("url", ""), "url"},
		{"http url", good("url", "http://rabbitmq.example.com"), "url"},
		{"credentials in url", good("url", "amqp://user:pw@rabbitmq.example.com"), "url"},
		{"vhost in url", good("url", "amqp://rabbitmq.example.com/prod"), "url"},
		{"query in url", good("url", "amqp://rabbitmq.example.com?cacertfile=/etc/passwd"), "url"},
		{"no host", good("url", "amqp://:5672"), "url"},
		{"bad port", good("url", "amqp://rabbitmq.example.com:99999"), "url"},
		{"no username", good("username", ""), "username"},
		{"no password", good("password", ""), "password"},
		{"default exchange without queue", good("exchange", ""), "routing_key"},
		{"long exchange", good("exchange", longName), "exchange"},
		{"long routing key", good("routing_key", longName), "routing_key"},
		{"control in vhost", good("vhost", "a\tb"), "vhost"},
		{"bad utf-8 exchange", good("exchange", "\xff"), "exchange"},
		{"persistent not bool", good("persistent", "yes please"), "persistent"},
		{"CA without TLS", good("tls_ca", ca), "tls_ca"},
		{"CA not PEM", good("url", "amqps://rabbitmq.example.com", "tls_ca", "not a certificate"), "tls_ca"},
		{"unknown field", good("queue", "x"), "queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := kind.Check(rabbitmq.New(), tc.c)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *kind.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field, "%v", err)
			require.NotContains(t, err.Error(), "pw@")
		})
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	k := rabbitmq.New()
	require.Equal(t, "rabbitmq", k.Name())
	require.Equal(t, "RabbitMQ", k.Title())
	require.NotEmpty(t, k.Description())
	require.True(t, kind.Sensitive(k, "password"))
	require.False(t, kind.Sensitive(k, "username"))
	require.Equal(t, "/", kind.Get(k, kind.Config{}, "vhost"))
	require.Equal(t, "true", kind.Get(k, kind.Config{}, "persistent"))
	for _, f := range k.Fields() {
		require.NotEmpty(t, f.Label, f.Name)
		require.NotEmpty(t, f.Help, f.Name)
	}
}

func withChannel(t *testing.T, s *rabbittest.Server, f func(*amqp.Channel) error) {
	t.Helper()
	conn, err := amqp.Dial("amqp://" + rabbittest.Username + ":" + rabbittest.Password + "@" + s.Addr() + "/")
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, f(ch))
}

func deleteExchange(t *testing.T, s *rabbittest.Server, name string) {
	t.Helper()
	withChannel(t, s, func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) })
}

func redeclare(t *testing.T, s *rabbittest.Server) {
	t.Helper()
	tg := s.Target()
	withChannel(t, s, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(tg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(tg.Queue, "#", tg.Exchange, false, nil)
	})
}

// caPEM is a self-signed CA certificate, PEM-encoded.
func caPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
