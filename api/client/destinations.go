package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Destinations returns every destination and its settings, sorted by name
// (listDestinations). Scope: read.
func (c *Client) Destinations(ctx context.Context) ([]Destination, error) {
	var out struct {
		Destinations []Destination `json:"destinations"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/destinations"}, &out)
	return out.Destinations, err
}

// Destination returns one destination (getDestination); IsNotFound when
// there is none of that name. Scope: read.
func (c *Client) Destination(ctx context.Context, name string) (Destination, error) {
	var out Destination
	err := c.do(ctx, request{method: http.MethodGet, path: destPath(name)}, &out)
	return out, err
}

// CreateDestination adds a destination, as 'relay dest add' does: the
// same defaults and checks (createDestination). Without Secret or
// NoSecret relay generates a secret, answered once in the result's Secret.
// IsConflict when the name is taken. Scope: admin.
func (c *Client) CreateDestination(ctx context.Context, d NewDestination) (Destination, error) {
	var out Destination
	err := c.do(ctx, request{method: http.MethodPost, path: "/destinations", body: d}, &out)
	return out, err
}

// UpdateDestination changes the settings given in change; the others keep
// their values (updateDestination). Ordered, Shared and Partitions are
// fixed once added (IsConflict). Scope: admin.
func (c *Client) UpdateDestination(ctx context.Context, name string, change DestinationSettings) (Destination, error) {
	var out Destination
	err := c.do(ctx, request{method: http.MethodPatch, path: destPath(name), body: change}, &out)
	return out, err
}

// DeleteOption is a knob of DeleteDestination.
type DeleteOption func(url.Values)

// Force removes the destination even though events still wait for its
// delivery (they stay in the event log, undelivered).
func Force() DeleteOption {
	return func(v url.Values) { v.Set("force", "true") }
}

// DeleteDestination removes a destination, as 'relay dest rm' does
// (deleteDestination): refused (IsConflict) while events wait for its
// delivery, unless Force. Scope: admin.
func (c *Client) DeleteDestination(ctx context.Context, name string, opts ...DeleteOption) error {
	v := url.Values{}
	for _, o := range opts {
		o(v)
	}
	return c.do(ctx, request{method: http.MethodDelete, path: destPath(name), query: v}, nil)
}

// PauseOption is a knob of PauseDestination.
type PauseOption func(*pauseBody)

type pauseBody struct {
	For *Duration `json:"for,omitempty"`
}

// PauseFor resumes the destination by itself after d.
func PauseFor(d time.Duration) PauseOption {
	return func(b *pauseBody) { b.For = new(Duration(d)) }
}

// PauseDestination stops deliveries to a destination until it is resumed,
// or for PauseFor's time (pauseDestination). Its events wait; none uses up
// attempts. Scope: admin.
func (c *Client) PauseDestination(ctx context.Context, name string, opts ...PauseOption) (Destination, error) {
	r := request{method: http.MethodPost, path: destPath(name) + "/pause"}
	if len(opts) > 0 {
		var b pauseBody
		for _, o := range opts {
			o(&b)
		}
		r.body = b
	}
	var out Destination
	err := c.do(ctx, r, &out)
	return out, err
}

// ResumeDestination resumes deliveries to a paused, circuit-broken or
// disabled destination (resumeDestination). Scope: admin.
func (c *Client) ResumeDestination(ctx context.Context, name string) (Destination, error) {
	var out Destination
	err := c.do(ctx, request{method: http.MethodPost, path: destPath(name) + "/resume"}, &out)
	return out, err
}

// RotateOption is a knob of RotateSecret.
type RotateOption func(*rotateBody)

type rotateBody struct {
	Overlap *Duration `json:"overlap,omitempty"`
	Secret  string    `json:"secret,omitempty"`
}

// Overlap is how long the old secret keeps signing too (default 24h; 0:
// stop at once).
func Overlap(d time.Duration) RotateOption {
	return func(b *rotateBody) { b.Overlap = new(Duration(d)) }
}

// UseSecret rotates to secret (whsec_<base64>) rather than a generated
// one.
func UseSecret(secret string) RotateOption {
	return func(b *rotateBody) { b.Secret = secret }
}

// DestinationSecret returns a destination's signing secret
// (getDestinationSecret). Scope: admin (a portal session: view_secret).
func (c *Client) DestinationSecret(ctx context.Context, name string) (DestinationSecret, error) {
	var out DestinationSecret
	err := c.do(ctx, request{method: http.MethodGet, path: destPath(name) + "/secret"}, &out)
	return out, err
}

// DestinationSecret is a destination's signing secret.
type DestinationSecret struct {
	Secret string `json:"secret"`
	// PreviousSecretUntil is when the previous secret stops signing too,
	// during a rotation's overlap.
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
}

// FilterExample is an example event to try a filter on (TestFilter).
type FilterExample struct {
	ID      string            `json:"id,omitempty"`
	Type    string            `json:"type,omitempty"`
	Key     string            `json:"key,omitempty"`
	Dest    string            `json:"dest,omitempty"`
	Data    json.RawMessage   `json:"data,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// FilterResult is what a filter decides of an example event.
type FilterResult struct {
	Matched bool `json:"matched"`
	// Outcome is delivered, filtered, or dead_letter (the filter failed
	// on the event: Error says why).
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// TestFilter tries filter on the example event ev (testFilter); a filter
// that does not compile is an *Error of status 422. Scope: read.
func (c *Client) TestFilter(ctx context.Context, filter string, ev FilterExample) (FilterResult, error) {
	var out FilterResult
	err := c.do(ctx, request{method: http.MethodPost, path: "/filters:test", body: map[string]any{"filter": filter, "event": ev}}, &out)
	return out, err
}

// RotateSecret gives a destination a new signing secret, as 'relay dest
// rotate-secret' does (rotateDestinationSecret): a generated one, answered
// once in the result's Secret, unless UseSecret. Scope: admin.
func (c *Client) RotateSecret(ctx context.Context, name string, opts ...RotateOption) (Destination, error) {
	r := request{method: http.MethodPost, path: destPath(name) + "/rotate-secret"}
	if len(opts) > 0 {
		var b rotateBody
		for _, o := range opts {
			o(&b)
		}
		r.body = b
	}
	var out Destination
	err := c.do(ctx, r, &out)
	return out, err
}

func destPath(name string) string { return "/destinations/" + url.PathEscape(name) }

// Retrying is an event of an unordered destination waiting for its next
// attempt.
type Retrying struct {
	EventID     string    `json:"event_id"`
	Seq         uint64    `json:"seq"`
	Attempts    int       `json:"attempts"`
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// LastURL is the index in the destination's pool of the URL of the
	// last attempt, when it has a pool.
	LastURL *int `json:"last_url,omitempty"`
	// Skip is why an operator skipped it, once one did.
	Skip   string `json:"skip,omitempty"`
	Origin uint64 `json:"origin,omitempty"`
}

// Retrying lists up to limit (1 to 1,000; 0: 100) of a destination's
// events waiting for their next attempt, as 'relay dest retrying'
// (listRetrying). Scope: read.
func (c *Client) Retrying(ctx context.Context, name string, limit int) ([]Retrying, error) {
	r := request{method: http.MethodGet, path: destPath(name) + "/retrying"}
	if limit != 0 {
		r.query = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out struct {
		Events []Retrying `json:"events"`
	}
	err := c.do(ctx, r, &out)
	return out.Events, err
}

// SkipRetrying gives up on an event in retry: relay dead-letters it
// (reason skipped, with why) at its next delivery instead of attempting
// it, as 'relay dest skip' (skipRetrying). IsNotFound when no failed
// attempt of it is on record; IsConflict for an ordered destination.
// Scope: admin.
func (c *Client) SkipRetrying(ctx context.Context, name, id, why string) (Retrying, error) {
	r := request{method: http.MethodPost, path: destPath(name) + "/retrying/" + url.PathEscape(id) + "/skip"}
	if why != "" {
		r.body = struct {
			Reason string `json:"reason"`
		}{why}
	}
	var out Retrying
	err := c.do(ctx, r, &out)
	return out, err
}
