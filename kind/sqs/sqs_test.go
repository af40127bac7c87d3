package sqs_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/internal/awsapi/awstest"
	"github.com/relaydev/relay/kind/sqs"
	"github.com/relaydev/relay/kind/sqs/sqstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	plainEnv         = awstest.PlainEnv
	message          = awstest.Message
	publish          = awstest.Publish
	requireDelivered = awstest.RequireDelivered
)

// open checks c and opens a publisher closed when the test ends.
func open(t *testing.T, c kind.Config, env kind.Env) kind.Publisher {
	t.Helper()
	return awstest.Open(t, sqs.New(), c, env)
}

// endpointConfig reaches the queue q of an endpoint at addr.
func endpointConfig(addr string) kind.Config {
	c := awstest.EndpointConfig(addr, sqstest.AccessKeyID, sqstest.SecretAccessKey)
	c["queue_url"] = "http://" + addr + "/000000000000/q"
	return c
}

func TestDelivered(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	p := open(t, s.Config(), plainEnv)

	a := publish(t, p, message("evt-1"))
	requireDelivered(t, a)
	got := s.Messages(t)
	require.Len(t, got, 1)
	m := got[0]
	require.Equal(t, "message id "+m.MessageID, a.Detail)
	require.Equal(t, sqstest.Queue, m.Queue)
	require.Equal(t, `{"order":42,"note":"<déjà vu>"}`, m.Body)
	require.Equal(t, map[string]string{
		"webhook-id":        "evt-1",
		"webhook-timestamp": "1700000000",
		"webhook-signature": "v1,c2lnbmF0dXJl",
		"relay-event-type":  "order.created",
		"relay-tenant":      "acme",
		"relay-destination": "orders",
		"content-type":      "application/json",
	}, m.Attributes)
	require.Empty(t, m.MessageGroupID, "a standard queue has no message group")
	require.Empty(t, m.MessageDeduplicationID)

	// Optional metadata left empty is left out.
	bare := kind.Message{ID: "evt-2", Dest: "orders", Body: []byte("plain"), Timestamp: 1700000001}
	requireDelivered(t, publish(t, p, bare))
	require.Equal(t, map[string]string{"webhook-id": "evt-2", "webhook-timestamp": "1700000001",
		"relay-destination": "orders"}, s.Messages(t)[1].Attributes)
}

func TestFIFO(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	c := s.FIFOConfig()
	require.True(t, sqs.New().Ordered(c))
	require.False(t, sqs.New().Ordered(s.Config()))
	p := open(t, c, plainEnv)

	m := message("evt-1")
	m.Key = "customer-42"
	a := publish(t, p, m)
	requireDelivered(t, a)
	got := s.Messages(t)
	require.Len(t, got, 1)
	require.Equal(t, "customer-42", got[0].MessageGroupID)
	require.Equal(t, "evt-1", got[0].MessageDeduplicationID)
	require.Equal(t, "message id "+got[0].MessageID+", sequence number "+got[0].SequenceNumber, a.Detail)

	// A retry of the same event within SQS's window is not stored twice.
	again := publish(t, p, m)
	requireDelivered(t, again)
	require.Equal(t, a.Detail, again.Detail)
	require.Len(t, s.Messages(t), 1)

	// No key: a group of its own. Ids and keys SQS cannot take are hashed.
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	long := strings.Repeat("x", 129)
	m = message(long)
	requireDelivered(t, publish(t, p, m))
	m = message("evt 3")
	m.Key = "clé"
	requireDelivered(t, publish(t, p, m))
	got = s.Messages(t)
	require.Len(t, got, 3)
	require.Equal(t, hash(long), got[1].MessageGroupID)
	require.Equal(t, hash(long), got[1].MessageDeduplicationID)
	require.Equal(t, long, got[1].Attributes["webhook-id"])
	require.Equal(t, hash("clé"), got[2].MessageGroupID)
	require.Equal(t, hash("evt 3"), got[2].MessageDeduplicationID)
}

func TestTargetDownThenRestarted(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	p := open(t, s.Config(), plainEnv)
	awstest.StopAndRestart(t, p, s)
	got := s.Messages(t)
	require.Len(t, got, 2)
	require.Equal(t, "before", got[0].Attributes["webhook-id"])
	require.Equal(t, "after", got[1].Attributes["webhook-id"])

	// A restart between two publishes leaves a closed kept-alive
	// connection behind: the next publish still gets through.
	awstest.RestartBetween(t, p, s)
	require.Len(t, s.Messages(t), 12)
}

func TestTargetNeverStarted(t *testing.T) {
	t.Parallel()
	awstest.TargetNeverStarted(t, sqs.New(), endpointConfig)
}

// TestHungTarget checks that Publish ends with its context when the target
// accepts the connection and never answers, and that Close ends a Publish
// under way.
func TestHungTarget(t *testing.T) {
	t.Parallel()
	awstest.HungTarget(t, sqs.New(), endpointConfig)
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)

	a := publish(t, open(t, s.QueueConfig("missing"), plainEnv), message("evt-1"))
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", a.Code)
	require.ErrorContains(t, a.Err, "does not exist")

	awstest.RefusedCredentials(t, sqs.New(), s.Config(), "SignatureDoesNotMatch", "InvalidClientTokenId")

	p := open(t, s.Config(), plainEnv)
	s.FailNext(1, sqstest.AccessDenied)
	a = publish(t, p, message("evt-1"))
	require.True(t, a.Permanent)
	require.Equal(t, "AccessDenied", a.Code)

	s.FailNext(1, sqstest.KMSDisabled)
	a = publish(t, p, message("evt-1"))
	require.True(t, a.Permanent)
	require.Equal(t, "KMS.DisabledException", a.Code)

	// Too large for the queue: SQS refuses it.
	big := message("evt-big")
	big.Body = []byte(strings.Repeat("x", sqstest.MaxMessageSize))
	a = publish(t, p, big)
	require.True(t, a.Permanent)
	require.Equal(t, "InvalidParameterValue", a.Code)

	// Bodies SQS cannot take are refused without a call.
	for _, body := range []string{"", "bell\x07", "\xff\xfe", strings.Repeat("x", sqs.MaxMessageSize)} {
		m := message("evt-bad")
		m.Body = []byte(body)
		a = publish(t, p, m)
		require.True(t, a.Permanent, "%q", body[:min(len(body), 8)])
		require.Error(t, a.Err)
	}
	require.Empty(t, s.Messages(t))
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	p := open(t, s.Config(), plainEnv)

	s.FailNext(1, sqstest.Throttled)
	awstest.RequireRetry(t, publish(t, p, message("evt-1")), "RequestThrottled")

	s.FailNext(1, sqstest.Unavailable)
	awstest.RequireRetry(t, publish(t, p, message("evt-1")), "ServiceUnavailable")

	requireDelivered(t, publish(t, p, message("evt-1")))
	require.Len(t, s.Messages(t), 1)
}

func TestSessionToken(t *testing.T) {
	t.Parallel()
	awstest.SessionToken(t, sqs.New(), sqstest.Start(t), "InvalidClientTokenId")
}

func TestOrder(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	p := open(t, s.FIFOConfig(), plainEnv)
	for i := range 50 {
		m := message(fmt.Sprintf("evt-%d", i))
		m.Key = "one-key"
		requireDelivered(t, publish(t, p, m))
	}
	got := s.Messages(t)
	require.Len(t, got, 50)
	for i, m := range got {
		require.Equal(t, fmt.Sprintf("evt-%d", i), m.Attributes["webhook-id"])
		require.Equal(t, "one-key", m.MessageGroupID)
		require.Equal(t, fmt.Sprintf("%020d", i+1), m.SequenceNumber)
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	awstest.PublishConcurrently(t, open(t, s.Config(), plainEnv))
	got := s.Messages(t)
	require.Len(t, got, 200)
	ids := map[string]bool{}
	for _, m := range got {
		ids[m.Attributes["webhook-id"]] = true
	}
	require.Len(t, ids, 200)
}

func TestDialThroughEnv(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	awstest.DialThroughEnv(t, sqs.New(), s.Config())
	require.Len(t, s.Messages(t), 2)
}

func TestClose(t *testing.T) {
	t.Parallel()
	s := sqstest.Start(t)
	awstest.CloseTwice(t, sqs.New(), s.Config())
	require.Len(t, s.Messages(t), 1)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	k := sqs.New()
	good := kind.Config{
		"queue_url":         "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
		"access_key_id":     "AKIAEXAMPLE",
		"secret_access_key": "secret",
	}
	with := func(kv ...string) kind.Config { return awstest.With(good, kv...) }
	for _, tc := range []struct {
		name  string
		c     kind.Config
		field string // "" for a good configuration
	}{
		{"good", good, ""},
		{"fifo", with("queue_url", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"), ""},
		{"legacy host", with("queue_url", "https://eu-west-1.queue.amazonaws.com/123456789012/orders"), ""},
		{"us-east-1 legacy host", with("queue_url", "https://queue.amazonaws.com/123456789012/orders"), ""},
		{"vpc endpoint", with("queue_url", "https://vpce-0a1b.sqs.us-gov-west-1.vpce.amazonaws.com/123456789012/q"), ""},
		{"china", with("queue_url", "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q"), ""},
		{"region given", with("queue_url", "https://sqs.example.internal/123456789012/q", "region", "ap-south-2"), ""},
		{"localstack", with("queue_url", "http://localhost:4566/000000000000/q", "endpoint", "http://localhost:4566", "region", "us-east-1"), ""},
		{"session token", with("session_token", "FwoGZXIvYXdzE"), ""},
		{"no queue url", with("queue_url", ""), "queue_url"},
		{"no access key", with("access_key_id", ""), "access_key_id"},
		{"no secret", with("secret_access_key", ""), "secret_access_key"},
		{"unknown field", with("queue", "x"), "queue"},
		{"not a url", with("queue_url", "orders"), "queue_url"},
		{"http to aws", with("queue_url", "http://sqs.eu-west-1.amazonaws.com/123456789012/orders"), "queue_url"},
		{"no account", with("queue_url", "https://sqs.eu-west-1.amazonaws.com/orders"), "queue_url"},
		{"bad name", with("queue_url", "https://sqs.eu-west-1.amazonaws.com/123456789012/or ders"), "queue_url"},
		{"name too long", with("queue_url", "https://sqs.eu-west-1.amazonaws.com/123456789012/"+strings.Repeat("q", 81)), "queue_url"},
		{"query", with("queue_url", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders?x=1"), "queue_url"},
		{"no region anywhere", with("queue_url", "https://sqs.example.internal/123456789012/q"), "region"},
		{"bad region", with("region", "Europe"), "region"},
		{"bad endpoint", with("endpoint", "localhost:4566"), "endpoint"},
		{"endpoint with query", with("endpoint", "http://localhost:4566/?a=b"), "endpoint"},
		{"spaced key", with("access_key_id", "AKIA EXAMPLE"), "access_key_id"},
		{"spaced secret", with("secret_access_key", "secret "), "secret_access_key"},
	} {
		awstest.CheckConfig(t, k, tc.name, tc.c, tc.field)
	}
	awstest.RequireSensitiveCredentials(t, k)
	require.Equal(t, "sqs", k.Name())
	require.Equal(t, "Amazon SQS", k.Title())
}
