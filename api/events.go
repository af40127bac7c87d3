package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
)

// newEvent is POST /v1/events's body, and each event of a batch.
type newEvent struct {
	Tenant  string            `json:"tenant"`
	Dest    string            `json:"dest"`
	Type    string            `json:"type"`
	Key     string            `json:"key"`
	ID      string            `json:"id"`
	Headers map[string]string `json:"headers"`
	Data    json.RawMessage   `json:"data"`
}

// batchBody is POST /v1/events:batch's body.
type batchBody struct {
	Events []newEvent `json:"events"`
}

// fastDecoder is a request body with a fast path for its plain form
// (bodyjson.go): fastDecode reports false, having changed nothing, when the
// body is to go through encoding/json.
type fastDecoder interface {
	fastDecode(body []byte) bool
}

func (ev *newEvent) fastDecode(body []byte) bool {
	got, ok := fastEvent(body)
	if ok {
		*ev = got
	}
	return ok
}

func (b *batchBody) fastDecode(body []byte) bool {
	got, ok := fastBatch(body)
	if ok {
		b.Events = got
	}
	return ok
}

// check reports the first thing wrong with ev, and the field at fault.
func (ev newEvent) check() (field string, err error) {
	switch {
	case len(ev.Data) == 0:
		return "data", errors.New("data is required: the body to POST to the destination (any JSON value)")
	case ev.Dest == "" && ev.Type == "":
		return "dest", errors.New("give dest (one destination) or type (every destination subscribed to it)")
	case ev.Dest != "" && ev.Type != "":
		return "type", errors.New("give dest or type, not both")
	}
	for _, c := range []struct {
		field, value string
		check        func(string) error
	}{{"tenant", ev.Tenant, stream.ValidateTenantID}, {"dest", ev.Dest, stream.ValidateDestName}, {"type", ev.Type, stream.ValidateEventType}, {"id", ev.ID, publish.ValidateEventID}, {"key", ev.Key, publish.ValidateOrderKey}} {
		if c.value == "" {
			continue
		}
		if err := c.check(c.value); err != nil {
			return c.field, err
		}
	}
	for k, v := range ev.Headers {
		if err := destination.ValidateEventHeader(k, v); err != nil {
			return "headers", err
		}
	}
	return "", nil
}

// forScope sets ev's tenant to the request's (its path's, or its key's)
// when it names none, and reports an event for another tenant than the
// request's: not found for a tenant key (which learns nothing of other
// tenants), 422 for a path that says another.
func (ev *newEvent) forScope(c *call) (status int, err error) {
	switch {
	case ev.Tenant == "":
		ev.Tenant = c.scope
	case c.key.Tenant != "" && ev.Tenant != c.key.Tenant:
		return http.StatusNotFound, fmt.Errorf("%w %q; nothing was published", publish.ErrUnknownTenant, ev.Tenant)
	case c.scope != "" && ev.Tenant != c.scope:
		return http.StatusUnprocessableEntity, fmt.Errorf("tenant %q differs from the path's, %q: give one, or the same", ev.Tenant, c.scope)
	}
	return 0, nil
}

// event is ev as the request c publishes it: idempotent within the scope
// of c's API key (an id is a duplicate only of one the same key published
// to the same destination or type).
func (ev newEvent) event(c *call) publish.Event {
	return publish.Event{Tenant: ev.Tenant, Dest: ev.Dest, Type: ev.Type, Key: ev.Key, ID: ev.ID, Headers: ev.Headers, Data: ev.Data, Scope: "key:" + c.key.ID}
}

// publishProblem answers an event the producer refused, whose fields are
// named with prefix.
func publishProblem(w http.ResponseWriter, prefix string, err error) {
	switch {
	case errors.Is(err, publish.ErrUnknownDestination):
		problem(w, http.StatusNotFound, prefix+"dest", err.Error())
	case errors.Is(err, publish.ErrUnknownTenant):
		problem(w, http.StatusNotFound, prefix+"tenant", err.Error())
	case errors.Is(err, publish.ErrEventTooLarge):
		problem(w, http.StatusRequestEntityTooLarge, prefix+"data", err.Error())
	case errors.Is(err, publish.ErrIDConflict):
		problem(w, http.StatusConflict, prefix+"id", err.Error())
	default:
		problem(w, http.StatusServiceUnavailable, "", "the event was not stored: "+err.Error())
	}
}

func (s *Server) publish(c *call) {
	var ev newEvent
	if !s.readJSON(c.w, c.r, &ev) {
		return
	}
	if idem := c.r.Header.Get("Idempotency-Key"); idem != "" {
		if ev.ID != "" && ev.ID != idem {
			c.problem(http.StatusUnprocessableEntity, "id", fmt.Sprintf("the body's id %q and the Idempotency-Key %q differ: give one, or the same", ev.ID, idem))
			return
		}
		ev.ID = idem
	}
	if field, err := ev.check(); err != nil {
		c.problem(http.StatusUnprocessableEntity, field, err.Error())
		return
	}
	if c.key.Session != "" && !s.portalTestEvent(c, ev) {
		return
	}
	if status, err := ev.forScope(c); err != nil {
		c.problem(status, "tenant", err.Error())
		return
	}
	if field, err := s.checkSchema(ev); err != nil {
		c.problem(http.StatusUnprocessableEntity, field, err.Error())
		return
	}
	if ev.Tenant != "" && !s.allowPublish(c, map[string]int{ev.Tenant: 1}) {
		return
	}
	res, err := s.cfg.Producer.Publish(c.tracedWithin(10*time.Second), ev.event(c))
	if err != nil {
		publishProblem(c.w, "", err)
		return
	}
	c.json(http.StatusAccepted, published{ID: res.ID, Seq: res.Seq, Duplicate: res.Duplicate})
}

// published is the answer for a stored event.
type published struct {
	ID        string `json:"id"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// MaxBatch is the most events of one POST /v1/events:batch.
const MaxBatch = 1000

// batchResult is one event's outcome in a batch's answer: published, or
// Error.
type batchResult struct {
	ID        string       `json:"id"`
	Seq       uint64       `json:"seq,omitempty"`
	Duplicate *bool        `json:"duplicate,omitempty"`
	Error     *resultError `json:"error,omitempty"`
}

// resultError is why one item of a request failed.
type resultError struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// publishBatch publishes up to MaxBatch events. Every event is checked
// before any is published: one refused refuses the batch (its field says
// which, events[3].dest), and nothing is stored. Then all are published at
// once, in order, and the answer (202, whatever became of them) has each
// one's outcome, in order: stored (id, seq, duplicate) or its own error,
// with its id, so that it can be published again safely.
func (s *Server) publishBatch(c *call) {
	var body batchBody
	if !s.readJSONUpTo(c.w, c.r, s.cfg.MaxBatchBody, &body) {
		return
	}
	if n := len(body.Events); n == 0 || n > MaxBatch {
		c.problem(http.StatusUnprocessableEntity, "events", fmt.Sprintf("give 1 to %d events; got %d", MaxBatch, n))
		return
	}
	evs := make([]publish.Event, len(body.Events))
	counts := map[string]int{} // events per tenant
	for i, ev := range body.Events {
		field, err := ev.check()
		if err == nil {
			var status int
			if status, err = ev.forScope(c); err != nil {
				c.problem(status, fmt.Sprintf("events[%d].tenant", i), fmt.Sprintf("event %d: %v; nothing was published", i, err))
				return
			}
		}
		if err == nil {
			field, err = s.checkSchema(ev)
		}
		if err != nil {
			c.problem(http.StatusUnprocessableEntity, fmt.Sprintf("events[%d].%s", i, field), fmt.Sprintf("event %d: %v; nothing was published", i, err))
			return
		}
		evs[i] = ev.event(c)
		counts[ev.Tenant]++
	}
	if !s.allowPublish(c, counts) {
		return
	}
	res, err := s.cfg.Producer.PublishBatch(c.tracedWithin(30*time.Second), evs)
	var be *publish.BatchError
	if errors.As(err, &be) {
		publishProblem(c.w, fmt.Sprintf("events[%d].", be.Index), fmt.Errorf("%w; nothing was published", be))
		return
	}
	if err != nil {
		c.problem(http.StatusServiceUnavailable, "", "no event was stored: "+err.Error())
		return
	}
	out := make([]batchResult, len(res))
	stored := 0
	for i, r := range res {
		out[i].ID = r.ID
		if errors.Is(r.Err, publish.ErrIDConflict) {
			out[i].Error = &resultError{Status: http.StatusConflict, Detail: r.Err.Error()}
			continue
		}
		if r.Err != nil {
			out[i].Error = &resultError{Status: http.StatusServiceUnavailable, Detail: "not stored: " + r.Err.Error() + "; publish it again with the same id (a duplicate stores nothing)"}
			continue
		}
		stored++
		out[i].Seq, out[i].Duplicate = r.Seq, &r.Duplicate
	}
	c.json(http.StatusAccepted, map[string]any{"results": out, "stored": stored, "failed": len(res) - stored})
}
