package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/textproto"

	"github.com/relaydev/relay/destination"
)

// filterTest is the body of POST /v1/filters:test: a filter, and an
// example event to try it on.
type filterTest struct {
	Filter string `json:"filter"`
	Event  struct {
		ID      string            `json:"id"`
		Type    string            `json:"type"`
		Key     string            `json:"key"`
		Dest    string            `json:"dest"`
		Data    json.RawMessage   `json:"data"`
		Headers map[string]string `json:"headers"`
	} `json:"event"`
}

// testFilter answers POST /v1/filters:test: whether the filter selects the
// example event, as a destination with it would decide (delivered,
// filtered, or dead-lettered when the filter fails on the event). A filter
// that does not compile is 422 naming filter.
func (s *Server) testFilter(c *call) {
	var body filterTest
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	if body.Filter == "" {
		c.problem(http.StatusUnprocessableEntity, "filter", "filter is required: the expression to try (docs/filters.md)")
		return
	}
	f, err := destination.CompileFilter(body.Filter)
	if err != nil {
		c.problem(http.StatusUnprocessableEntity, "filter", err.Error())
		return
	}
	ev := destination.FilterEvent{ID: body.Event.ID, Type: body.Event.Type, Key: body.Event.Key, Dest: body.Event.Dest, Body: body.Event.Data, Headers: http.Header{}}
	for k, v := range body.Event.Headers {
		ev.Headers.Set(textproto.CanonicalMIMEHeaderKey(k), v)
	}
	matched, err := f.Match(c.r.Context(), ev)
	out := map[string]any{"matched": matched && err == nil}
	switch {
	case errors.Is(err, destination.ErrFilterStopped):
		c.problem(http.StatusServiceUnavailable, "", "the evaluation was cut short: try again")
		return
	case err != nil:
		out["outcome"], out["error"] = "dead_letter", err.Error()
	case matched:
		out["outcome"] = "delivered"
	default:
		out["outcome"] = "filtered"
	}
	c.json(http.StatusOK, out)
}
