package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// PublishOption is a knob of one Publish.
type PublishOption func(*request)

// IdempotencyKey sends key as the Idempotency-Key header: the event's id,
// so that a publish repeated with the same key within relay's duplicate
// window stores nothing new (Published.Duplicate). It must equal ev.ID
// when that is set too.
func IdempotencyKey(key string) PublishOption {
	return func(r *request) {
		if r.header == nil {
			r.header = http.Header{}
		}
		r.header.Set("Idempotency-Key", key)
	}
}

// Publish publishes one event (publishEvent). Scope: publish or admin.
func (c *Client) Publish(ctx context.Context, ev NewEvent, opts ...PublishOption) (Published, error) {
	r := request{method: http.MethodPost, path: "/events", body: ev}
	for _, o := range opts {
		o(&r)
	}
	var out Published
	err := c.do(ctx, r, &out)
	return out, err
}

// PublishBatch publishes 1 to 1,000 events at once, in order
// (publishEventBatch). If one of them is refused, none is published and
// the *Error's Field says which (events[3].dest). Otherwise the answer has
// each event's outcome, in order: check Failed. Scope: publish or admin.
func (c *Client) PublishBatch(ctx context.Context, evs []NewEvent) (BatchPublished, error) {
	body := struct {
		Events []NewEvent `json:"events"`
	}{evs}
	var out BatchPublished
	err := c.do(ctx, request{method: http.MethodPost, path: "/events:batch", body: body}, &out)
	return out, err
}

// Stats returns every destination's state (getStats). Scope: read.
func (c *Client) Stats(ctx context.Context) ([]DestStats, error) {
	var out struct {
		Destinations []DestStats `json:"destinations"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/stats"}, &out)
	return out.Destinations, err
}

// Event returns what the delivery log knows of event id: the event, and
// for each destination its state and attempts (getEvent). Scope: read.
func (c *Client) Event(ctx context.Context, id string) (EventView, error) {
	var out EventView
	err := c.do(ctx, request{method: http.MethodGet, path: "/events/" + url.PathEscape(id)}, &out)
	return out, err
}

// EventBody returns event id's body, the exact bytes it was published with
// (getEventBody); IsNotFound when the log has no record of it or the
// events stream no longer keeps it. Scope: read.
func (c *Client) EventBody(ctx context.Context, id string) ([]byte, error) {
	return c.bytes(ctx, request{method: http.MethodGet, path: "/events/" + url.PathEscape(id) + "/body"})
}

// Attempts returns a page of the delivery log's records that q selects,
// newest first (listAttempts). Scope: read.
func (c *Client) Attempts(ctx context.Context, q AttemptQuery) (AttemptPage, error) {
	v := url.Values{}
	set(v, "dest", q.Dest)
	set(v, "event", q.EventID)
	set(v, "type", q.Type)
	set(v, "status", q.Status)
	setTime(v, "since", q.Since)
	setTime(v, "until", q.Until)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	set(v, "cursor", q.Cursor)
	var out AttemptPage
	err := c.do(ctx, request{method: http.MethodGet, path: "/attempts", query: v}, &out)
	return out, err
}

// AllAttempts iterates over every record q selects, newest first, from
// q.Cursor on, reading a page (of q.Limit) at a time. An error ends it,
// yielded with a zero record.
func (c *Client) AllAttempts(ctx context.Context, q AttemptQuery) iter.Seq2[AttemptRecord, error] {
	return func(yield func(AttemptRecord, error) bool) {
		for {
			page, err := c.Attempts(ctx, q)
			if err != nil {
				yield(AttemptRecord{}, err)
				return
			}
			for _, a := range page.Attempts {
				if !yield(a, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			q.Cursor = page.Next
		}
	}
}

func set(v url.Values, name, value string) {
	if value != "" {
		v.Set(name, value)
	}
}

func setTime(v url.Values, name string, t time.Time) {
	if !t.IsZero() {
		v.Set(name, t.Format(time.RFC3339Nano))
	}
}
