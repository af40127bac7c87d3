package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/relaydev/relay/kind"
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
	p := &publisher{queueURL: queueURL, fifo: isFIFO(queueURL)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	hc := env.HTTPClient
	if hc == nil {
		// No client from relay: one of our own, dialling through env.Dial,
		// whose connections Close releases.
		dial := env.Dial
		if dial == nil {
			dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		p.own = &http.Transport{DialContext: dial, ForceAttemptHTTP2: true,
			TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
		hc = &http.Client{Transport: p.own, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	cfg := aws.Config{
		Region: region,
		Credentials: credentials.NewStaticCredentialsProvider(
			c[FieldAccessKeyID], c[FieldSecretAccessKey], c[FieldSessionToken]),
		HTTPClient: reuseClient{hc},
		Retryer:    newRetryer,
	}
	if endpoint != "" {
		cfg.BaseEndpoint = aws.String(endpoint)
	}
	p.client = awssqs.NewFromConfig(cfg)
	return p, nil
}

// newRetryer makes the SDK resend a request at once, and once only, when
// it failed on a kept-alive connection the server had closed (reuseClient)
// or for a clock skew the SDK corrected from SQS's answer. Nothing else is
// retried within an attempt: relay retries by the destination's policy,
// and it must see every other failure.
func newRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 2
		o.Retryables = []retry.IsErrorRetryable{retry.NoRetryCanceledError{}, retry.RetryableError{}}
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		o.RateLimiter = ratelimit.None
	})
}

// reuseClient sends the SDK's requests with relay's client, marking a
// failure on a reused (kept-alive) connection as retryable: the server
// may have closed it just as it was taken, and the request did not get
// through. A failure on a new connection is left as it is.
type reuseClient struct{ hc *http.Client }

// Do sends req.
func (c reuseClient) Do(req *http.Request) (*http.Response, error) {
	var reused atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused.Store(i.Reused) }}
	resp, err := c.hc.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err != nil && reused.Load() && req.Context().Err() == nil {
		return nil, &staleConnError{err}
	}
	return resp, err
}

// staleConnError is a request's failure on a reused connection.
type staleConnError struct{ err error }

// Error is the failure's own text.
func (e *staleConnError) Error() string        { return e.err.Error() }
func (e *staleConnError) Unwrap() error        { return e.err }
func (e *staleConnError) RetryableError() bool { return true }

// publisher sends each message with one SendMessage call.
type publisher struct {
	client   *awssqs.Client
	queueURL string
	fifo     bool
	own      *http.Transport // nil when relay's client is used

	// ctx ends at Close, cancelling the calls under way.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// Publish sends m and returns once SQS answered with a message id.
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	if p.ctx.Err() != nil {
		return kind.Retry("", kind.ErrClosed)
	}
	in, ans, ok := p.input(m)
	if !ok {
		return ans
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	out, err := p.client.SendMessage(ctx, in)
	if err != nil {
		if p.ctx.Err() != nil {
			return kind.Retry("", kind.ErrClosed)
		}
		return classify(err)
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

// Close cancels the calls under way and closes the publisher's own
// connections (relay's shared client is left alone). It is idempotent.
func (p *publisher) Close() error {
	p.once.Do(func() {
		p.cancel()
		if p.own != nil {
			p.own.CloseIdleConnections()
		}
	})
	return nil
}

// retryCodes are the error codes of failures that may pass: throttling,
// SQS or KMS unavailable, a request that timed out or expired on the way.
var retryCodes = map[string]bool{
	"RequestThrottled": true, "ThrottlingException": true, "Throttling": true,
	"KmsThrottled": true, "KMS.ThrottlingException": true,
	"ServiceUnavailable": true, "InternalError": true, "InternalFailure": true,
	"RequestTimeout": true, "RequestTimeoutException": true,
	"RequestExpired": true, "RequestTimeTooSkewed": true,
}

// permanentCodes are the error codes of failures the same message and
// configuration cannot get past: the queue is missing, the credentials or
// the permissions are refused (an operator must update the destination or
// its IAM policy, after which relay's redelivery from the dead letters
// applies), the message or a parameter is invalid, the queue's KMS key is
// unusable. Query-compatible codes (AWS.SimpleQueueService.*, KMS.*) and
// the JSON protocol's shape names are both listed.
var permanentCodes = map[string]bool{
	"QueueDoesNotExist": true, "AWS.SimpleQueueService.NonExistentQueue": true,
	"AccessDenied": true, "AccessDeniedException": true,
	"InvalidClientTokenId": true, "UnrecognizedClientException": true,
	"SignatureDoesNotMatch": true, "InvalidSignatureException": true,
	"IncompleteSignature": true, "MissingAuthenticationToken": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "OptInRequired": true,
	"InvalidSecurity":        true,
	"InvalidMessageContents": true, "InvalidParameterValue": true,
	"InvalidParameterCombination": true, "MissingParameter": true,
	"ValidationException": true, "InvalidAddress": true,
	"UnsupportedOperation": true, "AWS.SimpleQueueService.UnsupportedOperation": true,
	"KmsDisabled": true, "KMS.DisabledException": true,
	"KmsNotFound": true, "KMS.NotFoundException": true,
	"KmsAccessDenied": true, "KMS.AccessDeniedException": true,
	"KmsInvalidState": true, "KMS.InvalidStateException": true,
	"KmsInvalidKeyUsage": true, "KMS.InvalidKeyUsageException": true,
	"KmsOptInRequired": true, "KMS.OptInRequired": true,
}

// classify turns a failed SendMessage into an answer. An error with no
// answer from SQS (refused, unreachable, blocked by the address guard,
// timed out) may pass: Retry. An answer is classed by its error code, then
// by its HTTP status as relay classes HTTP destinations' answers (408,
// 425, 429 and 5xx retry; other 4xx are permanent).
func classify(err error) kind.Answer {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return kind.Retry("", err)
	}
	code := apiErr.ErrorCode()
	// The SDK marks a signature refused for a skewed clock as retryable
	// (it corrects its clock from the answer's Date for the next call).
	var retryable interface{ RetryableError() bool }
	if errors.As(err, &retryable) && retryable.RetryableError() {
		return withRetryAfter(kind.Retry(code, err), err)
	}
	if retryCodes[code] {
		return withRetryAfter(kind.Retry(code, err), err)
	}
	if permanentCodes[code] {
		return kind.Permanent(code, err)
	}
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		switch s := respErr.HTTPStatusCode(); {
		case s == http.StatusRequestTimeout, s == http.StatusTooEarly, s == http.StatusTooManyRequests, s >= 500:
			return withRetryAfter(kind.Retry(code, err), err)
		case s >= 400:
			return kind.Permanent(code, err)
		}
	}
	return kind.Retry(code, err)
}

// withRetryAfter sets a's RetryAfter from the answer's Retry-After header
// (seconds), when it has one.
func withRetryAfter(a kind.Answer, err error) kind.Answer {
	var respErr *awshttp.ResponseError
	if !errors.As(err, &respErr) || respErr.Response == nil {
		return a
	}
	if s, perr := strconv.Atoi(respErr.Response.Header.Get("Retry-After")); perr == nil && s > 0 {
		a.RetryAfter = time.Duration(s) * time.Second
	}
	return a
}
