package awstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/kind"
)

// PlainEnv is an Env that dials with no guard and gives no HTTP client.
var PlainEnv = kind.Env{Dial: (&net.Dialer{}).DialContext}

// Open checks c against k and opens k's publisher for c, closed (with no
// error) when the test ends.
func Open(t *testing.T, k kind.Kind, c kind.Config, env kind.Env) kind.Publisher {
	t.Helper()
	require.NoError(t, kind.Check(k, c))
	p, err := k.Open(c, env)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// Message is the event of id the tests publish: every field set, a JSON
// body with non-ASCII text and HTML's special characters.
func Message(id string) kind.Message {
	return kind.Message{ID: id, Type: "order.created", Tenant: "acme", Dest: "orders",
		Body: []byte(`{"order":42,"note":"<déjà vu>"}`), ContentType: "application/json",
		Timestamp: 1700000000, Signature: "v1,c2lnbmF0dXJl", Attempt: 1}
}

// Publish publishes m with p, within 10 seconds.
func Publish(t *testing.T, p kind.Publisher, m kind.Message) kind.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Publish(ctx, m)
}

// RequireDelivered checks that a is a delivery.
func RequireDelivered(t *testing.T, a kind.Answer) {
	t.Helper()
	require.NoError(t, a.Err)
	require.False(t, a.Permanent)
}

// RequireRetry checks that a is a failure that may pass, of code.
func RequireRetry(t *testing.T, a kind.Answer, code string) {
	t.Helper()
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.Equal(t, code, a.Code)
}

// Restartable is a fake service that can be stopped and restarted on its
// address.
type Restartable interface {
	Stop()
	Restart()
}

// StopAndRestart publishes the event "before" with p, to s; stops s and
// checks that publishing "while-down" fails within 5 seconds, not for
// good; then restarts s and publishes "after".
func StopAndRestart(t *testing.T, p kind.Publisher, s Restartable) {
	t.Helper()
	RequireDelivered(t, Publish(t, p, Message("before")))

	s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	a := p.Publish(ctx, Message("while-down"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent, "a stopped server is not a permanent failure: %v", a.Err)
	require.Less(t, time.Since(start), 5*time.Second)

	s.Restart()
	RequireDelivered(t, Publish(t, p, Message("after")))
}

// RestartBetween restarts s before each of 10 publishes with p (events
// restart-0 to restart-9): each leaves a closed kept-alive connection
// behind, and the next publish still gets through.
func RestartBetween(t *testing.T, p kind.Publisher, s Restartable) {
	t.Helper()
	for i := range 10 {
		s.Restart()
		RequireDelivered(t, Publish(t, p, Message(fmt.Sprintf("restart-%d", i))))
	}
}

// EndpointConfig is the part of a configuration that reaches a service at
// the endpoint http://addr in us-east-1, with the static keys akid and
// secret.
func EndpointConfig(addr, akid, secret string) kind.Config {
	return kind.Config{"endpoint": "http://" + addr, "region": "us-east-1",
		"access_key_id": akid, "secret_access_key": secret}
}

// TargetNeverStarted checks that k's publisher for config(addr), addr a
// loopback address nothing listens on, fails a Publish, not for good.
func TargetNeverStarted(t *testing.T, k kind.Kind, config func(addr string) kind.Config) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := Open(t, k, config(addr), PlainEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a := p.Publish(ctx, Message("evt-1"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
}

// HungTarget checks, with k's publishers for config(addr), addr a loopback
// address whose listener accepts connections and never answers, that
// Publish ends with its context (not for good), and that Close ends a
// Publish under way with kind.ErrClosed.
func HungTarget(t *testing.T, k kind.Kind, config func(addr string) kind.Config) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	accepted := make(chan net.Conn, 4)
	conns.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn // read nothing, answer nothing
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Wait()
		close(accepted)
		for conn := range accepted {
			_ = conn.Close()
		}
	})
	c := config(ln.Addr().String())

	p := Open(t, k, c, PlainEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	a := p.Publish(ctx, Message("evt-1"))
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.Less(t, time.Since(start), 5*time.Second)

	p2, err := k.Open(c, PlainEnv)
	require.NoError(t, err)
	done := make(chan kind.Answer)
	go func() { done <- p2.Publish(context.Background(), Message("evt-2")) }()
	require.Eventually(t, func() bool { return len(accepted) == 2 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, p2.Close())
	select {
	case a := <-done:
		require.ErrorIs(t, a.Err, kind.ErrClosed)
		require.False(t, a.Permanent)
	case <-time.After(5 * time.Second):
		t.Fatal("Publish still running after Close")
	}
}

// RefusedCredentials checks that k's publisher for c with another secret
// access key fails for good with code badSecret, the secret not in the
// error; and with another access key ID, with code badKey.
func RefusedCredentials(t *testing.T, k kind.Kind, c kind.Config, badSecret, badKey string) {
	t.Helper()
	wrongSecret := maps.Clone(c)
	wrongSecret["secret_access_key"] = "not-the-secret"
	a := Publish(t, Open(t, k, wrongSecret, PlainEnv), Message("evt-1"))
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, badSecret, a.Code)
	require.NotContains(t, a.Err.Error(), "not-the-secret")

	wrongKey := maps.Clone(c)
	wrongKey["access_key_id"] = "AKIAOTHER"
	a = Publish(t, Open(t, k, wrongKey, PlainEnv), Message("evt-1"))
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, badKey, a.Code)
}

// TokenServer is a fake service that can require a session token.
type TokenServer interface {
	RequireSessionToken(tok string)
	// Config is a configuration of the kind reaching the service.
	Config() kind.Config
}

// SessionToken checks that k's publisher gets through to s when s requires
// a session token and the configuration has it, and fails for good with
// code refused when the configuration has none.
func SessionToken(t *testing.T, k kind.Kind, s TokenServer, refused string) {
	t.Helper()
	s.RequireSessionToken("session-token-1")
	RequireDelivered(t, Publish(t, Open(t, k, s.Config(), PlainEnv), Message("evt-1")))

	c := s.Config()
	delete(c, "session_token")
	a := Publish(t, Open(t, k, c, PlainEnv), Message("evt-2"))
	require.True(t, a.Permanent)
	require.Equal(t, refused, a.Code)
}

// PublishConcurrently publishes 200 events with p from 8 goroutines at
// once (evt-<goroutine>-<i>), failing the test for each that is not
// delivered.
func PublishConcurrently(t *testing.T, p kind.Publisher) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				a := Publish(t, p, Message(fmt.Sprintf("evt-%d-%d", g, i)))
				if a.Err != nil {
					t.Errorf("publish %d-%d: %v", g, i, a.Err)
				}
			}
		})
	}
	wg.Wait()
}

// DialThroughEnv checks that k's publisher for c connects through its
// Env: it gets through with env.Dial when env has no HTTP client (evt-1),
// fails (not for good) with the error of a Dial that refuses (evt-2), and
// gets through relay's HTTP client when env has one, whatever Dial does
// (evt-3). The service then has 2 events.
func DialThroughEnv(t *testing.T, k kind.Kind, c kind.Config) {
	t.Helper()
	var dials atomic.Int32
	counting := kind.Env{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	RequireDelivered(t, Publish(t, Open(t, k, c, counting), Message("evt-1")))
	require.Positive(t, dials.Load())

	refused := errors.New("address refused by the guard")
	refusing := kind.Env{Dial: func(context.Context, string, string) (net.Conn, error) { return nil, refused }}
	a := Publish(t, Open(t, k, c, refusing), Message("evt-2"))
	require.ErrorIs(t, a.Err, refused)
	require.False(t, a.Permanent)

	// relay's HTTP client, when given, is the one used.
	var viaClient atomic.Int32
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		viaClient.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	withClient := kind.Env{Dial: refusing.Dial, HTTPClient: &http.Client{Transport: tr}}
	RequireDelivered(t, Publish(t, Open(t, k, c, withClient), Message("evt-3")))
	require.Positive(t, viaClient.Load())
}

// CloseTwice checks that k's publisher for c delivers evt-1, closes twice
// without error, and then answers a Publish (evt-2) with kind.ErrClosed,
// not for good. The service then has 1 event.
func CloseTwice(t *testing.T, k kind.Kind, c kind.Config) {
	t.Helper()
	p, err := k.Open(c, PlainEnv)
	require.NoError(t, err)
	RequireDelivered(t, Publish(t, p, Message("evt-1")))
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	a := Publish(t, p, Message("evt-2"))
	require.ErrorIs(t, a.Err, kind.ErrClosed)
	require.False(t, a.Permanent)
}

// With is good with the fields of kv (name, value, name, value...) set, an
// empty value deleting its field.
func With(good kind.Config, kv ...string) kind.Config {
	c := maps.Clone(good)
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(c, kv[i])
		} else {
			c[kv[i]] = kv[i+1]
		}
	}
	return c
}

// CheckConfig runs kind.Check of k on c in a subtest named name, and
// checks that it finds c good when field is "", else that it blames field
// with a *kind.FieldError.
func CheckConfig(t *testing.T, k kind.Kind, name string, c kind.Config, field string) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		err := kind.Check(k, c)
		if field == "" {
			require.NoError(t, err)
			return
		}
		var fe *kind.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, field, fe.Field, "%v", err)
	})
}

// RequireSensitiveCredentials checks that of k's fields the secret access
// key and the session token, and they alone, are sensitive.
func RequireSensitiveCredentials(t *testing.T, k kind.Kind) {
	t.Helper()
	for _, f := range k.Fields() {
		require.Equal(t, f.Name == "secret_access_key" || f.Name == "session_token", f.Sensitive, f.Name)
	}
}
