package sqstest

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// client is an SDK client of s signing with secret, without retries.
func client(t *testing.T, s *Server, secret string) *awssqs.Client {
	return awssqs.NewFromConfig(s.svc.ClientConfig(t, s.Endpoint(), secret))
}

// TestSDKParsesAnswers checks that the SDK reads the server's answers as it
// reads SQS's: a message id and checksums it verifies, and each error as
// its modeled type with SQS's query-compatible code.
func TestSDKParsesAnswers(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := client(t, s, SecretAccessKey)
	ctx := context.Background()

	out, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(Queue)),
		MessageBody: aws.String("héllo"), MessageAttributes: map[string]types.MessageAttributeValue{
			"a": {DataType: aws.String("String"), StringValue: aws.String("1")}}})
	require.NoError(t, err)
	require.NotEmpty(t, aws.ToString(out.MessageId))
	require.Equal(t, attributesMD5(map[string]string{"a": "1"}), aws.ToString(out.MD5OfMessageAttributes))

	code := func(err error) string {
		t.Helper()
		var apiErr smithy.APIError
		require.ErrorAs(t, err, &apiErr)
		return apiErr.ErrorCode()
	}

	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL("nope")), MessageBody: aws.String("x")})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing)
	require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", code(err))

	s.FailNext(1, Throttled)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(Queue)), MessageBody: aws.String("x")})
	var throttled *types.RequestThrottled
	require.ErrorAs(t, err, &throttled)
	require.Equal(t, "RequestThrottled", code(err))

	s.FailNext(1, KMSDisabled)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(Queue)), MessageBody: aws.String("x")})
	var kms *types.KmsDisabled
	require.ErrorAs(t, err, &kms)
	require.Equal(t, "KMS.DisabledException", code(err))

	s.FailNext(1, Unavailable)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(Queue)), MessageBody: aws.String("x")})
	require.Equal(t, "ServiceUnavailable", code(err))

	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(FIFOQueue)), MessageBody: aws.String("x")})
	require.Equal(t, "MissingParameter", code(err))

	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(Queue)), MessageBody: aws.String("\x01")})
	var contents *types.InvalidMessageContents
	require.ErrorAs(t, err, &contents)

	_, err = client(t, s, "wrong").SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(Queue)), MessageBody: aws.String("x")})
	require.Equal(t, "SignatureDoesNotMatch", code(err))
	var generic *smithy.GenericAPIError
	require.True(t, errors.As(err, &generic))

	require.Len(t, s.Messages(t), 1)
}

// TestFIFODeduplicates checks that a FIFO queue accepts a message with a
// deduplication id it has seen once, answering the first one's id.
func TestFIFODeduplicates(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := client(t, s, SecretAccessKey)
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(s.QueueURL(FIFOQueue)), MessageBody: aws.String("x"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d")}
	first, err := c.SendMessage(context.Background(), in)
	require.NoError(t, err)
	s.Restart()
	again, err := client(t, s, SecretAccessKey).SendMessage(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, aws.ToString(first.MessageId), aws.ToString(again.MessageId))
	require.Equal(t, "00000000000000000001", aws.ToString(again.SequenceNumber))
	require.Len(t, s.WaitFor(t, 1), 1)
}
