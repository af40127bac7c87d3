package awsapi

import (
	"errors"
	"net/http"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"
)

// answered is the SDK's error for an answer of status and code.
func answered(status int, code, retryAfter string) error {
	resp := &http.Response{StatusCode: status, Header: http.Header{}}
	if retryAfter != "" {
		resp.Header.Set("Retry-After", retryAfter)
	}
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: resp}, Err: &smithy.GenericAPIError{Code: code}}}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	codes := Codes{Retry: map[string]bool{"Busy": true}, Permanent: map[string]bool{"Gone": true}}
	for _, tc := range []struct {
		name      string
		err       error
		code      string
		permanent bool
		after     time.Duration
	}{
		{"no answer", errors.New("connection refused"), "", false, 0},
		{"own retry code", answered(400, "Busy", "3"), "Busy", false, 3 * time.Second},
		{"own permanent code", answered(500, "Gone", ""), "Gone", true, 0},
		{"common retry code", answered(400, "ThrottlingException", ""), "ThrottlingException", false, 0},
		{"common permanent code", answered(403, "AccessDeniedException", ""), "AccessDeniedException", true, 0},
		{"unknown 429", answered(429, "Slow", "7"), "Slow", false, 7 * time.Second},
		{"unknown 5xx", answered(502, "Odd", ""), "Odd", false, 0},
		{"unknown 4xx", answered(404, "Odd", ""), "Odd", true, 0},
		{"stale connection", &staleConnError{answered(400, "Odd", "")}, "Odd", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := codes.Classify(tc.err)
			require.ErrorIs(t, a.Err, tc.err)
			require.Equal(t, tc.code, a.Code)
			require.Equal(t, tc.permanent, a.Permanent)
			require.Equal(t, tc.after, a.RetryAfter)
		})
	}
}
