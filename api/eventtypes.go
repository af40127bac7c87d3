package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/stream"
)

// eventTypeBody is the body of PUT /v1/event-types/{type}.
type eventTypeBody struct {
	Description string          `json:"description"`
	Example     json.RawMessage `json:"example"`
	Schema      json.RawMessage `json:"schema"`
}

func (s *Server) eventTypes(w http.ResponseWriter) (*eventtype.Store, bool) {
	if s.cfg.EventTypes == nil {
		problem(w, http.StatusServiceUnavailable, "", "this server does not serve event types (no store configured)")
		return nil, false
	}
	return s.cfg.EventTypes, true
}

// putEventType creates or replaces a type of the catalog (an upsert): 201
// when created, 200 when replaced. It answers once this server's catalog
// checks events with it.
func (s *Server) putEventType(c *call) {
	var body eventTypeBody
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	ctx := c.within(30 * time.Second)
	t, created, err := c.types.Put(ctx, eventtype.EventType{Type: c.r.PathValue("type"), Description: body.Description, Example: body.Example, Schema: body.Schema})
	if err != nil {
		eventTypeProblem(c, err)
		return
	}
	if s.cfg.Catalog != nil {
		if err := s.cfg.Catalog.WaitRev(ctx, t.Rev); err != nil {
			c.problem(http.StatusServiceUnavailable, "", "stored, but this server's catalog did not follow in time: "+err.Error())
			return
		}
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.w.Header().Set("Location", "/v1/event-types/"+t.Type)
	}
	c.json(status, t)
}

func (s *Server) getEventType(c *call) {
	t, err := c.types.Get(c.within(10*time.Second), c.r.PathValue("type"))
	if err != nil {
		eventTypeProblem(c, err)
		return
	}
	c.json(http.StatusOK, t)
}

func (s *Server) listEventTypes(c *call) {
	ts, err := c.types.List(c.within(30 * time.Second))
	if err != nil {
		eventTypeProblem(c, err)
		return
	}
	c.json(http.StatusOK, map[string]any{"event_types": ts})
}

func (s *Server) deleteEventType(c *call) {
	ctx := c.within(30 * time.Second)
	rev, err := c.types.Delete(ctx, c.r.PathValue("type"))
	if err != nil {
		eventTypeProblem(c, err)
		return
	}
	if s.cfg.Catalog != nil {
		_ = s.cfg.Catalog.WaitRev(ctx, rev)
	}
	c.w.WriteHeader(http.StatusNoContent)
}

func eventTypeProblem(c *call, err error) {
	var fe *eventtype.FieldError
	switch {
	case errors.As(err, &fe):
		c.problem(http.StatusUnprocessableEntity, fe.Field, fe.Error())
	case errors.Is(err, eventtype.ErrNotFound):
		c.problem(http.StatusNotFound, "", err.Error())
	default:
		c.problem(http.StatusServiceUnavailable, "", "event types unavailable: "+err.Error())
	}
}

// checkSchema checks a typed event's data against its type's schema in
// the catalog: the field at fault ("data/items/0/qty") and why, or "" and
// nil.
func (s *Server) checkSchema(ev newEvent) (string, error) {
	if ev.Type == "" || s.cfg.Catalog == nil || stream.ValidateEventType(ev.Type) != nil {
		return "", nil
	}
	err := s.cfg.Catalog.Check(ev.Type, ev.Data)
	var m *eventtype.Mismatch
	if errors.As(err, &m) {
		return "data" + m.Path, errors.New("data does not satisfy the schema of event type " + ev.Type + ": " + m.Error() + " (GET /v1/event-types/" + ev.Type + ")")
	}
	return "", nil
}
