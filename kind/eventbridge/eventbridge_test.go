package eventbridge_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/eventbridge"
	"github.com/relaydev/relay/kind/eventbridge/eventbridgetest"
	"github.com/relaydev/relay/kind/internal/awsapi/awstest"
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
	return awstest.Open(t, eventbridge.New(), c, env)
}

// endpointConfig reaches the default event bus of an endpoint at addr.
func endpointConfig(addr string) kind.Config {
	return awstest.EndpointConfig(addr, eventbridgetest.AccessKeyID, eventbridgetest.SecretAccessKey)
}

func detail(t *testing.T, e eventbridgetest.Event) map[string]any {
	t.Helper()
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(e.Detail), &d))
	return d
}

func TestDelivered(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	p := open(t, s.Config(), plainEnv)

	a := publish(t, p, message("evt-1"))
	requireDelivered(t, a)
	got := s.Events(t)
	require.Len(t, got, 1)
	e := got[0]
	require.Equal(t, "event id "+e.ID, a.Detail)
	require.Equal(t, eventbridgetest.Bus, e.Bus)
	require.Equal(t, "relay", e.Source)
	require.Equal(t, "order.created", e.DetailType)
	require.Equal(t, time.Unix(1700000000, 0).UTC(), e.Time)
	require.JSONEq(t, `{"id":"evt-1","type":"order.created","tenant":"acme","destination":"orders",
		"timestamp":1700000000,"signature":"v1,c2lnbmF0dXJl","content_type":"application/json",
		"data":{"order":42,"note":"<déjà vu>"}}`, e.Detail)
	require.Contains(t, e.Detail, `"<déjà vu>"`, "no HTML escaping")

	// A body that is not JSON is a string; one that is not text, base64.
	// Empty metadata is left out, and an untyped event gets detail-type event.
	m := kind.Message{ID: "evt-2", Dest: "orders", Body: []byte("plain text"), ContentType: "text/plain", Timestamp: 1700000001}
	requireDelivered(t, publish(t, p, m))
	m = kind.Message{ID: "evt-3", Dest: "orders", Body: []byte{0xff, 0x00, 0x01}, ContentType: "application/octet-stream", Timestamp: 1700000002}
	requireDelivered(t, publish(t, p, m))
	got = s.Events(t)
	require.Len(t, got, 3)
	require.Equal(t, "event", got[1].DetailType)
	require.JSONEq(t, `{"id":"evt-2","destination":"orders","timestamp":1700000001,"content_type":"text/plain","data":"plain text"}`, got[1].Detail)
	require.Equal(t, map[string]any{"id": "evt-3", "destination": "orders", "timestamp": float64(1700000002),
		"content_type": "application/octet-stream", "data_base64": "/wAB"}, detail(t, got[2]))
}

func TestSourceDetailTypeAndBusARN(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	c := s.Config()
	c["event_bus"] = s.BusARN("default")
	delete(c, "region") // the ARN's
	c["source"] = "com.example.orders"
	c["detail_type"] = "Order Event"
	p := open(t, c, plainEnv)
	requireDelivered(t, publish(t, p, message("evt-1")))
	e := s.Events(t)[0]
	require.Equal(t, "default", e.Bus)
	require.Equal(t, "com.example.orders", e.Source)
	require.Equal(t, "Order Event", e.DetailType)
	require.Equal(t, "order.created", detail(t, e)["type"])
}

func TestTargetDownThenRestarted(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	p := open(t, s.Config(), plainEnv)
	awstest.StopAndRestart(t, p, s)
	// A restart between two publishes leaves a closed kept-alive
	// connection behind: the next publish still gets through.
	awstest.RestartBetween(t, p, s)
	got := s.Events(t)
	require.Len(t, got, 12)
	require.Equal(t, "before", detail(t, got[0])["id"])
	require.Equal(t, "after", detail(t, got[1])["id"])
}

func TestTargetNeverStarted(t *testing.T) {
	t.Parallel()
	awstest.TargetNeverStarted(t, eventbridge.New(), endpointConfig)
}

func TestHungTarget(t *testing.T) {
	t.Parallel()
	awstest.HungTarget(t, eventbridge.New(), endpointConfig)
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)

	a := publish(t, open(t, s.BusConfig("missing"), plainEnv), message("evt-1"))
	require.True(t, a.Permanent, "%v", a.Err)
	require.Equal(t, "ResourceNotFoundException", a.Code)
	require.ErrorContains(t, a.Err, "Event bus missing does not exist")
	var entryErr *eventbridge.EntryError
	require.ErrorAs(t, a.Err, &entryErr)

	awstest.RefusedCredentials(t, eventbridge.New(), s.Config(), "InvalidSignatureException", "UnrecognizedClientException")

	p := open(t, s.Config(), plainEnv)
	s.FailNext(1, eventbridgetest.AccessDenied)
	a = publish(t, p, message("evt-1"))
	require.True(t, a.Permanent)
	require.Equal(t, "AccessDeniedException", a.Code)

	// An event type too long for a detail-type is refused without a call.
	m := message("evt-1")
	m.Type = strings.Repeat("t", 129)
	a = publish(t, p, m)
	require.True(t, a.Permanent)
	require.Empty(t, s.Events(t))
}

func TestPartialFailure(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	p := open(t, s.Config(), plainEnv)

	for _, f := range []eventbridgetest.EntryFailure{eventbridgetest.EntryThrottled, eventbridgetest.EntryInternal,
		{Code: "InternalException", Message: "oops"}} {
		s.FailEntriesNext(1, f)
		a := publish(t, p, message("evt-1"))
		require.Error(t, a.Err)
		require.False(t, a.Permanent, f.Code)
		require.Equal(t, f.Code, a.Code)
		require.ErrorContains(t, a.Err, f.Message)
	}
	for _, f := range []eventbridgetest.EntryFailure{eventbridgetest.EntryNotAuthorized,
		{Code: "InvalidArgument", Message: "bad"}, {Code: "MalformedDetail", Message: "bad json"},
		{Code: "AccessDeniedException", Message: "no"}} {
		s.FailEntriesNext(1, f)
		a := publish(t, p, message("evt-1"))
		require.True(t, a.Permanent, f.Code)
		require.Equal(t, f.Code, a.Code)
		var entryErr *eventbridge.EntryError
		require.ErrorAs(t, a.Err, &entryErr)
		require.Equal(t, f.Message, entryErr.Message)
	}
	require.Empty(t, s.Events(t))
	requireDelivered(t, publish(t, p, message("evt-1")))
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	p := open(t, s.Config(), plainEnv)

	s.FailNext(1, eventbridgetest.Throttled)
	awstest.RequireRetry(t, publish(t, p, message("evt-1")), "ThrottlingException")

	s.FailNext(1, eventbridgetest.Internal)
	awstest.RequireRetry(t, publish(t, p, message("evt-1")), "InternalException")

	requireDelivered(t, publish(t, p, message("evt-1")))
	require.Len(t, s.Events(t), 1)
}

func TestSessionToken(t *testing.T) {
	t.Parallel()
	awstest.SessionToken(t, eventbridge.New(), eventbridgetest.Start(t), "UnrecognizedClientException")
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	p := open(t, s.Config(), plainEnv)
	require.False(t, eventbridge.New().Ordered(s.Config()))
	awstest.PublishConcurrently(t, p)
	got := s.Events(t)
	require.Len(t, got, 200)
	ids := map[any]bool{}
	for _, e := range got {
		ids[detail(t, e)["id"]] = true
	}
	require.Len(t, ids, 200)
}

func TestDialThroughEnv(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	awstest.DialThroughEnv(t, eventbridge.New(), s.Config())
	require.Len(t, s.Events(t), 2)
}

func TestClose(t *testing.T) {
	t.Parallel()
	s := eventbridgetest.Start(t)
	awstest.CloseTwice(t, eventbridge.New(), s.Config())
	require.Len(t, s.Events(t), 1)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	k := eventbridge.New()
	good := kind.Config{"region": "eu-west-1", "access_key_id": "AKIAEXAMPLE", "secret_access_key": "secret"}
	with := func(kv ...string) kind.Config { return awstest.With(good, kv...) }
	arn := "arn:aws:events:eu-west-1:123456789012:event-bus/orders"
	for _, tc := range []struct {
		name  string
		c     kind.Config
		field string // "" for a good configuration
	}{
		{"good", good, ""},
		{"named bus", with("event_bus", "orders"), ""},
		{"partner bus", with("event_bus", "aws.partner/example.com/123/orders"), ""},
		{"arn", with("event_bus", arn, "region", ""), ""},
		{"arn and region", with("event_bus", arn), ""},
		{"gov arn", with("event_bus", "arn:aws-us-gov:events:us-gov-west-1:123456789012:event-bus/x", "region", ""), ""},
		{"source and detail type", with("source", "com.example.orders", "detail_type", "Order Created"), ""},
		{"endpoint", with("endpoint", "http://localhost:4566"), ""},
		{"no region", with("region", ""), "region"},
		{"bad region", with("region", "Ireland"), "region"},
		{"arn elsewhere", with("event_bus", arn, "region", "us-east-1"), "region"},
		{"bad bus", with("event_bus", "my bus"), "event_bus"},
		{"bad arn", with("event_bus", "arn:aws:sqs:eu-west-1:123456789012:orders"), "event_bus"},
		{"long bus", with("event_bus", strings.Repeat("b", 257)), "event_bus"},
		{"aws source", with("source", "aws.ec2"), "source"},
		{"long source", with("source", strings.Repeat("s", 257)), "source"},
		{"long detail type", with("detail_type", strings.Repeat("d", 129)), "detail_type"},
		{"bad endpoint", with("endpoint", "localhost:4566"), "endpoint"},
		{"no access key", with("access_key_id", ""), "access_key_id"},
		{"no secret", with("secret_access_key", ""), "secret_access_key"},
		{"spaced token", with("session_token", "a b"), "session_token"},
		{"unknown field", with("bus", "x"), "bus"},
	} {
		awstest.CheckConfig(t, k, tc.name, tc.c, tc.field)
	}
	awstest.RequireSensitiveCredentials(t, k)
	require.Equal(t, "default", kind.Get(k, good, "event_bus"))
	require.Equal(t, "relay", kind.Get(k, good, "source"))
	require.Equal(t, "eventbridge", k.Name())
	require.Equal(t, "Amazon EventBridge", k.Title())
}
