package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/dlq"
)

// eventBody answers an event's body, its exact bytes, while the events
// stream keeps it (getEventBody).
func (s *Server) eventBody(c *call) {
	id := c.id
	v, err := deliverylog.LookupEventOf(c.within(30*time.Second), s.cfg.JS, id, c.inScope)
	switch {
	case errors.Is(err, deliverylog.ErrEventNotFound):
		c.problem(http.StatusNotFound, "id", fmt.Sprintf("event %q: %v (not attempted yet, or recorded longer ago than the log keeps)", id, err))
	case err != nil:
		c.problem(http.StatusServiceUnavailable, "", "cannot read the delivery log now: "+err.Error())
	case !v.Stored:
		c.problem(http.StatusNotFound, "id", fmt.Sprintf("event %q is no longer in the events stream (older than its retention): its body is gone", id))
	default:
		writeBody(c.w, "event-"+fileSafe(id), v.Body)
	}
}

// letterBody answers a dead letter's body, its exact bytes, read from the
// events stream when the letter holds no copy (getDeadLetterBody).
func (s *Server) letterBody(c *call) {
	ctx := c.within(30 * time.Second)
	l, ok := c.letter(ctx)
	if !ok {
		return
	}
	l, err := c.letters.Resolve(ctx, l)
	switch {
	case errors.Is(err, dlq.ErrEventGone):
		c.problem(http.StatusNotFound, "seq", err.Error())
	case err != nil:
		c.problem(http.StatusServiceUnavailable, "", "cannot read the dead letter's event now: "+err.Error())
	default:
		writeBody(c.w, "dead-letter-"+strconv.FormatUint(c.seq, 10), l.Body)
	}
}

// writeBody answers b, an event's body, as a download: its bytes as they
// were published, typed application/octet-stream whatever they hold, so
// that a browser saves them and never renders or sniffs them (a body is
// anyone's who could publish).
func writeBody(w http.ResponseWriter, name string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", `attachment; filename="`+name+`.body"`)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// fileSafe is id as part of a file name: letters, digits, '-', '_' and '.'
// kept, anything else '_', at most 64 characters.
func fileSafe(id string) string {
	out := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, id)
	if len(out) > 64 {
		out = out[:64]
	}
	return out
}
