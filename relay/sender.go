package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/internal/version"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/webhook"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/stream"
)

var userAgent = []string{"relay/" + version.Version}

// maxResponseBody is how much of a response body relay reads; the rest is
// discarded with the connection.
const maxResponseBody = 64 << 10

// snippetLen is how much of a failed response's body is kept in the history.
const snippetLen = 256

// eventTypeHeader carries a typed event's type to its destination
// (canonical form).
var eventTypeHeader = stream.TypeHTTPHeader

// Delivery is one attempt's request.
type Delivery struct {
	ID      string      // webhook-id: the event id
	Type    string      // Relay-Event-Type: the event's type, if it has one
	Body    []byte      // the body sent (and signed): the event's, or its template's rendering
	Headers http.Header // the event's own headers to pass on
	// Trace, when valid, is the attempt's span context: sent as
	// traceparent and tracestate, in place of the event's own.
	Trace trace.SpanContext
	// ContentType is the body's Content-Type; "": the event's own, else
	// application/json.
	ContentType string
	// Key is the event's order key and Attempt the attempt's number: a
	// non-HTTP kind may use them (a Kafka record key).
	Key     string
	Attempt int
}

// Validate reports why ev cannot become a valid request, as an
// *InvalidEventError: its id (sent as webhook-id) or one of the headers
// that are passed on (those relay sets itself are not). It is the one place
// where what comes from the message is checked before it reaches a request;
// Send calls it before building one.
func (ev Delivery) Validate() error {
	if err := publish.ValidateEventID(ev.ID); err != nil {
		return &InvalidEventError{Header: "webhook-id", Err: fmt.Errorf("header %q: %w", "webhook-id", err)}
	}
	for k, vs := range ev.Headers {
		if strings.EqualFold(k, "Content-Type") {
			if err := destination.ValidHeaderName(k); err != nil {
				return &InvalidEventError{Header: k, Err: err}
			}
		} else if destination.RelaySets(k) {
			continue // not passed on: relay's own value is sent
		} else if err := destination.ValidHeaderName(k); err != nil {
			return &InvalidEventError{Header: k, Err: err}
		}
		for _, v := range vs {
			if err := destination.ValidHeaderValue(k, v); err != nil {
				return &InvalidEventError{Header: k, Err: err}
			}
		}
	}
	return nil
}

// InvalidEventError says why an event cannot become a valid HTTP request.
// No attempt of such an event can succeed, and it says nothing about the
// destination: relay dead-letters it with ReasonInvalidEvent at once.
type InvalidEventError struct {
	// Header is the header at fault, as the event spells it ("webhook-id"
	// for the event id).
	Header string
	Err    error
}

func (e *InvalidEventError) Error() string {
	return "invalid event: " + e.Err.Error() // which names the header
}

func (e *InvalidEventError) Unwrap() error { return e.Err }

// Sender makes delivery attempts over HTTP.
type Sender struct {
	// Client's Transport sends the requests (if nil, that of
	// NewHTTPClient(HTTPOptions{}), which refuses non-public addresses). Its redirect policy, cookie jar and timeout are not used:
	// relay never follows redirects, keeps no cookies, and bounds each
	// attempt by the destination's timeout.
	Client *http.Client
	Now    func() time.Time
	// KeepBody is how much of each response body Result.Body keeps (for
	// the delivery log), 0 none; KeepHeaders keeps the response headers
	// LoggedResponseHeaders names in Result.Headers.
	KeepBody    int
	KeepHeaders bool
}

func (s *Sender) transport() http.RoundTripper {
	if s.Client != nil && s.Client.Transport != nil {
		return s.Client.Transport
	}
	return defaultTransport()
}

var defaultTransport = sync.OnceValue(func() http.RoundTripper { return egress.NewClient(egress.Options{}).Transport })

// Send makes one attempt to deliver ev to d and reports what came back. It
// never returns early without a Result: errors are in Result.Err. An event
// that cannot become a valid request (Delivery.Validate) is not sent: its
// Result.Err is an *InvalidEventError.
func (s *Sender) Send(ctx context.Context, d destination.Destination, ev Delivery) Result {
	if err := ev.Validate(); err != nil {
		return Result{Err: err}
	}
	now := s.Now()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(d.Timeout))
	defer cancel()
	ctx = egress.ForDestination(ctx, d.Name) // for --no-proxy dest:... and tenant:...
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(ev.Body))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = destination.RedactURL(ue.URL) // the error is logged and kept in the history
		}
		return Result{Err: fmt.Errorf("build request: %w", err)}
	}
	traced := ev.Trace.IsValid()
	for k, vs := range ev.Headers {
		if destination.RelaySets(k) || traced && stream.IsTraceHeader(k) {
			continue // never let an event override what relay sets
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	if traced {
		stream.InjectTrace(trace.ContextWithSpanContext(ctx, ev.Trace), propagation.HeaderCarrier(req.Header))
	}
	// Canonical keys set directly: these run per attempt.
	req.Header["Content-Type"] = []string{contentType(ev)}
	req.Header["User-Agent"] = userAgent
	ts := now.Unix()
	req.Header["Webhook-Id"] = []string{ev.ID}
	if ev.Type != "" {
		req.Header[eventTypeHeader] = []string{ev.Type}
	}
	req.Header["Webhook-Timestamp"] = []string{strconv.FormatInt(ts, 10)}
	if sig, err := signature(d, ev, ts, now); err != nil {
		return Result{Err: err}
	} else if sig != "" {
		req.Header["Webhook-Signature"] = []string{sig}
	}
	// Straight to the transport: relay follows no redirects and keeps no
	// cookies, so http.Client would only add a copy of the headers per
	// request.
	resp, err := s.transport().RoundTrip(req)
	if err != nil {
		var be *egress.BlockedError
		var pe *egress.ProxyError
		// As http.Client reports it, but the URL redacted: the error is
		// logged and kept in the history and the dead letter.
		err = &url.Error{Op: "Post", URL: destination.RedactURL(d.URL), Err: egress.WithoutResolver(err)}
		return Result{Err: transportError(err, d), Blocked: errors.As(err, &be), ProxyFailed: errors.As(err, &pe), Duration: s.Now().Sub(now)}
	}
	var body, kept []byte
	var rerr error
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		// Read (to keep the connection) but keep no more of a 2xx's
		// body than the log asks for.
		if s.KeepBody > 0 && resp.ContentLength != 0 {
			kept, rerr = io.ReadAll(io.LimitReader(resp.Body, int64(s.KeepBody)))
		}
		if rerr == nil {
			_, rerr = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
		}
	} else {
		body, rerr = io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
		kept = body[:min(len(body), max(s.KeepBody, 0))]
	}
	resp.Body.Close()
	res := Result{Status: resp.StatusCode, Duration: s.Now().Sub(now)}
	if len(kept) > 0 {
		res.Body = kept
	}
	if s.KeepHeaders {
		for _, k := range deliverylog.LoggedResponseHeaders {
			if v := resp.Header[k]; len(v) > 0 {
				res.Headers = append(res.Headers, k, v[0])
			}
		}
	}
	if rerr != nil {
		// The response did not finish within the timeout (a slow drip) or
		// the connection broke: the destination did not answer in full,
		// so this is a failed attempt whatever the status said.
		return Result{Err: fmt.Errorf("status %d, but reading the response body failed: %w", resp.StatusCode, transportError(rerr, d)), Duration: res.Duration}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		res.Snippet = snippet(body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		res.RetryAfter, res.HasRetryAfter = ParseRetryAfter(ra, now)
	}
	return res
}

// transportError gives a transport error a short, useful text.
func transportError(err error, d destination.Destination) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("timeout after %s: %w", time.Duration(d.Timeout), err)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("timeout: %w", err)
	}
	return err
}

func snippet(b []byte) string {
	if len(b) > snippetLen {
		b = b[:snippetLen]
	}
	s := strings.ToValidUTF8(string(b), string(utf8.RuneError))
	return strings.TrimSpace(s)
}

// signature is the webhook-signature of ev's attempt to d at ts: "v1" with
// its secret, "v1a" with its signing key, or both, as d signs; during a
// rotation's overlap, the previous secret or key signs too. The
// signatures are space-separated, the current ones first. "" when d signs
// nothing.
func signature(d destination.Destination, ev Delivery, ts int64, now time.Time) (string, error) {
	var sig string
	add := func(s string, err error) error {
		if err != nil {
			return err
		}
		if sig != "" {
			sig += " "
		}
		sig += s
		return nil
	}
	if d.SignsHMAC() && d.Secret != "" {
		if err := add(webhook.Sign(d.Secret, ev.ID, ts, ev.Body)); err != nil {
			return "", err
		}
		if d.PrevSecret != "" && now.Before(d.PrevSecretUntil) {
			if err := add(webhook.Sign(d.PrevSecret, ev.ID, ts, ev.Body)); err != nil {
				return "", err
			}
		}
	}
	if d.SignsEd25519() && d.SigningKey != "" {
		if err := add(webhook.SignEd25519(d.SigningKey, ev.ID, ts, ev.Body)); err != nil {
			return "", err
		}
		if d.PrevSigningKey != "" && now.Before(d.PrevSigningKeyUntil) {
			if err := add(webhook.SignEd25519(d.PrevSigningKey, ev.ID, ts, ev.Body)); err != nil {
				return "", err
			}
		}
	}
	return sig, nil
}
