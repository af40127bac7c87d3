package eventbridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awseb "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"

	"github.com/relaydev/relay/kind"
)

// Envelope is the detail of the entry relay puts for an event: a JSON
// object with the event's metadata and its body.
type Envelope struct {
	// ID is the event id (webhook-id): the receiver's idempotency key.
	ID string `json:"id"`
	// Type is the event's type, left out when it has none.
	Type string `json:"type,omitempty"`
	// Tenant is the destination's tenant, left out for none.
	Tenant string `json:"tenant,omitempty"`
	// Destination is the destination's name.
	Destination string `json:"destination"`
	// Timestamp and Signature are webhook-timestamp (Unix seconds) and
	// webhook-signature; Signature is left out when the destination signs
	// nothing.
	Timestamp int64  `json:"timestamp"`
	Signature string `json:"signature,omitempty"`
	// ContentType is the body's media type.
	ContentType string `json:"content_type,omitempty"`
	// Data is the body: itself (compacted) when it is JSON, else a JSON
	// string of it when it is UTF-8 text. DataBase64 is the body in
	// standard base64 when it is neither (then Data is left out).
	Data       json.RawMessage `json:"data,omitempty"`
	DataBase64 string          `json:"data_base64,omitempty"`
}

// EntryError is EventBridge's refusal of the entry in a PutEvents answer
// (FailedEntryCount 1): its ErrorCode and ErrorMessage.
type EntryError struct {
	Code    string
	Message string
}

// Error says that EventBridge refused the event, with its code and message.
func (e *EntryError) Error() string {
	return "EventBridge refused the event: " + e.Code + ": " + e.Message
}

// retryEntryCodes are the entry error codes that may pass; EventBridge
// documents every other one as not retryable.
var retryEntryCodes = map[string]bool{
	"ThrottlingException": true, "InternalFailure": true, "InternalException": true,
}

// Open returns a publisher for c. It connects to nothing: the first
// Publish does.
func (k ebKind) Open(c kind.Config, env kind.Env) (kind.Publisher, error) {
	bus := kind.Get(k, c, FieldEventBus)
	region := c[FieldRegion]
	if region == "" {
		region = busRegion(bus)
	}
	p := &publisher{bus: bus, source: kind.Get(k, c, FieldSource), detailType: c[FieldDetailType]}
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
	if e := c[FieldEndpoint]; e != "" {
		cfg.BaseEndpoint = aws.String(e)
	}
	p.client = awseb.NewFromConfig(cfg)
	return p, nil
}

// newRetryer makes the SDK resend a request at once, and once only, when
// it failed on a kept-alive connection the server had closed (reuseClient)
// or for a clock skew the SDK corrected from EventBridge's answer. Nothing
// else is retried within an attempt: relay retries by the destination's
// policy, and it must see every other failure.
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

// publisher puts each event with one PutEvents call of one entry.
type publisher struct {
	client     *awseb.Client
	bus        string
	source     string
	detailType string // "" for the event's type
	own        *http.Transport

	// ctx ends at Close, cancelling the calls under way.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// Publish puts m and returns once EventBridge answered with an event id.
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	if p.ctx.Err() != nil {
		return kind.Retry("", kind.ErrClosed)
	}
	detailType := p.detailType
	if detailType == "" {
		detailType = m.Type
		if detailType == "" {
			detailType = UntypedDetailType
		}
		if utf8.RuneCountInString(detailType) > maxDetailType {
			return kind.Permanent("InvalidArgument", fmt.Errorf(
				"the event type is longer than EventBridge's %d characters of detail-type: set the destination's detail_type", maxDetailType))
		}
	}
	detail, err := envelope(m)
	if err != nil {
		return kind.Permanent("MalformedDetail", err)
	}
	entry := types.PutEventsRequestEntry{
		EventBusName: aws.String(p.bus),
		Source:       aws.String(p.source),
		DetailType:   aws.String(detailType),
		Detail:       aws.String(detail),
		Time:         aws.Time(time.Unix(m.Timestamp, 0)),
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	out, err := p.client.PutEvents(ctx, &awseb.PutEventsInput{Entries: []types.PutEventsRequestEntry{entry}})
	if err != nil {
		if p.ctx.Err() != nil {
			return kind.Retry("", kind.ErrClosed)
		}
		return classify(err)
	}
	if len(out.Entries) != 1 {
		return kind.Retry("", fmt.Errorf("EventBridge answered %d entries for 1 (%d failed)", len(out.Entries), out.FailedEntryCount))
	}
	e := out.Entries[0]
	if code := aws.ToString(e.ErrorCode); code != "" || out.FailedEntryCount > 0 {
		err := &EntryError{Code: code, Message: aws.ToString(e.ErrorMessage)}
		if retryEntryCodes[code] || code == "" {
			return kind.Retry(code, err)
		}
		return kind.Permanent(code, err)
	}
	return kind.Delivered("event id " + aws.ToString(e.EventId))
}

// envelope is m's entry detail, an Envelope in JSON.
func envelope(m kind.Message) (string, error) {
	env := Envelope{ID: m.ID, Type: m.Type, Tenant: m.Tenant, Destination: m.Dest,
		Timestamp: m.Timestamp, Signature: m.Signature, ContentType: m.ContentType}
	switch {
	case json.Valid(m.Body):
		env.Data = m.Body
	case utf8.Valid(m.Body):
		s, err := json.Marshal(string(m.Body))
		if err != nil {
			return "", err
		}
		env.Data = s
	default:
		env.DataBase64 = base64.StdEncoding.EncodeToString(m.Body)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		return "", fmt.Errorf("the event cannot be put in an EventBridge detail: %w", err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
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

// retryCodes are the error codes of failed calls that may pass: throttling,
// EventBridge unavailable, a request that timed out or expired on the way.
var retryCodes = map[string]bool{
	"ThrottlingException": true, "Throttling": true, "LimitExceededException": true,
	"InternalException": true, "InternalFailure": true, "ServiceUnavailable": true,
	"ServiceUnavailableException": true,
	"RequestTimeout":              true, "RequestTimeoutException": true,
	"RequestExpired": true, "RequestTimeTooSkewed": true,
}

// permanentCodes are the error codes of failed calls the same event and
// configuration cannot get past: the credentials or the permissions are
// refused (an operator must update the destination or its IAM policy,
// after which relay's redelivery from the dead letters applies), the bus
// is missing, or the request is invalid.
var permanentCodes = map[string]bool{
	"AccessDeniedException": true, "AccessDenied": true,
	"UnrecognizedClientException": true, "InvalidClientTokenId": true,
	"InvalidSignatureException": true, "SignatureDoesNotMatch": true,
	"IncompleteSignature": true, "MissingAuthenticationTokenException": true,
	"MissingAuthenticationToken": true, "ExpiredTokenException": true, "ExpiredToken": true,
	"NotAuthorized": true, "OptInRequired": true,
	"ResourceNotFoundException": true, "ValidationException": true,
	"InvalidParameterValue": true, "InvalidParameterCombination": true, "MissingParameter": true,
	"SerializationException": true, "OperationDisabledException": true,
}

// classify turns a failed PutEvents call into an answer. An error with no
// answer from EventBridge (refused, unreachable, blocked by the address
// guard, timed out) may pass: Retry. An answer is classed by its error
// code, then by its HTTP status as relay classes HTTP destinations'
// answers (408, 425, 429 and 5xx retry; other 4xx are permanent).
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
