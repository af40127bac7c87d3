package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/internal/awsapi"
)

// MaxMessageSize is the most SQS takes in one message, body and attributes
// together (1 MiB). A queue may take less (its MaximumMessageSize, 256 KiB
// by default for queues made before August 2025): SQS then refuses the
// message itself, with InvalidParameterValue.
const MaxMessageSize = 1 << 20

// maxIDLen bounds a MessageDeduplicationId and a MessageGroupId.
const maxIDLen = 128

// Open returns a publisher for c. It connects to nothing: the first
// Publish does.
func (k sqsKind) Open(c kind.Config, env kind.Env) (kind.Publisher, error) {
	queueURL := c[FieldQueueURL]
	endpoint := c[FieldEndpoint]
	u, err := parseQueueURL(queueURL, endpoint != "")
	if err != nil {
		return nil, err
	}
	region := c[FieldRegion]
	if region == "" {
		region = regionFromHost(u.Hostname())
	}
	conn, cfg := awsapi.Open(c, region, env, codes)
	return &publisher{Publisher: conn, client: awssqs.NewFromConfig(cfg), queueURL: queueURL, fifo: isFIFO(queueURL)}, nil
}

// publisher sends each message with one SendMessage call.
type publisher struct {
	*awsapi.Publisher // Close, and the calls' context
	client            *awssqs.Client
	queueURL          string
	fifo              bool
}

// Publish sends m and returns once SQS answered with a message id.
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	if p.Closed() {
		return kind.Retry("", kind.ErrClosed)
	}
	in, ans, ok := p.input(m)
	if !ok {
		return ans
	}
	out, ans, ok := awsapi.Call(ctx, p.Publisher, p.client.SendMessage, in)
	if !ok {
		return ans
	}
	detail := "message id " + aws.ToString(out.MessageId)
	if out.SequenceNumber != nil {
		detail += ", sequence number " + *out.SequenceNumber
	}
	return kind.Delivered(detail)
}

// input builds m's SendMessage, or the answer for a message SQS cannot
// take.
func (p *publisher) input(m kind.Message) (*awssqs.SendMessageInput, kind.Answer, bool) {
	if len(m.Body) == 0 {
		return nil, kind.Permanent("InvalidMessageContents", errors.New("SQS takes no empty message: the body is empty")), false
	}
	if i := invalidChar(m.Body); i >= 0 {
		return nil, kind.Permanent("InvalidMessageContents", fmt.Errorf(
			"SQS takes only XML characters in a message (UTF-8, no control characters but tab, CR and LF): the body has another at byte %d", i)), false
	}
	attrs := make(map[string]types.MessageAttributeValue, 7)
	size := len(m.Body)
	add := func(name, value string) {
		if value == "" {
			return // SQS refuses empty attribute values
		}
		attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
		size += len(name) + len("String") + len(value)
	}
	add(AttrID, m.ID)
	add(AttrTimestamp, strconv.FormatInt(m.Timestamp, 10))
	add(AttrSignature, m.Signature)
	add(AttrEventType, m.Type)
	add(AttrTenant, m.Tenant)
	add(AttrDestination, m.Dest)
	add(AttrContentType, m.ContentType)
	if size > MaxMessageSize {
		return nil, kind.Permanent("MessageTooLong", fmt.Errorf(
			"the message is %d bytes with its attributes; SQS takes at most %d", size, MaxMessageSize)), false
	}
	in := &awssqs.SendMessageInput{
		QueueUrl:          aws.String(p.queueURL),
		MessageBody:       aws.String(string(m.Body)),
		MessageAttributes: attrs,
	}
	if p.fifo {
		// The group keeps a key's events in order; an event without a key
		// is ordered with no other, so it is a group of its own.
		group := m.Key
		if group == "" {
			group = m.ID
		}
		in.MessageGroupId = aws.String(fifoID(group))
		// Retries of one event share its id: within SQS's 5 minute window
		// a retry of a message SQS already has is not stored twice.
		in.MessageDeduplicationId = aws.String(fifoID(m.ID))
	}
	return in, kind.Answer{}, true
}

// fifoID is s as a MessageGroupId or MessageDeduplicationId: s itself when
// it is 1 to 128 characters of printable ASCII but space, which SQS takes;
// otherwise the hex SHA-256 of s.
func fifoID(s string) string {
	if s != "" && len(s) <= maxIDLen && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// invalidChar returns the byte offset of the first character SQS refuses
// in a message body (it takes #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD and
// #x10000-#x10FFFF, in UTF-8), or -1 when there is none.
func invalidChar(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return i
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return i
		}
		i += n
	}
	return -1
}

// codes class SQS's own error codes, besides those every AWS service
// answers, which awsapi.Codes.Classify knows. Retry are the failures that may pass: SQS or KMS
// throttling, SQS failing.
//
// Permanent are the failures the same message and configuration cannot
// get past: the queue is missing, the message is invalid or the queue
// refuses the operation, the queue's KMS key is unusable.
// Query-compatible codes (AWS.SimpleQueueService.*, KMS.*) and the JSON
// protocol's shape names are both listed.
var codes = awsapi.Codes{Retry: map[string]bool{
	"RequestThrottled": true, "KmsThrottled": true, "KMS.ThrottlingException": true,
	"InternalError": true,
}, Permanent: map[string]bool{
	"QueueDoesNotExist": true, "AWS.SimpleQueueService.NonExistentQueue": true,
	"InvalidSecurity": true, "InvalidMessageContents": true, "InvalidAddress": true,
	"UnsupportedOperation": true, "AWS.SimpleQueueService.UnsupportedOperation": true,
	"KmsDisabled": true, "KMS.DisabledException": true,
	"KmsNotFound": true, "KMS.NotFoundException": true,
	"KmsAccessDenied": true, "KMS.AccessDeniedException": true,
	"KmsInvalidState": true, "KMS.InvalidStateException": true,
	"KmsInvalidKeyUsage": true, "KMS.InvalidKeyUsageException": true,
	"KmsOptInRequired": true, "KMS.OptInRequired": true,
}}
