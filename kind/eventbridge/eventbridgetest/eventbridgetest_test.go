package eventbridgetest

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseb "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// client is an SDK client of s signing with secret, without retries.
func client(t *testing.T, s *Server, secret string) *awseb.Client {
	return awseb.NewFromConfig(s.svc.ClientConfig(t, s.Endpoint(), secret))
}

func entry(bus string) types.PutEventsRequestEntry {
	return types.PutEventsRequestEntry{EventBusName: aws.String(bus), Source: aws.String("test"),
		DetailType: aws.String("t"), Detail: aws.String(`{"a":1}`), Time: aws.Time(time.Unix(1700000000, 0))}
}

// TestSDKParsesAnswers checks that the SDK reads the server's answers as it
// reads EventBridge's: entries with ids or errors, and call errors as
// their modeled types and codes.
func TestSDKParsesAnswers(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := client(t, s, SecretAccessKey)
	ctx := context.Background()
	put := func(c *awseb.Client, entries ...types.PutEventsRequestEntry) (*awseb.PutEventsOutput, error) {
		return c.PutEvents(ctx, &awseb.PutEventsInput{Entries: entries})
	}

	out, err := put(c, entry(Bus), entry(s.BusARN("default")), entry("missing"))
	require.NoError(t, err)
	require.EqualValues(t, 1, out.FailedEntryCount)
	require.Len(t, out.Entries, 3)
	require.NotEmpty(t, aws.ToString(out.Entries[0].EventId))
	require.NotEmpty(t, aws.ToString(out.Entries[1].EventId))
	require.Equal(t, "ResourceNotFoundException", aws.ToString(out.Entries[2].ErrorCode))
	got := s.Events(t)
	require.Len(t, got, 2)
	require.Equal(t, Event{ID: aws.ToString(out.Entries[0].EventId), Bus: Bus, Source: "test", DetailType: "t",
		Detail: `{"a":1}`, Time: time.Unix(1700000000, 0).UTC()}, got[0])
	require.Equal(t, "default", got[1].Bus)

	s.FailEntriesNext(1, EntryThrottled)
	out, err = put(c, entry(Bus))
	require.NoError(t, err)
	require.EqualValues(t, 1, out.FailedEntryCount)
	require.Equal(t, "ThrottlingException", aws.ToString(out.Entries[0].ErrorCode))
	require.Equal(t, "Rate exceeded", aws.ToString(out.Entries[0].ErrorMessage))

	bad := entry(Bus)
	bad.Detail = aws.String(`[1]`)
	out, err = put(c, bad)
	require.NoError(t, err)
	require.Equal(t, "MalformedDetail", aws.ToString(out.Entries[0].ErrorCode))

	code := func(err error) string {
		t.Helper()
		var apiErr smithy.APIError
		require.ErrorAs(t, err, &apiErr)
		return apiErr.ErrorCode()
	}
	s.FailNext(1, Throttled)
	_, err = put(c, entry(Bus))
	var throttled *types.ThrottlingException
	require.ErrorAs(t, err, &throttled)

	s.FailNext(1, Internal)
	_, err = put(c, entry(Bus))
	var internal *types.InternalException
	require.ErrorAs(t, err, &internal)

	s.FailNext(1, AccessDenied)
	_, err = put(c, entry(Bus))
	var denied *types.AccessDeniedException
	require.ErrorAs(t, err, &denied)

	_, err = put(client(t, s, "wrong"), entry(Bus))
	require.Equal(t, "InvalidSignatureException", code(err))

	eleven := make([]types.PutEventsRequestEntry, 11)
	for i := range eleven {
		eleven[i] = entry(Bus)
	}
	_, err = put(c, eleven...)
	require.Equal(t, "ValidationException", code(err))

	require.Len(t, s.Events(t), 2)
	s.Restart()
	require.Len(t, s.WaitFor(t, 2), 2)
}
