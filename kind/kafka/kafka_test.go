package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/kafka"
	"github.com/relaydev/relay/kind/kafka/kafkatest"
)

// countingDial is an Env.Dial that counts its calls and dials plainly.
type countingDial struct{ n atomic.Int64 }

func (d *countingDial) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func open(t *testing.T, c kind.Config, env kind.Env) kind.Publisher {
	t.Helper()
	k := kafka.New()
	require.NoError(t, kind.Check(k, c))
	p, err := k.Open(c, env)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func message(i int, key string) kind.Message {
	return kind.Message{
		ID:          fmt.Sprintf("msg_%d", i),
		Type:        "order.created",
		Tenant:      "acme",
		Dest:        "orders-kafka",
		Key:         key,
		Body:        fmt.Appendf(nil, `{"n":%d}`, i),
		ContentType: "application/json",
		Timestamp:   1700000000 + int64(i),
		Signature:   "v1,c2lnbmF0dXJl",
		Attempt:     1,
	}
}

func publish(t *testing.T, p kind.Publisher, m kind.Message, timeout time.Duration) kind.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	return p.Publish(ctx, m)
}

var detailRE = regexp.MustCompile(`^partition (\d+) offset (\d+)$`)

func TestDelivered(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	dial := new(countingDial)
	p := open(t, srv.Config(), kind.Env{Dial: dial.Dial})

	m := message(1, "customer-42")
	a := publish(t, p, m, 10*time.Second)
	require.NoError(t, a.Err)
	require.False(t, a.Permanent)
	sub := detailRE.FindStringSubmatch(a.Detail)
	require.NotNil(t, sub, "detail %q", a.Detail)

	got := srv.WaitFor(t, 1)
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, kafkatest.Topic, r.Topic)
	require.Equal(t, sub[1], strconv.Itoa(int(r.Partition)))
	require.Equal(t, sub[2], strconv.FormatInt(r.Offset, 10))
	require.Equal(t, m.Body, r.Body)
	require.Equal(t, []byte("customer-42"), r.Key)
	require.Equal(t, map[string]string{
		"webhook-id":        "msg_1",
		"webhook-timestamp": "1700000001",
		"webhook-signature": "v1,c2lnbmF0dXJl",
		"relay-event-type":  "order.created",
		"relay-tenant":      "acme",
		"relay-destination": "orders-kafka",
		"content-type":      "application/json",
	}, r.Headers)
	require.Positive(t, dial.n.Load(), "connections go through env.Dial")
}

func TestOptionalHeadersAndKeys(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	// No signature, type or tenant, an empty body, no order key: the
	// headers are left out, the value is empty (not a tombstone), the
	// record has no key.
	p := open(t, srv.Config(), kind.Env{})
	m := kind.Message{ID: "bare", Dest: "d", ContentType: "text/plain", Timestamp: 5}
	require.NoError(t, publish(t, p, m, 10*time.Second).Err)

	cfg := srv.Config()
	cfg["key"] = "event_id"
	byID := open(t, cfg, kind.Env{})
	require.NoError(t, publish(t, byID, message(2, "ignored"), 10*time.Second).Err)

	cfg["key"] = "tenant"
	byTenant := open(t, cfg, kind.Env{})
	require.NoError(t, publish(t, byTenant, message(3, "ignored"), 10*time.Second).Err)

	cfg["key"] = "none"
	none := open(t, cfg, kind.Env{})
	require.NoError(t, publish(t, none, message(4, "ignored"), 10*time.Second).Err)

	got := srv.WaitFor(t, 4)
	byHeader := map[string]kafkatest.Received{}
	for _, r := range got {
		byHeader[r.Headers["webhook-id"]] = r
	}
	bare := byHeader["bare"]
	require.Equal(t, map[string]string{
		"webhook-id": "bare", "webhook-timestamp": "5",
		"relay-destination": "d", "content-type": "text/plain",
	}, bare.Headers)
	require.NotNil(t, bare.Body)
	require.Empty(t, bare.Body)
	require.Nil(t, bare.Key)
	require.Equal(t, []byte("msg_2"), byHeader["msg_2"].Key)
	require.Equal(t, []byte("acme"), byHeader["msg_3"].Key)
	require.Nil(t, byHeader["msg_4"].Key)
}

func TestTargetDownThenRestarted(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	p := open(t, srv.Config(), kind.Env{})
	require.NoError(t, publish(t, p, message(1, "k"), 10*time.Second).Err)

	srv.Stop()
	stopped := srv.Messages(t) // what the broker had when it stopped
	require.Len(t, stopped, 1)
	require.Equal(t, "msg_1", stopped[0].Headers["webhook-id"])
	start := time.Now()
	a := publish(t, p, message(2, "k"), 2*time.Second)
	require.Error(t, a.Err)
	require.False(t, a.Permanent, "a broker down is not permanent: %v", a.Err)
	require.Less(t, time.Since(start), 3*time.Second, "Publish respects its deadline")

	srv.Restart()
	a = publish(t, p, message(3, "k"), 20*time.Second)
	require.NoError(t, a.Err, "the publisher reconnects by itself")

	// What the broker confirmed before it stopped is still there.
	got := srv.WaitFor(t, 2)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.Headers["webhook-id"])
	}
	require.Contains(t, ids, "msg_1")
	require.Contains(t, ids, "msg_3")
}

func TestNeverStartedThenStarted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	cfg := kind.Config{"brokers": "127.0.0.1:" + strconv.Itoa(port), "topic": kafkatest.Topic}
	p := open(t, cfg, kind.Env{})
	start := time.Now()
	a := publish(t, p, message(1, "k"), time.Second)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.ErrorIs(t, a.Err, syscall.ECONNREFUSED, "the answer names the connection's error")

	srv := kafkatest.Start(t, kafkatest.WithPort(port))
	require.NoError(t, publish(t, p, message(2, "k"), 20*time.Second).Err)
	require.Len(t, srv.WaitFor(t, 1), 1)
}

func TestUnknownTopicIsPermanent(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	cfg := srv.Config()
	cfg["topic"] = "no-such-topic"
	p := open(t, cfg, kind.Env{})
	a := publish(t, p, message(1, "k"), 25*time.Second)
	require.Error(t, a.Err)
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "UNKNOWN_TOPIC_OR_PARTITION", a.Code)
}

func TestMessageTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	p := open(t, srv.Config(), kind.Env{})
	m := message(1, "k")
	m.Body = []byte(strings.Repeat("x", 2<<20))
	a := publish(t, p, m, 10*time.Second)
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "MESSAGE_TOO_LARGE", a.Code)
}

func TestSASL(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{"plain", "scram-sha-256", "scram-sha-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			srv := kafkatest.Start(t, kafkatest.WithSASL(mech, "relay", "s3cret"))
			p := open(t, srv.Config(), kind.Env{})
			require.NoError(t, publish(t, p, message(1, "k"), 10*time.Second).Err)
			require.Len(t, srv.WaitFor(t, 1), 1)
			if mech != "plain" {
				return // kfake closes the connection on a wrong SCRAM login, unlike Kafka
			}

			bad := srv.Config()
			bad["sasl_password"] = "wrong"
			p = open(t, bad, kind.Env{})
			a := publish(t, p, message(2, "k"), 10*time.Second)
			require.True(t, a.Permanent, "%v", a.Err)
			require.Equal(t, "SASL_AUTHENTICATION_FAILED", a.Code)
			require.NotContains(t, a.Err.Error(), "wrong", "no secret in the error")
		})
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t, kafkatest.WithTLS())
	dial := new(countingDial)
	p := open(t, srv.Config(), kind.Env{Dial: dial.Dial})
	require.NoError(t, publish(t, p, message(1, "k"), 10*time.Second).Err)
	require.Positive(t, dial.n.Load(), "TLS connections go through env.Dial")
	require.Len(t, srv.WaitFor(t, 1), 1)

	// Another CA does not vouch for the broker.
	other := kafkatest.Start(t, kafkatest.WithTLS())
	bad := srv.Config()
	bad["tls_ca"] = other.CAPEM()
	p = open(t, bad, kind.Env{})
	a := publish(t, p, message(2, "k"), 10*time.Second)
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "TLS_CERTIFICATE", a.Code)
}

func TestTopicAuthorizationFailedIsPermanent(t *testing.T) {
	t.Parallel()
	// A user who may write "allowed" (and produce idempotently) but not
	// "denied".
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(1, "allowed", "denied"),
		kfake.EnableSASL(),
		kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "writer", "pw",
			kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationIdempotentWrite, Allow: true},
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "allowed", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true},
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "allowed", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true},
		),
	)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cfg := kind.Config{
		"brokers": c.ListenAddrs()[0], "topic": "allowed",
		"sasl_mechanism": "plain", "sasl_username": "writer", "sasl_password": "pw",
	}
	p := open(t, cfg, kind.Env{})
	require.NoError(t, publish(t, p, message(1, "k"), 10*time.Second).Err)

	cfg["topic"] = "denied"
	p = open(t, cfg, kind.Env{})
	a := publish(t, p, message(2, "k"), 10*time.Second)
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "TOPIC_AUTHORIZATION_FAILED", a.Code)
}

func TestOrderPerKey(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	k := kafka.New()
	require.True(t, k.Ordered(srv.Config()))
	p := open(t, srv.Config(), kind.Env{})
	for i := range 50 {
		require.NoError(t, publish(t, p, message(i, "one-key"), 10*time.Second).Err)
	}
	got := srv.WaitFor(t, 50)
	require.Len(t, got, 50)
	for i, r := range got { // one partition, by offset
		require.Equal(t, got[0].Partition, r.Partition)
		require.Equal(t, fmt.Sprintf("msg_%d", i), r.Headers["webhook-id"])
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	p := open(t, srv.Config(), kind.Env{})
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := w*each + i
				if a := publish(t, p, message(n, "key-"+strconv.Itoa(n%5)), 20*time.Second); a.Err != nil {
					errs <- a.Err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := srv.WaitFor(t, workers*each)
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.Headers["webhook-id"]] = true
	}
	require.Len(t, ids, workers*each)
}

func TestRefusingDial(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	blocked := errors.New("address blocked by relay's guard")
	var calls atomic.Int64
	env := kind.Env{Dial: func(context.Context, string, string) (net.Conn, error) {
		calls.Add(1)
		return nil, blocked
	}}
	p := open(t, srv.Config(), env)
	start := time.Now()
	a := publish(t, p, message(1, "k"), 2*time.Second)
	require.Less(t, time.Since(start), 3*time.Second)
	require.False(t, a.Permanent)
	require.ErrorIs(t, a.Err, blocked)
	require.Positive(t, calls.Load())
	require.Empty(t, srv.Messages(t))
}

func TestClose(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t)
	k := kafka.New()
	p, err := k.Open(srv.Config(), kind.Env{})
	require.NoError(t, err)
	require.NoError(t, publish(t, p, message(1, "k"), 10*time.Second).Err)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	a := publish(t, p, message(2, "k"), time.Second)
	require.ErrorIs(t, a.Err, kind.ErrClosed)
	require.False(t, a.Permanent)

	// Closing a publisher that never connected.
	q, err := k.Open(kind.Config{"brokers": "127.0.0.1:1", "topic": "t"}, kind.Env{})
	require.NoError(t, err)
	require.NoError(t, q.Close())
	require.ErrorIs(t, publish(t, q, message(3, "k"), time.Second).Err, kind.ErrClosed)
}

func TestOpenDoesNotConnect(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	env := kind.Env{Dial: func(context.Context, string, string) (net.Conn, error) {
		calls.Add(1)
		return nil, errors.New("no")
	}}
	p, err := kafka.New().Open(kind.Config{"brokers": "kafka.invalid:9092", "topic": "t"}, env)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.Zero(t, calls.Load())
}

func TestKind(t *testing.T) {
	t.Parallel()
	k := kafka.New()
	require.Equal(t, "kafka", k.Name())
	require.Equal(t, "Apache Kafka", k.Title())
	require.NotEmpty(t, k.Description())
	require.True(t, kind.Sensitive(k, "sasl_password"))
	require.False(t, kind.Sensitive(k, "sasl_username"))
	require.Equal(t, "order_key", kind.Get(k, kind.Config{}, "key"))
	require.Equal(t, "relay", kind.Get(k, kind.Config{}, "client_id"))
	for key, ordered := range map[string]bool{"": true, "order_key": true, "event_id": false, "tenant": false, "none": false} {
		require.Equal(t, ordered, k.Ordered(kind.Config{"key": key}), key)
	}
	for _, f := range k.Fields() {
		require.Regexp(t, `^[a-z][a-z0-9_]*$`, f.Name)
		require.NotEmpty(t, f.Label)
		require.NotEmpty(t, f.Help)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	srv := kafkatest.Start(t, kafkatest.WithTLS())
	ca := srv.CAPEM()
	base := func(kv ...string) kind.Config {
		c := kind.Config{"brokers": "kafka-1:9092", "topic": "orders"}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i]] = kv[i+1]
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		c     kind.Config
		field string // "" when valid
	}{
		{"minimal", base(), ""},
		{"several brokers", base("brokers", "kafka-1:9092, kafka-2:9093,[::1]:9094"), ""},
		{"topic chars", base("topic", "a.B_c-9"), ""},
		{"topic 249", base("topic", strings.Repeat("t", 249)), ""},
		{"keys", base("key", "event_id"), ""},
		{"sasl plain", base("sasl_mechanism", "plain", "sasl_username", "u", "sasl_password", "p"), ""},
		{"sasl scram", base("sasl_mechanism", "scram-sha-512", "sasl_username", "u", "sasl_password", "p", "tls", "true"), ""},
		{"tls with ca", base("tls", "true", "tls_ca", ca), ""},
		{"client id", base("client_id", "relay-prod"), ""},

		{"no brokers", kind.Config{"topic": "t"}, "brokers"},
		{"no topic", kind.Config{"brokers": "k:9092"}, "topic"},
		{"unknown field", base("acks", "1"), "acks"},
		{"broker without port", base("brokers", "kafka-1"), "brokers"},
		{"broker url", base("brokers", "kafka://kafka-1:9092"), "brokers"},
		{"broker bad port", base("brokers", "kafka-1:99999"), "brokers"},
		{"empty broker", base("brokers", "kafka-1:9092,,kafka-2:9092"), "brokers"},
		{"topic bad char", base("topic", "orders/eu"), "topic"},
		{"topic space", base("topic", "my topic"), "topic"},
		{"topic dot", base("topic", "."), "topic"},
		{"topic dotdot", base("topic", ".."), "topic"},
		{"topic too long", base("topic", strings.Repeat("t", 250)), "topic"},
		{"internal topic", base("topic", "__consumer_offsets"), "topic"},
		{"bad key", base("key", "random"), "key"},
		{"bad mechanism", base("sasl_mechanism", "gssapi"), "sasl_mechanism"},
		{"sasl no user", base("sasl_mechanism", "plain", "sasl_password", "p"), "sasl_username"},
		{"sasl no password", base("sasl_mechanism", "plain", "sasl_username", "u"), "sasl_password"},
		{"user without mechanism", base("sasl_username", "u"), "sasl_mechanism"},
		{"password without mechanism", base("sasl_password", "p"), "sasl_mechanism"},
		{"tls not bool", base("tls", "yes please"), "tls"},
		{"ca without tls", base("tls_ca", ca), "tls_ca"},
		{"ca not pem", base("tls", "true", "tls_ca", "not a certificate"), "tls_ca"},
		{"ca private key", base("tls", "true", "tls_ca", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), "tls_ca"},
		{"client id too long", base("client_id", strings.Repeat("c", 256)), "client_id"},
		{"client id newline", base("client_id", "a\nb"), "client_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := kind.Check(kafka.New(), tc.c)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *kind.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field, "%v", err)
			require.NotEmpty(t, fe.Msg)
		})
	}
}
