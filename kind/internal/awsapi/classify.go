package awsapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/relaydev/relay/kind"
)

// Codes are a service's own error codes whose failures relay classes
// without looking at the HTTP status, besides those every AWS service
// answers (commonCodes).
type Codes struct {
	// Retry are the codes of failures that may pass: throttling, the
	// service unavailable, a request that timed out or expired on the way.
	Retry map[string]bool
	// Permanent are the codes of failures the same message and
	// configuration cannot get past: credentials or permissions refused,
	// a missing resource, an invalid request.
	Permanent map[string]bool
}

// commonCodes are the error codes every AWS service may answer, in the
// query protocol's spelling and the JSON protocol's shape names. Retry:
// throttling, the service unavailable or failing, a request that timed
// out or expired on the way (or signed with a skewed clock). Permanent:
// the credentials or the permissions refused (an operator must update the
// destination or its IAM policy, after which relay's redelivery from the
// dead letters applies), or a parameter invalid.
var commonCodes = Codes{Retry: map[string]bool{
	"ThrottlingException": true, "Throttling": true,
	"ServiceUnavailable": true, "InternalFailure": true,
	"RequestTimeout": true, "RequestTimeoutException": true,
	"RequestExpired": true, "RequestTimeTooSkewed": true,
}, Permanent: map[string]bool{
	"AccessDenied": true, "AccessDeniedException": true,
	"InvalidClientTokenId": true, "UnrecognizedClientException": true,
	"SignatureDoesNotMatch": true, "InvalidSignatureException": true,
	"IncompleteSignature": true, "MissingAuthenticationToken": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "OptInRequired": true,
	"InvalidParameterValue": true, "InvalidParameterCombination": true,
	"MissingParameter": true, "ValidationException": true,
}}

// Classify turns a failed call into an answer. An error with no answer
// from the service (refused, unreachable, blocked by the address guard,
// timed out) may pass: Retry. An answer is classed by its error code (one
// the SDK marks retryable, then a retry code of c or of every service,
// then a permanent one), then by its
// HTTP status as relay classes HTTP destinations' answers (408, 425, 429
// and 5xx retry; other 4xx are permanent). A retry takes the answer's
// Retry-After.
func (c Codes) Classify(err error) kind.Answer {
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
	if c.Retry[code] || commonCodes.Retry[code] {
		return withRetryAfter(kind.Retry(code, err), err)
	}
	if c.Permanent[code] || commonCodes.Permanent[code] {
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
