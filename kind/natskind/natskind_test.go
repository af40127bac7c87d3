package natskind

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

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/natskind/natstest"
	"github.com/stretchr/testify/require"
)

// open opens a publisher of configuration c (checked first), closed when
// the test ends.
func open(t *testing.T, c kind.Config, env kind.Env) *publisher {
	t.Helper()
	require.NoError(t, kind.Check(New(), c))
	p, err := New().Open(c, env)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p.(*publisher)
}

// publish publishes m with a 5s deadline.
func publish(t *testing.T, p kind.Publisher, m kind.Message) kind.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Publish(ctx, m)
}

func message(id string) kind.Message {
	return kind.Message{
		ID: id, Type: "order.created", Tenant: "acme", Dest: "orders", Key: "c42",
		Body: []byte(`{"id":"` + id + `"}`), ContentType: "application/json",
		Timestamp: 1700000000, Signature: "v1,c2lnbmF0dXJl", Attempt: 1,
	}
}

func with(c kind.Config, kv ...string) kind.Config {
	out := kind.Config{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestDeliveredWithEveryAttribute(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := open(t, srv.Config(), kind.Env{})

	a := publish(t, p, message("evt_1"))
	require.NoError(t, a.Err)
	require.Equal(t, "stream RELAY seq 1", a.Detail)

	// The optional attributes are left out when empty.
	bare := kind.Message{ID: "evt_2", Dest: "orders", Body: []byte("plain"), Timestamp: 1700000001}
	a = publish(t, p, bare)
	require.NoError(t, a.Err)
	require.Equal(t, "stream RELAY seq 2", a.Detail)

	got := srv.Messages(t)
	require.Len(t, got, 2)
	require.Equal(t, natstest.Subject, got[0].Subject)
	require.JSONEq(t, `{"id":"evt_1"}`, string(got[0].Body))
	h := got[0].Header
	require.Equal(t, "evt_1", h.Get("webhook-id"))
	require.Equal(t, "1700000000", h.Get("webhook-timestamp"))
	require.Equal(t, "v1,c2lnbmF0dXJl", h.Get("webhook-signature"))
	require.Equal(t, "order.created", h.Get("relay-event-type"))
	require.Equal(t, "acme", h.Get("relay-tenant"))
	require.Equal(t, "orders", h.Get("relay-destination"))
	require.Equal(t, "application/json", h.Get("content-type"))
	require.Equal(t, "evt_1", h.Get(jetstream.MsgIDHeader))

	require.Equal(t, "plain", string(got[1].Body))
	h = got[1].Header
	require.Equal(t, "evt_2", h.Get("webhook-id"))
	require.Equal(t, "1700000001", h.Get("webhook-timestamp"))
	for _, k := range []string{"webhook-signature", "relay-event-type", "relay-tenant", "content-type"} {
		require.NotContains(t, h, k)
	}
}

// A retry of an event the stream stored (its ack lost, say) is confirmed
// with the first copy's sequence, and not stored again.
func TestRetryOfAStoredEventIsDeduplicated(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := open(t, srv.Config(), kind.Env{})

	require.NoError(t, publish(t, p, message("evt_1")).Err)
	m := message("evt_1")
	m.Attempt = 2
	a := publish(t, p, m)
	require.NoError(t, a.Err)
	require.Equal(t, "stream RELAY seq 1 (duplicate: an earlier attempt stored it)", a.Detail)
	require.Len(t, srv.Messages(t), 1)
}

func TestCorePublish(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t) // its stream captures core publishes too: a way to read them
	p := open(t, with(srv.Config(), "jetstream", "false"), kind.Env{})

	a := publish(t, p, message("evt_1"))
	require.NoError(t, a.Err)
	require.Equal(t, "published", a.Detail)

	got := srv.WaitFor(t, 1)
	require.JSONEq(t, `{"id":"evt_1"}`, string(got[0].Body))
	h := got[0].Header
	require.Equal(t, "evt_1", h.Get("webhook-id"))
	require.Equal(t, "1700000000", h.Get("webhook-timestamp"))
	require.Equal(t, "v1,c2lnbmF0dXJl", h.Get("webhook-signature"))
	require.Equal(t, "order.created", h.Get("relay-event-type"))
	require.Equal(t, "acme", h.Get("relay-tenant"))
	require.Equal(t, "orders", h.Get("relay-destination"))
	require.Equal(t, "application/json", h.Get("content-type"))
	require.Equal(t, "evt_1", h.Get(jetstream.MsgIDHeader))
}

func TestServerDownThenBack(t *testing.T) {
	t.Parallel()
	for _, js := range []string{"true", "false"} {
		t.Run("jetstream="+js, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			p := open(t, with(srv.Config(), "jetstream", js), kind.Env{})
			require.NoError(t, publish(t, p, message("evt_1")).Err)

			srv.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			a := p.Publish(ctx, message("evt_2"))
			require.Error(t, a.Err)
			require.False(t, a.Permanent, "%v", a.Err)
			require.Less(t, time.Since(start), 2500*time.Millisecond, "answered within the deadline")

			srv.Restart()
			// The publisher reconnects by itself...
			require.Eventually(t, p.nc.IsConnected, 10*time.Second, 10*time.Millisecond)
			// ...and the next Publish is delivered.
			a = publish(t, p, message("evt_2"))
			require.NoError(t, a.Err)

			// What the stream confirmed before the restart is still there.
			got := srv.WaitFor(t, 2)
			require.Len(t, got, 2)
			require.Equal(t, "evt_1", got[0].Header.Get("webhook-id"))
			require.Equal(t, "evt_2", got[1].Header.Get("webhook-id"))
		})
	}
}

func TestServerNeverStarted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	p := open(t, kind.Config{"url": "nats://" + addr, "subject": "a.b"}, kind.Env{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	a := p.Publish(ctx, message("evt_1"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.Contains(t, a.Err.Error(), "not connected to NATS")
	require.Contains(t, a.Err.Error(), "connection refused")
	require.NoError(t, ctx.Err(), "answered before the deadline")
}

func TestNoStreamIsPermanent(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, natstest.Options{NoStream: true})
	p := open(t, srv.Config(), kind.Env{})
	a := publish(t, p, message("evt_1"))
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "503", a.Code)
	require.ErrorIs(t, a.Err, jetstream.ErrNoStreamResponse)
	require.Contains(t, a.Err.Error(), `no JetStream stream captures subject "relay.events"`)
}

func TestWrongExpectedStreamIsPermanent(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := open(t, with(srv.Config(), "expected_stream", "OTHER"), kind.Env{})
	a := publish(t, p, message("evt_1"))
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "10060", a.Code)
	require.Contains(t, a.Err.Error(), `captured by a stream other than the expected "OTHER"`)

	p = open(t, with(srv.Config(), "expected_stream", natstest.Stream), kind.Env{})
	a = publish(t, p, message("evt_1"))
	require.NoError(t, a.Err)
}

func TestTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	t.Run("server max_payload", func(t *testing.T) {
		t.Parallel()
		srv := natstest.StartWith(t, natstest.Options{MaxPayload: 1024})
		for _, js := range []string{"true", "false"} {
			p := open(t, with(srv.Config(), "jetstream", js), kind.Env{})
			m := message("evt_1")
			m.Body = make([]byte, 2048)
			a := publish(t, p, m)
			require.True(t, a.Permanent, "jetstream=%s: %v", js, a.Err)
			require.Contains(t, a.Err.Error(), "max_payload of 1024 bytes")
		}
	})
	t.Run("stream max_msg_size", func(t *testing.T) {
		t.Parallel()
		srv := natstest.Start(t)
		srv.CreateStream(t, jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small"}, MaxMsgSize: 100})
		p := open(t, with(srv.Config(), "subject", "small"), kind.Env{})
		m := message("evt_1")
		m.Body = make([]byte, 200)
		a := publish(t, p, m)
		require.True(t, a.Permanent, "%v", a.Err)
		require.Equal(t, "10054", a.Code)
	})
}

func TestPermissionViolationIsPermanent(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, natstest.Options{User: "relay", Password: "s3cret", DenyPublish: []string{"denied"}})
	srv.CreateStream(t, jetstream.StreamConfig{Name: "DENIED", Subjects: []string{"denied"}})
	for _, js := range []string{"true", "false"} {
		p := open(t, with(srv.Config(), "subject", "denied", "jetstream", js), kind.Env{})
		start := time.Now()
		a := publish(t, p, message("evt_1"))
		require.True(t, a.Permanent, "jetstream=%s: %v", js, a.Err)
		require.Contains(t, a.Err.Error(), `Permissions Violation for Publish to "denied"`)
		require.Less(t, time.Since(start), 4*time.Second, "not a wait for the deadline")

		// The subject allowed works on the same server.
		p = open(t, with(srv.Config(), "jetstream", js), kind.Env{})
		require.NoError(t, publish(t, p, message("evt_1")).Err)
	}
	require.Empty(t, srv.StreamMessages(t, "DENIED"))
}

func TestCredentialsRefusedIsPermanent(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, natstest.Options{User: "relay", Password: "s3cret"})
	p := open(t, with(srv.Config(), "password", "wrong"), kind.Env{})
	a := publish(t, p, message("evt_1"))
	require.True(t, a.Permanent, "%v", a.Err)
	require.Contains(t, a.Err.Error(), "NATS refused the credentials")
	require.NotContains(t, a.Err.Error(), "wrong")

	p = open(t, srv.Config(), kind.Env{})
	require.NoError(t, publish(t, p, message("evt_1")).Err)
}

func TestTokenAndNKey(t *testing.T) {
	t.Parallel()
	t.Run("token", func(t *testing.T) {
		t.Parallel()
		srv := natstest.StartWith(t, natstest.Options{Token: "t0ken"})
		require.NoError(t, publish(t, open(t, srv.Config(), kind.Env{}), message("evt_1")).Err)
		a := publish(t, open(t, with(srv.Config(), "token", "wrong"), kind.Env{}), message("evt_1"))
		require.True(t, a.Permanent, "%v", a.Err)
	})
	t.Run("nkey", func(t *testing.T) {
		t.Parallel()
		srv := natstest.StartWith(t, natstest.Options{NKeySeed: userSeed(t)})
		require.NoError(t, publish(t, open(t, srv.Config(), kind.Env{}), message("evt_1")).Err)
		a := publish(t, open(t, with(srv.Config(), "nkey_seed", userSeed(t)), kind.Env{}), message("evt_1"))
		require.True(t, a.Permanent, "another key: %v", a.Err)
	})
}

// TLS runs over the connection Env.Dial opened, checked against tls_ca.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, natstest.Options{TLS: true})
	c := srv.Config()
	require.True(t, strings.HasPrefix(c["url"], "tls://"))

	var calls atomic.Int32
	env := kind.Env{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		calls.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	require.NoError(t, publish(t, open(t, c, env), message("evt_1")).Err)
	require.Equal(t, int32(1), calls.Load())
	require.Len(t, srv.Messages(t), 1)

	// Another CA: the server's certificate is refused, which may pass
	// (a certificate renewed), so Retry.
	a := publish(t, open(t, with(c, "tls_ca", testCA(t)), kind.Env{}), message("evt_2"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.Contains(t, a.Err.Error(), "certificate")
}

func TestOrderOfOneKey(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := srv.Config()
	require.True(t, New().Ordered(c))
	p := open(t, c, kind.Env{})
	for i := range 50 {
		m := message(fmt.Sprintf("evt_%02d", i))
		m.Key = "c42"
		require.NoError(t, publish(t, p, m).Err)
	}
	got := srv.Messages(t)
	require.Len(t, got, 50)
	for i, r := range got {
		require.Equal(t, fmt.Sprintf("evt_%02d", i), r.Header.Get("webhook-id"))
	}
}

func TestConcurrentPublishes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := open(t, srv.Config(), kind.Env{})
	var wg sync.WaitGroup
	errs := make(chan error, 8*25)
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if a := publish(t, p, message(fmt.Sprintf("evt_%d_%d", g, i))); a.Err != nil {
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
	got := srv.WaitFor(t, 200)
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.Header.Get("webhook-id")] = true
	}
	require.Len(t, ids, 200)
}

func TestConnectionsGoThroughEnvDial(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)

	var calls atomic.Int32
	var addrs sync.Map
	counting := kind.Env{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		calls.Add(1)
		addrs.Store(addr, true)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	p := open(t, srv.Config(), counting)
	require.Zero(t, calls.Load(), "Open connects nothing")
	require.NoError(t, publish(t, p, message("evt_1")).Err)
	require.Equal(t, int32(1), calls.Load())
	_, ok := addrs.Load(srv.Addr())
	require.True(t, ok, "dialled the server's address")

	blocked := errors.New("address guard: 127.0.0.1 is not allowed")
	refusing := kind.Env{Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, blocked
	}}
	p = open(t, srv.Config(), refusing)
	a := publish(t, p, message("evt_1"))
	require.False(t, a.Permanent)
	require.ErrorIs(t, a.Err, blocked)
	require.Contains(t, a.Err.Error(), blocked.Error())
}

// Dials go through relay's egress dialer as they are: its guard refuses
// what it blocks, with an error relay recognises, and they carry the
// destination, which the proxy's NoProxy dest: entries match.
func TestEgressDialer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)

	guarded := kind.Env{Dial: egress.NewDialer(egress.Options{})} // loopback refused
	a := publish(t, open(t, srv.Config(), guarded), message("evt_1"))
	require.False(t, a.Permanent)
	_, blocked := errors.AsType[*egress.BlockedError](a.Err)
	require.True(t, blocked, "%v", a.Err)

	// A proxy that is not there, which destination "orders" bypasses.
	proxy, err := egress.ParseProxyURL("http://127.0.0.1:1")
	require.NoError(t, err)
	proxy.NoProxy = []string{"dest:orders"}
	env := kind.Env{Dial: egress.NewDialer(egress.Options{Guard: egress.Guard{Off: true}, Proxy: proxy, ConnectTimeout: time.Second})}
	require.NoError(t, publish(t, open(t, srv.Config(), env), message("evt_1")).Err) // message's Dest is "orders"
	other := message("evt_2")
	other.Dest = "other"
	a = publish(t, open(t, srv.Config(), env), other)
	require.Error(t, a.Err, "through the proxy")
	require.False(t, a.Permanent)
}

func TestClose(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p, err := New().Open(srv.Config(), kind.Env{})
	require.NoError(t, err)
	require.NoError(t, publish(t, p, message("evt_1")).Err)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "idempotent")
	a := publish(t, p, message("evt_2"))
	require.ErrorIs(t, a.Err, kind.ErrClosed)
	require.False(t, a.Permanent)

	// Closed before any Publish: nothing was started.
	p, err = New().Open(srv.Config(), kind.Env{})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.ErrorIs(t, publish(t, p, message("evt_1")).Err, kind.ErrClosed)

	// Closed while reconnecting to a server that is gone.
	down := natstest.Start(t)
	p, err = New().Open(down.Config(), kind.Env{})
	require.NoError(t, err)
	require.NoError(t, publish(t, p, message("evt_1")).Err)
	down.Stop()
	require.Eventually(t, func() bool { return !p.(*publisher).nc.IsConnected() }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Close())
	require.ErrorIs(t, publish(t, p, message("evt_2")).Err, kind.ErrClosed)
}

// A Publish under way when the publisher closes answers at once.
func TestCloseEndsAPublishUnderWay(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never says a word: the
	// client waits in its handshake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for c := range accepted {
			_ = c.Close()
		}
	})

	p, err := New().Open(kind.Config{"url": "nats://" + ln.Addr().String(), "subject": "a"}, kind.Env{})
	require.NoError(t, err)
	done := make(chan kind.Answer, 1)
	go func() { done <- publish(t, p, message("evt_1")) }()
	select {
	case c := <-accepted:
		accepted <- c // closed at cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("the publisher did not connect")
	}
	start := time.Now()
	require.NoError(t, p.Close())
	a := <-done
	require.Less(t, time.Since(start), time.Second, "Close and Publish did not wait for the handshake's timeout")
	require.ErrorIs(t, a.Err, kind.ErrClosed)
	require.False(t, a.Permanent)
}

func TestAPIErrorClasses(t *testing.T) {
	t.Parallel()
	p := &publisher{subject: "a.b", expectStream: "S"}
	for _, tc := range []struct {
		code      jetstream.ErrorCode
		status    int
		permanent bool
	}{
		{10054, 400, true},  // message too large for the stream
		{10097, 400, true},  // headers too large
		{10060, 400, true},  // expected stream does not match
		{10109, 400, true},  // sealed stream
		{10077, 503, false}, // store failed (a DiscardNew limit, a write)
		{10023, 503, false}, // insufficient resources
		{10002, 400, false}, // account limits, which free up
		{10118, 500, false}, // stream offline
		{10158, 409, false}, // the same message id being stored
		{19999, 400, true},  // unknown, refusing the request
		{19999, 503, false}, // unknown, the server's trouble
	} {
		e := &jetstream.APIError{Code: tc.status, ErrorCode: tc.code, Description: "x"}
		a := p.apiError(e, fmt.Errorf("nats: %w", e))
		require.Equal(t, tc.permanent, a.Permanent, "%d", tc.code)
		require.Equal(t, strconv.Itoa(int(tc.code)), a.Code)
		require.ErrorIs(t, a.Err, e)
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	k := New()
	require.Equal(t, "nats", k.Name())
	require.Equal(t, "NATS", k.Title())
	require.NotEmpty(t, k.Description())
	for _, f := range k.Fields() {
		require.Equal(t, f.Name == "credentials" || f.Name == "nkey_seed" || f.Name == "token" || f.Name == "password" || f.Name == "tls_key",
			f.Sensitive, f.Name)
		require.NotEmpty(t, f.Label, f.Name)
		require.NotEmpty(t, f.Help, f.Name)
	}
	require.Equal(t, "true", kind.Get(k, kind.Config{}, "jetstream"))
	require.True(t, k.Ordered(kind.Config{"url": "nats://h", "subject": "a"}))
	require.False(t, k.Ordered(kind.Config{"url": "nats://h", "subject": "a", "jetstream": "false"}))
}

func TestValidate(t *testing.T) {
	t.Parallel()
	creds := credsFile(t)
	seed := userSeed(t)
	base := kind.Config{"url": "nats://nats.example.com:4222", "subject": "orders.created"}
	for _, tc := range []struct {
		name  string
		c     kind.Config
		field string // "" when valid
	}{
		{"minimal", base, ""},
		{"cluster", with(base, "url", "nats://a:4222, tls://b:4443,nats://c"), ""},
		{"ipv6", with(base, "url", "nats://[::1]:4222"), ""},
		{"core", with(base, "jetstream", "false"), ""},
		{"expected stream", with(base, "expected_stream", "ORDERS"), ""},
		{"credentials", with(base, "credentials", creds), ""},
		{"credentials trimmed", with(base, "credentials", strings.TrimSpace(creds)), ""}, // as --config-file reads it
		{"nkey", with(base, "nkey_seed", seed), ""},
		{"token", with(base, "token", "t"), ""},
		{"user", with(base, "username", "u", "password", "p"), ""},
		{"tls ca", with(base, "url", "tls://h:4222", "tls_ca", testCA(t)), ""},

		{"no url", kind.Config{"subject": "a"}, "url"},
		{"no subject", kind.Config{"url": "nats://h"}, "subject"},
		{"unknown field", with(base, "stream", "x"), "stream"},
		{"http url", with(base, "url", "http://h:4222"), "url"},
		{"no scheme", with(base, "url", "h:4222"), "url"},
		{"credentials in url", with(base, "url", "nats://u:p@h:4222"), "url"},
		{"token in url", with(base, "url", "nats://tok@h:4222"), "url"},
		{"empty entry", with(base, "url", "nats://a:4222,,nats://b"), "url"},
		{"path", with(base, "url", "nats://h:4222/x"), "url"},
		{"bad port", with(base, "url", "nats://h:99999"), "url"},
		{"wildcard *", with(base, "subject", "orders.*"), "subject"},
		{"wildcard >", with(base, "subject", "orders.>"), "subject"},
		{"empty token", with(base, "subject", "orders..created"), "subject"},
		{"trailing dot", with(base, "subject", "orders."), "subject"},
		{"space", with(base, "subject", "orders created"), "subject"},
		{"js api", with(base, "subject", "$JS.API.STREAM.LIST"), "subject"},
		{"inbox", with(base, "subject", "_INBOX.x"), "subject"},
		{"bad jetstream", with(base, "jetstream", "maybe"), "jetstream"},
		{"expected stream without jetstream", with(base, "jetstream", "false", "expected_stream", "S"), "expected_stream"},
		{"bad stream name", with(base, "expected_stream", "a.b"), "expected_stream"},
		{"two auths", with(base, "token", "t", "username", "u", "password", "p"), "username"},
		{"password alone", with(base, "password", "p"), "username"},
		{"username alone", with(base, "username", "u"), "password"},
		{"bad credentials", with(base, "credentials", "not a creds file"), "credentials"},
		{"bad nkey", with(base, "nkey_seed", "SUNOTASEED"), "nkey_seed"},
		{"account seed", with(base, "nkey_seed", accountSeed(t)), "nkey_seed"},
		{"bad ca", with(base, "tls_ca", "not a pem"), "tls_ca"},
		{"cert without key", with(base, "tls_cert", testCA(t)), "tls_key"},
		{"key without cert", with(base, "tls_key", "k"), "tls_cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := kind.Check(New(), tc.c)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *kind.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field, "%v", err)
			for _, secret := range []string{"SUNOTASEED", "not a creds file", "s3cret"} {
				require.NotContains(t, err.Error(), secret)
			}
		})
	}
}

// A .creds file's content signs the connection in, against a server in
// operator (JWT) mode.
func TestCredentials(t *testing.T) {
	t.Parallel()
	op, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opPub, err := op.PublicKey()
	require.NoError(t, err)
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	require.NoError(t, err)
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	require.NoError(t, err)
	acc, err := nkeys.CreateAccount()
	require.NoError(t, err)
	accPub, err := acc.PublicKey()
	require.NoError(t, err)
	accJWT, err := jwt.NewAccountClaims(accPub).Encode(op)
	require.NoError(t, err)
	resolver := &server.MemAccResolver{}
	require.NoError(t, resolver.Store(accPub, accJWT))

	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		TrustedOperators: []*jwt.OperatorClaims{opClaims}, AccountResolver: resolver,
	})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))

	creds := credsFor(t, acc)
	sub, err := nats.Connect(srv.ClientURL(), nats.UserCredentialBytes([]byte(creds)))
	require.NoError(t, err)
	t.Cleanup(sub.Close)
	got, err := sub.SubscribeSync("a.b")
	require.NoError(t, err)
	require.NoError(t, sub.Flush())

	c := kind.Config{"url": srv.ClientURL(), "subject": "a.b", "jetstream": "false", "credentials": strings.TrimSpace(creds)}
	require.NoError(t, publish(t, open(t, c, kind.Env{}), message("evt_1")).Err)
	m, err := got.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "evt_1", m.Header.Get("webhook-id"))

	// A user of an account the server does not know is refused.
	a := publish(t, open(t, with(c, "credentials", credsFile(t)), kind.Env{}), message("evt_2"))
	require.True(t, a.Permanent, "%v", a.Err)
}

// userSeed is a new user nkey seed.
func userSeed(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	s, err := kp.Seed()
	require.NoError(t, err)
	return string(s)
}

func accountSeed(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	s, err := kp.Seed()
	require.NoError(t, err)
	return string(s)
}

// credsFile is a .creds file's content of a user of a new account.
func credsFile(t *testing.T) string {
	t.Helper()
	acc, err := nkeys.CreateAccount()
	require.NoError(t, err)
	return credsFor(t, acc)
}

// credsFor is a .creds file's content: a new user's JWT signed by acc,
// and the user's seed.
func credsFor(t *testing.T, acc nkeys.KeyPair) string {
	t.Helper()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	token, err := jwt.NewUserClaims(pub).Encode(acc)
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	b, err := jwt.FormatUserConfig(token, seed)
	require.NoError(t, err)
	return string(b)
}

// testCA is a new self-signed CA certificate, PEM-encoded.
func testCA(t *testing.T) string {
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
