package awsapi

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/relaydev/relay/kind"
)

// Publisher is the part of an AWS kind's publisher that does not depend
// on the service: the HTTP transport it owns, when relay gives it no
// client, the codes its failed calls are classed by, and the context that
// Close ends, cancelling the calls under way. A kind's publisher embeds
// it, and makes its service client from the aws.Config Open returns.
type Publisher struct {
	own   *http.Transport // nil when relay's client is used
	codes Codes

	// ctx ends at Close, cancelling the calls under way.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// Open returns a Publisher for c, whose failed calls codes classes, and
// the configuration to make the service's client from: region, the static
// credentials of c (access_key_id, secret_access_key, session_token) and
// c's endpoint when it has one. Requests go through env.HTTPClient, or
// when it is nil through a client of the Publisher's own dialling
// env.Dial; the SDK resends only the requests that did not get through
// (newRetryer). It connects to nothing.
func Open(c kind.Config, region string, env kind.Env, codes Codes) (*Publisher, aws.Config) {
	p := &Publisher{codes: codes}
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
	return p, cfg
}

// Closed reports whether Close was called: a Publish then answers
// kind.Retry with kind.ErrClosed.
func (p *Publisher) Closed() bool { return p.ctx.Err() != nil }

// Call makes the call op(ctx, in) of p's service client, cancelled when
// ctx ends or p is closed. It returns op's output and true when the call
// succeeded; otherwise the answer for its failure: kind.Retry with
// kind.ErrClosed when p was closed, else the error classed by p's codes.
func Call[In, Out, Opt any](ctx context.Context, p *Publisher,
	op func(context.Context, In, ...func(*Opt)) (Out, error), in In) (Out, kind.Answer, bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	out, err := op(ctx, in)
	if err != nil {
		if p.Closed() {
			return out, kind.Retry("", kind.ErrClosed), false
		}
		return out, p.codes.Classify(err), false
	}
	return out, kind.Answer{}, true
}

// Close cancels the calls under way and closes the publisher's own
// connections (relay's shared client is left alone). It is idempotent.
func (p *Publisher) Close() error {
	p.once.Do(func() {
		p.cancel()
		if p.own != nil {
			p.own.CloseIdleConnections()
		}
	})
	return nil
}

// newRetryer makes the SDK resend a request at once, and once only, when
// it failed on a kept-alive connection the server had closed (reuseClient)
// or for a clock skew the SDK corrected from the service's answer. Nothing
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
