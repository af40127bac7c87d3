package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// EventType is a type of the catalog (the EventType schema).
type EventType struct {
	Type        string          `json:"type"`
	Description string          `json:"description,omitempty"`
	Example     json.RawMessage `json:"example,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// EventTypeChange is what PutEventType sets, replacing what the type had
// (the EventTypeChange schema). Without a Schema, events of the type are
// not checked.
type EventTypeChange struct {
	Description string          `json:"description,omitempty"`
	Example     json.RawMessage `json:"example,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
}

func eventTypePath(typ string) string { return "/event-types/" + url.PathEscape(typ) }

// PutEventType creates the type, or replaces its description, example and
// schema (putEventType, an upsert); created says which. Scope: admin.
func (c *Client) PutEventType(ctx context.Context, typ string, change EventTypeChange) (t EventType, created bool, err error) {
	resp, err := c.send(ctx, request{method: http.MethodPut, path: eventTypePath(typ), body: change})
	if err != nil {
		return EventType{}, false, err
	}
	defer resp.Body.Close()
	if err := decodeJSON(resp.Body, &t); err != nil {
		return EventType{}, false, fmt.Errorf("relay client: PUT %s: decode the answer: %w", resp.Request.URL.Path, err)
	}
	return t, resp.StatusCode == http.StatusCreated, nil
}

// EventType returns one type of the catalog (getEventType); IsNotFound
// when there is none. Scope: read.
func (c *Client) EventType(ctx context.Context, typ string) (EventType, error) {
	var out EventType
	err := c.do(ctx, request{method: http.MethodGet, path: eventTypePath(typ)}, &out)
	return out, err
}

// EventTypes returns the catalog, in the order of the types' names
// (listEventTypes). Scope: read.
func (c *Client) EventTypes(ctx context.Context) ([]EventType, error) {
	var out struct {
		EventTypes []EventType `json:"event_types"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/event-types"}, &out)
	return out.EventTypes, err
}

// DeleteEventType removes a type from the catalog (deleteEventType): its
// events are no longer checked. IsNotFound when there is none. Scope:
// admin.
func (c *Client) DeleteEventType(ctx context.Context, typ string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: eventTypePath(typ)}, nil)
}
