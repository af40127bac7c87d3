package pubsub

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/pubsub/pubsubtest"
)

// countingDial dials through a net.Dialer and counts its calls.
type countingDial struct{ n atomic.Int64 }

func (d *countingDial) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// openPub opens a publisher for c, checked, closed at the test's end.
func openPub(t *testing.T, c kind.Config, env kind.Env) kind.Publisher {
	t.Helper()
	k := New()
	require.NoError(t, kind.Check(k, c))
	p, err := k.Open(c, env)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func message(i int, key string) kind.Message {
	return kind.Message{
		ID:          fmt.Sprintf("evt_%d", i),
		Type:        "order.created",
		Tenant:      "acme",
		Dest:        "orders-topic",
		Key:         key,
		Body:        []byte(fmt.Sprintf(`{"n":%d}`, i)),
		ContentType: "application/json",
		Timestamp:   1700000000 + int64(i),
		Signature:   "v1,c2lnbmF0dXJl",
		Attempt:     1,
	}
}

func publish(t *testing.T, p kind.Publisher, m kind.Message, timeout time.Duration) kind.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Publish(ctx, m)
}

func requireDelivered(t *testing.T, a kind.Answer) {
	t.Helper()
	require.NoError(t, a.Err, "code %s", a.Code)
	require.Regexp(t, `^message id \S+$`, a.Detail)
}

func TestDelivered(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	dial := &countingDial{}
	p := openPub(t, srv.Config(), kind.Env{Dial: dial.Dial})

	m := message(1, "customer-7")
	a := publish(t, p, m, 10*time.Second)
	requireDelivered(t, a)

	got := srv.WaitFor(t, 1)
	require.Len(t, got, 1)
	require.Equal(t, "message id "+got[0].ID, a.Detail)
	require.Equal(t, "projects/relay-test/topics/events", got[0].Topic)
	require.Equal(t, m.Body, got[0].Body)
	require.Equal(t, "customer-7", got[0].OrderingKey)
	require.Equal(t, map[string]string{
		"webhook-id":        "evt_1",
		"webhook-timestamp": "1700000001",
		"webhook-signature": "v1,c2lnbmF0dXJl",
		"relay-event-type":  "order.created",
		"relay-tenant":      "acme",
		"relay-destination": "orders-topic",
		"content-type":      "application/json",
	}, got[0].Attributes)
	require.Positive(t, dial.n.Load(), "connections go through env.Dial")

	// Optional metadata left out when empty; an empty body is sent as is.
	bare := kind.Message{ID: "evt_2", Dest: "d", Timestamp: 5}
	requireDelivered(t, publish(t, p, bare, 10*time.Second))
	got = srv.WaitFor(t, 2)
	require.Empty(t, got[1].Body)
	require.Equal(t, map[string]string{
		"webhook-id": "evt_2", "webhook-timestamp": "5", "relay-destination": "d",
	}, got[1].Attributes)
}

func TestTargetDownThenRestarted(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	p := openPub(t, srv.Config(), kind.Env{})
	requireDelivered(t, publish(t, p, message(1, "k"), 10*time.Second))

	srv.Stop()
	start := time.Now()
	a := publish(t, p, message(2, "k"), time.Second)
	require.Error(t, a.Err)
	require.False(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "UNAVAILABLE", a.Code, "%v", a.Err)
	require.Less(t, time.Since(start), 3*time.Second, "answers by the attempt's deadline")

	srv.Restart()
	a = publish(t, p, message(3, "k"), 20*time.Second)
	requireDelivered(t, a)
	got := srv.Messages(t)
	require.Equal(t, "evt_1", got[0].Attributes["webhook-id"], "what was confirmed before the restart is kept")
	require.Equal(t, "evt_3", got[len(got)-1].Attributes["webhook-id"])
}

func TestTargetNeverStarted(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())

	p := openPub(t, kind.Config{"project": "relay-test", "topic": "events", "endpoint": addr}, kind.Env{})
	start := time.Now()
	a := publish(t, p, message(1, ""), 500*time.Millisecond)
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.Equal(t, "UNAVAILABLE", a.Code)
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	throttled, err := status.New(codes.ResourceExhausted, "slow down").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
	require.NoError(t, err)
	for _, tc := range []struct {
		err        error
		permanent  bool
		code       string
		retryAfter time.Duration
	}{
		{status.Error(codes.PermissionDenied, "no publish permission"), true, "PERMISSION_DENIED", 0},
		{status.Error(codes.Unauthenticated, "bad credentials"), true, "UNAUTHENTICATED", 0},
		{status.Error(codes.InvalidArgument, "bad message"), true, "INVALID_ARGUMENT", 0},
		{status.Error(codes.FailedPrecondition, "schema mismatch"), true, "FAILED_PRECONDITION", 0},
		{status.Error(codes.Internal, "oops"), false, "INTERNAL", 0},
		{status.Error(codes.Aborted, "try again"), false, "ABORTED", 0},
		{status.Error(codes.DeadlineExceeded, "slow"), false, "DEADLINE_EXCEEDED", 0},
		{status.Error(codes.Unknown, "?"), false, "UNKNOWN", 0},
		{throttled.Err(), false, "RESOURCE_EXHAUSTED", 3 * time.Second},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			srv := pubsubtest.Start(t)
			p := openPub(t, srv.Config(), kind.Env{})
			srv.FailPublish(tc.err)
			a := publish(t, p, message(1, "k"), 10*time.Second)
			require.Error(t, a.Err)
			require.Equal(t, tc.permanent, a.Permanent, "%v", a.Err)
			require.Equal(t, tc.code, a.Code)
			require.Equal(t, tc.retryAfter, a.RetryAfter)
			require.Contains(t, a.Err.Error(), "projects/relay-test/topics/events")

			// The key is not left paused: the same key publishes next.
			requireDelivered(t, publish(t, p, message(2, "k"), 10*time.Second))
			got := srv.WaitFor(t, 1)
			require.Len(t, got, 1)
			require.Equal(t, "evt_2", got[0].Attributes["webhook-id"])
		})
	}
}

func TestUnavailableRetriedWithinAttempt(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	p := openPub(t, srv.Config(), kind.Env{})
	srv.FailPublish(status.Error(codes.Unavailable, "restarting"), status.Error(codes.Unavailable, "restarting"))
	requireDelivered(t, publish(t, p, message(1, "k"), 10*time.Second))
	require.Len(t, srv.WaitFor(t, 1), 1)
}

func TestTopicMissing(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	c := srv.Config()
	c["topic"] = "missing"
	p := openPub(t, c, kind.Env{})
	a := publish(t, p, message(1, "k"), 10*time.Second)
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "NOT_FOUND", a.Code)
	t.Log(a.Err)
	require.Contains(t, a.Err.Error(), "projects/relay-test/topics/missing")

	srv.CreateTopic("missing")
	requireDelivered(t, publish(t, p, message(2, "k"), 10*time.Second))
}

func TestInvalidMessages(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	p := openPub(t, srv.Config(), kind.Env{})

	m := message(1, "k")
	m.Body = bytes.Repeat([]byte("x"), 11<<20)
	a := publish(t, p, m, 10*time.Second)
	require.True(t, a.Permanent, "%v", a.Err)
	require.Contains(t, a.Err.Error(), "10 MB")

	m = message(2, "k")
	m.Tenant = "bad\xff"
	a = publish(t, p, m, 10*time.Second)
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "INVALID_ARGUMENT", a.Code)

	requireDelivered(t, publish(t, p, message(3, "k"), 10*time.Second))
	require.Len(t, srv.Messages(t), 1)
}

func TestOrderPerKey(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	k := New()
	require.True(t, k.Ordered(srv.Config()))
	p := openPub(t, srv.Config(), kind.Env{})
	const n = 50
	for i := range n {
		requireDelivered(t, publish(t, p, message(i, "one-key"), 10*time.Second))
	}
	got := srv.WaitFor(t, n)
	require.Len(t, got, n)
	for i, m := range got {
		require.Equal(t, fmt.Sprintf("evt_%d", i), m.Attributes["webhook-id"])
		require.Equal(t, "one-key", m.OrderingKey)
	}
}

func TestOrderingOff(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	c := srv.Config()
	c["ordering"] = "false"
	require.False(t, New().Ordered(c))
	p := openPub(t, c, kind.Env{})
	requireDelivered(t, publish(t, p, message(1, "k"), 10*time.Second))
	require.Empty(t, srv.WaitFor(t, 1)[0].OrderingKey)
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	p := openPub(t, srv.Config(), kind.Env{})
	const workers, each = 8, 25
	var wg sync.WaitGroup
	answers := make(chan kind.Answer, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := ""
				if w%2 == 0 {
					key = fmt.Sprintf("key-%d", w)
				}
				answers <- publish(t, p, message(w*each+i, key), 20*time.Second)
			}
		})
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		require.NoError(t, a.Err)
	}
	got := srv.WaitFor(t, workers*each)
	require.Len(t, got, workers*each)
	ids := map[string]bool{}
	for _, m := range got {
		ids[m.Attributes["webhook-id"]] = true
	}
	require.Len(t, ids, workers*each)
}

func TestDialRefused(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	refused := errors.New("address 127.0.0.1 is blocked by the guard")
	var calls atomic.Int64
	p := openPub(t, srv.Config(), kind.Env{Dial: func(context.Context, string, string) (net.Conn, error) {
		calls.Add(1)
		return nil, refused
	}})
	a := publish(t, p, message(1, ""), time.Second)
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.Equal(t, "UNAVAILABLE", a.Code)
	t.Log(a.Err)
	require.Contains(t, a.Err.Error(), refused.Error())
	require.Positive(t, calls.Load())
	require.Empty(t, srv.Messages(t))
}

func TestOpenDoesNotBlock(t *testing.T) {
	t.Parallel()
	// A dial that hangs until gRPC gives up on it.
	hang := func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	k := New()
	c := kind.Config{"project": "relay-test", "topic": "events", "endpoint": "127.0.0.1:9"}
	start := time.Now()
	p, err := k.Open(c, kind.Env{Dial: hang})
	require.NoError(t, err)
	require.Less(t, time.Since(start), time.Second)
	a := publish(t, p, message(1, ""), 300*time.Millisecond)
	require.Error(t, a.Err)
	require.False(t, a.Permanent)
	require.NoError(t, p.Close())
}

func TestClose(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.Start(t)
	k := New()
	p, err := k.Open(srv.Config(), kind.Env{})
	require.NoError(t, err)
	requireDelivered(t, publish(t, p, message(1, "k"), 10*time.Second))
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	a := publish(t, p, message(2, "k"), time.Second)
	require.ErrorIs(t, a.Err, kind.ErrClosed)
	require.False(t, a.Permanent)

	// Closed while connecting, and while a request outlives its attempt.
	p, err = k.Open(srv.Config(), kind.Env{})
	require.NoError(t, err)
	require.NoError(t, p.Close())

	srv.Stop()
	p, err = k.Open(srv.Config(), kind.Env{})
	require.NoError(t, err)
	a = publish(t, p, message(3, "k"), 300*time.Millisecond)
	require.Error(t, a.Err)
	start := time.Now()
	require.NoError(t, p.Close())
	require.Less(t, time.Since(start), 5*time.Second)
}

// serviceAccountKey is a service account key file with a new RSA key whose
// token_uri is tokenURI.
func serviceAccountKey(t *testing.T, tokenURI string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "relay-test",
		"private_key_id": "abc123",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "relay@relay-test.iam.gserviceaccount.com",
		"client_id":      "1",
		"token_uri":      tokenURI,
	})
	require.NoError(t, err)
	return string(b)
}

func TestServiceAccountSignsItsOwnTokens(t *testing.T) {
	t.Parallel()
	var fetched atomic.Int64
	tokenServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetched.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer tokenServer.Close()
	key := serviceAccountKey(t, tokenServer.URL)
	require.NoError(t, kind.Check(New(), kind.Config{"project": "relay-test", "topic": "events", "credentials_json": key}))

	creds, err := serviceAccountCredentials([]byte(key), tokenServer.Client())
	require.NoError(t, err)
	tok, err := creds.Token(context.Background())
	require.NoError(t, err)
	parts := strings.Split(tok.Value, ".")
	require.Len(t, parts, 3, "a JWT")
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	require.Contains(t, string(claims), "relay@relay-test.iam.gserviceaccount.com")
	require.Contains(t, string(claims), "https://www.googleapis.com/auth/pubsub")
	require.Zero(t, fetched.Load(), "the key file's token_uri is never called")
}

func TestServiceAccountClient(t *testing.T) {
	t.Parallel()
	// With credentials the endpoint is reached over TLS: the plaintext fake
	// fails the handshake, which is retryable, through env.Dial.
	srv := pubsubtest.Start(t)
	c := srv.Config()
	c["credentials_json"] = serviceAccountKey(t, "https://oauth2.googleapis.com/token")
	dial := &countingDial{}
	p := openPub(t, c, kind.Env{Dial: dial.Dial})
	a := publish(t, p, message(1, ""), time.Second)
	require.Error(t, a.Err)
	require.False(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "UNAVAILABLE", a.Code)
	require.Positive(t, dial.n.Load())
	t.Log(a.Err)
	require.NotContains(t, a.Err.Error(), "PRIVATE KEY")
	require.Empty(t, srv.Messages(t))
}

func TestValidate(t *testing.T) {
	t.Parallel()
	key := serviceAccountKey(t, "https://oauth2.googleapis.com/token")
	good := func(extra ...string) kind.Config {
		c := kind.Config{"project": "my-project", "topic": "orders"}
		for i := 0; i+1 < len(extra); i += 2 {
			c[extra[i]] = extra[i+1]
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		c     kind.Config
		field string // "" for a good config
	}{
		{"minimal", good(), ""},
		{"everything", good("credentials_json", key, "endpoint", "us-east1-pubsub.googleapis.com:443", "ordering", "false"), ""},
		{"emulator", good("endpoint", "localhost:8085"), ""},
		{"ipv6 endpoint", good("endpoint", "[::1]:8085"), ""},
		{"domain-scoped project", good("project", "example.com:my-project"), ""},
		{"topic characters", good("topic", "Orders_v2.created~x+y%20"), ""},
		{"no project", kind.Config{"topic": "orders"}, "project"},
		{"no topic", kind.Config{"project": "my-project"}, "topic"},
		{"project too short", good("project", "abc"), "project"},
		{"project upper case", good("project", "My-Project"), "project"},
		{"project starts with digit", good("project", "1project"), "project"},
		{"project ends with hyphen", good("project", "my-project-"), "project"},
		{"topic too short", good("topic", "ab"), "topic"},
		{"topic starts with digit", good("topic", "1orders"), "topic"},
		{"topic with slash", good("topic", "a/b"), "topic"},
		{"topic full name", good("topic", "projects/my-project/topics/orders"), "topic"},
		{"topic goog", good("topic", "google-events"), "topic"},
		{"topic too long", good("topic", "a"+strings.Repeat("b", 255)), "topic"},
		{"endpoint without port", good("endpoint", "localhost"), "endpoint"},
		{"endpoint url", good("endpoint", "https://pubsub.googleapis.com"), "endpoint"},
		{"endpoint port zero", good("endpoint", "localhost:0"), "endpoint"},
		{"endpoint port name", good("endpoint", "localhost:http"), "endpoint"},
		{"credentials not json", good("credentials_json", "secret-ish"), "credentials_json"},
		{"credentials other type", good("credentials_json", `{"type":"external_account","credential_source":{"file":"/etc/passwd"}}`), "credentials_json"},
		{"credentials no email", good("credentials_json", `{"type":"service_account","private_key":"x"}`), "credentials_json"},
		{"credentials bad key", good("credentials_json", `{"type":"service_account","client_email":"a@b","private_key":"not pem"}`), "credentials_json"},
		{"ordering not bool", good("ordering", "sometimes"), "ordering"},
		{"unknown field", good("region", "x"), "region"},
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
			require.NotContains(t, err.Error(), "secret-ish", "a credential is never quoted")
		})
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	k := New()
	require.Equal(t, "pubsub", k.Name())
	require.Equal(t, "Google Cloud Pub/Sub", k.Title())
	require.NotEmpty(t, k.Description())
	require.True(t, kind.Sensitive(k, "credentials_json"))
	for _, name := range []string{"project", "topic", "endpoint", "ordering"} {
		require.False(t, kind.Sensitive(k, name), name)
	}
	require.Equal(t, "true", kind.Get(k, kind.Config{}, "ordering"))
	for _, f := range k.Fields() {
		require.NotEmpty(t, f.Label, f.Name)
		require.NotEmpty(t, f.Help, f.Name)
	}
}

func TestCodeName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "NOT_FOUND", codeName(codes.NotFound))
	require.Equal(t, "OK", codeName(codes.OK))
	require.Equal(t, "RESOURCE_EXHAUSTED", codeName(codes.ResourceExhausted))
	require.Equal(t, "UNAUTHENTICATED", codeName(codes.Unauthenticated))
}
