package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/relaydev/relay/relay"
)

// whoami answers GET /v1/key: the name and scope of the key the request
// was made with (never the key or its hash).
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	k, _ := r.Context().Value(keyOfRequest{}).(Key)
	writeJSON(w, http.StatusOK, map[string]any{"name": k.Name, "scope": k.Scope, "id": k.ID, "created": k.Created})
}

// listRetrying answers GET /v1/destinations/{name}/retrying: the events
// of the destination waiting for their next attempt, as 'relay dest
// retrying'.
func (s *Server) listRetrying(w http.ResponseWriter, r *http.Request) {
	st, ok := s.dests(w)
	if !ok {
		return
	}
	name, ok := destName(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if !queryParams(w, q, "limit") {
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			problem(w, http.StatusBadRequest, "limit", fmt.Sprintf("%q: give a number from 1 to 1000", v))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	evs, err := st.Retrying(ctx, name, limit)
	if err != nil {
		destProblem(w, nil, err)
		return
	}
	if evs == nil {
		evs = []relay.Retrying{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs})
}

// skipRequest is the optional body of a skip.
type skipRequest struct {
	Reason string `json:"reason"`
}

// skipRetrying answers POST /v1/destinations/{name}/retrying/{id}/skip:
// dead-letter the event at its next delivery instead of attempting it, as
// 'relay dest skip'.
func (s *Server) skipRetrying(w http.ResponseWriter, r *http.Request) {
	st, ok := s.dests(w)
	if !ok {
		return
	}
	name, ok := destName(w, r)
	if !ok {
		return
	}
	var req skipRequest
	if !s.readOptionalJSON(w, r, &req) {
		return
	}
	why, err := relay.SkipReason(req.Reason)
	if err != nil {
		problem(w, http.StatusUnprocessableEntity, "reason", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	sk, err := st.SkipEvent(ctx, name, r.PathValue("id"), why)
	switch {
	case errors.Is(err, relay.ErrNotRetrying):
		problem(w, http.StatusNotFound, "id", err.Error())
	case errors.Is(err, relay.ErrOrdered):
		problem(w, http.StatusConflict, "", err.Error())
	case err != nil:
		destProblem(w, nil, err)
	default:
		writeJSON(w, http.StatusOK, sk)
	}
}
