package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/relay"
)

// Dead-letter listing bounds.
const (
	DefaultLetterLimit = 100
	MaxLetterLimit     = 1000
)

// letters is the dead-letter store, or false after answering 503.
func (s *Server) letters(w http.ResponseWriter) (*dlq.Store, bool) {
	if s.cfg.DeadLetters == nil {
		problem(w, http.StatusServiceUnavailable, "", "this server does not serve dead letters (no store configured)")
		return nil, false
	}
	return s.cfg.DeadLetters, true
}

// filterArgs are the filters of 'relay dlq list', as query parameters or
// body fields: dest, reason, status (an HTTP status or "none": no
// response), since and until (RFC 3339).
type filterArgs struct {
	dest, reason, status, since, until string
}

// filter is f as dlq takes it, for the letters c may see; a *fieldError
// if one is wrong.
func (f filterArgs) filter(c *call) (dlq.Filter, error) {
	out := dlq.Filter{Scoped: !c.all, Tenant: c.scope, Reason: f.reason}
	if f.dest != "" {
		var err error
		if out.Dest, err = c.destRef(f.dest); err != nil {
			return out, &fieldError{"dest", err}
		}
	}
	if f.reason != "" && !slices.Contains(relay.Reasons(), f.reason) {
		return out, &fieldError{"reason", fmt.Errorf("reason %q: use one of %s", f.reason, strings.Join(relay.Reasons(), ", "))}
	}
	switch f.status {
	case "":
	case "none":
		out.Status = -1
	default:
		n, err := strconv.Atoi(f.status)
		if err != nil || n < 100 || n > 599 {
			return out, &fieldError{"status", fmt.Errorf("status %q: give an HTTP status (100-599) or none (no response)", f.status)}
		}
		out.Status = n
	}
	for _, t := range []struct {
		field, v string
		dst      *time.Time
	}{{"since", f.since, &out.Since}, {"until", f.until, &out.Until}} {
		if t.v == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			return out, &fieldError{t.field, fmt.Errorf("%s %q: give an RFC 3339 time (2026-01-02T15:04:05Z)", t.field, t.v)}
		}
		*t.dst = v
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && !out.Until.After(out.Since) {
		return out, &fieldError{"until", errors.New("until must be after since")}
	}
	return out, nil
}

// letterProblem answers err of a dead-letter request.
func letterProblem(w http.ResponseWriter, err error) {
	var fe *fieldError
	switch {
	case errors.As(err, &fe):
		problem(w, http.StatusUnprocessableEntity, fe.field, fe.Error())
	case errors.Is(err, dlq.ErrLetterNotFound):
		problem(w, http.StatusNotFound, "", err.Error())
	default:
		problem(w, http.StatusServiceUnavailable, "", "cannot read the dead letters now: "+err.Error())
	}
}

// letterSummary is a dead letter in a list: without its history, headers
// and body ('relay dlq list --json').
func letterSummary(l dlq.Letter) dlq.Letter {
	l.History, l.Headers = nil, nil
	return l
}

// listLetters lists dead letters, oldest first, a page at a time: limit of
// them (default 100, at most 1000); next_after, when more may follow, is
// the after of the next page.
func (s *Server) listLetters(c *call) {
	q := c.r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"dest", "reason", "status", "since", "until", "limit", "after"}, k) {
			c.problem(http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q: the filters are dest, reason, status, since and until; pages are limit and after", k))
			return
		}
	}
	f, err := filterArgs{q.Get("dest"), q.Get("reason"), q.Get("status"), q.Get("since"), q.Get("until")}.filter(c)
	if err != nil {
		letterProblem(c.w, err)
		return
	}
	limit := DefaultLetterLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > MaxLetterLimit {
			c.problem(http.StatusUnprocessableEntity, "limit", fmt.Sprintf("limit %q: give 1 to %d", v, MaxLetterLimit))
			return
		}
	}
	if v := q.Get("after"); v != "" {
		if f.After, err = strconv.ParseUint(v, 10, 64); err != nil {
			c.problem(http.StatusUnprocessableEntity, "after", fmt.Sprintf("after %q: give the dead-letter sequence the page before ended with (its next_after)", v))
			return
		}
	}
	ls, err := c.letters.Summaries(c.within(time.Minute), f, limit+1)
	if err != nil {
		letterProblem(c.w, err)
		return
	}
	out := map[string]any{}
	if len(ls) > limit {
		ls = ls[:limit]
		out["next_after"] = ls[limit-1].Seq
	}
	page := make([]dlq.Letter, len(ls))
	for i, l := range ls {
		page[i] = letterSummary(l)
		page[i].Dest = c.shortName(l.Dest)
	}
	out["dead_letters"] = page
	c.json(http.StatusOK, out)
}

// getLetter answers one dead letter with its history, its event's headers
// and its body ('relay dlq show --json'): a JSON body as itself (body);
// text as a JSON string (body) and its bytes in base64 (body_base64);
// anything else in base64 only. An event too large to copy into the
// letter is read from the event log; body_unavailable says why it could
// not be.
func (s *Server) getLetter(c *call) {
	ctx := c.within(30 * time.Second)
	l, ok := c.letter(ctx)
	if !ok {
		return
	}
	out := struct {
		dlq.Letter
		dlq.Body
		Unavailable string `json:"body_unavailable,omitempty"`
	}{Letter: l}
	if l.EventOmitted {
		if full, err := c.letters.Resolve(ctx, l); err != nil {
			out.Unavailable = err.Error()
		} else {
			out.Letter = full
		}
	}
	if out.Unavailable == "" {
		out.Body = dlq.BodyOf(out.Letter.Body)
	}
	out.Letter.Headers = destination.RedactHeaders(out.Letter.Headers)
	out.Letter.Dest = c.shortName(out.Letter.Dest)
	c.json(http.StatusOK, out)
}

// letter is the path's dead letter, or false after answering: 404 also
// for another tenant's than the request's.
func (c *call) letter(ctx context.Context) (dlq.Letter, bool) {
	l, err := c.letters.Get(ctx, c.seq)
	if err == nil && !c.inScope(l.Dest) {
		err = dlq.NotFound(c.seq)
	}
	if err != nil {
		letterProblem(c.w, err)
		return dlq.Letter{}, false
	}
	return l, true
}

// selection is what replay and purge act on, as 'relay dlq replay' and
// 'purge' take it: seqs, the filters, or all; dry_run changes nothing.
type selection struct {
	Seqs   []uint64        `json:"seqs"`
	Dest   string          `json:"dest"`
	Reason string          `json:"reason"`
	Status json.RawMessage `json:"status"`
	Since  string          `json:"since"`
	Until  string          `json:"until"`
	All    bool            `json:"all"`
	DryRun bool            `json:"dry_run"`
	ToDest string          `json:"to_dest"` // replay only
}

// filter is the selection as dlq takes it; a *fieldError if it is wrong
// or says nothing to act on.
func (sel selection) filter(verb string, c *call) (dlq.Filter, error) {
	args := filterArgs{dest: sel.Dest, reason: sel.Reason, since: sel.Since, until: sel.Until}
	if len(sel.Status) > 0 {
		var n int
		if err := json.Unmarshal(sel.Status, &args.status); err != nil {
			if err := json.Unmarshal(sel.Status, &n); err != nil {
				return dlq.Filter{}, &fieldError{"status", fmt.Errorf("status %s: give an HTTP status (100-599) or \"none\" (no response)", sel.Status)}
			}
			args.status = strconv.Itoa(n)
		}
	}
	f, err := args.filter(c)
	if err != nil {
		return f, err
	}
	f.Seqs = sel.Seqs
	filtered := f.Dest != "" || f.Reason != "" || f.Status != 0 || !f.Since.IsZero() || !f.Until.IsZero()
	switch {
	case len(f.Seqs) == 0 && !sel.All && !filtered:
		return f, &fieldError{"seqs", fmt.Errorf("say what to %s: seqs, filters such as dest, or all: true", verb)}
	case len(f.Seqs) > 0 && sel.All:
		return f, &fieldError{"all", errors.New("seqs and all exclude each other")}
	case slices.Contains(f.Seqs, 0):
		return f, &fieldError{"seqs", errors.New("dead-letter sequences start at 1")}
	}
	return f, nil
}

// replayLetters replays dead letters as 'relay dlq replay' does
// (relay.ReplayDeadLetters), going on after a failed one: the answer counts
// those replayed, and lists those skipped (never replayable) and failed.
func (s *Server) replayLetters(c *call) {
	var body selection
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	f, err := body.filter("replay", c)
	if err != nil {
		letterProblem(c.w, err)
		return
	}
	ctx := c.within(10 * time.Minute)
	toDest := ""
	if body.ToDest != "" {
		var err error
		if toDest, err = c.destRef(body.ToDest); err != nil {
			c.problem(http.StatusUnprocessableEntity, "to_dest", err.Error())
			return
		}
		ds, ok := s.dests(c.w)
		if !ok {
			return
		}
		if _, err := ds.Get(ctx, toDest); errors.Is(err, destination.ErrNotFound) {
			c.problem(http.StatusNotFound, "to_dest", "to_dest: "+err.Error())
			return
		} else if err != nil {
			letterProblem(c.w, err)
			return
		}
	}
	rep, err := relay.ReplayDeadLetters(ctx, relay.DeadLetterReplay{
		Letters: c.letters, JS: s.cfg.JS, By: "api", Filter: f,
		Options: dlq.ReplayOptions{ToDest: toDest, DryRun: body.DryRun},
	})
	if err != nil {
		letterProblem(c.w, err)
		return
	}
	if rep.EventErr != nil {
		s.cfg.Logger.Warn("cannot publish relay.replay.finished", "err", rep.EventErr)
	}
	c.json(http.StatusOK, struct {
		DryRun     bool                  `json:"dry_run"`
		Matched    int                   `json:"matched"`
		Replayed   int                   `json:"replayed"`
		Duplicates int                   `json:"duplicates"`
		Skipped    []relay.LetterOutcome `json:"skipped"`
		Failed     []relay.LetterOutcome `json:"failed"`
	}{body.DryRun, rep.Matched, rep.Replayed, rep.Duplicates, rep.Skipped, rep.Failed})
}

// purgeLetters deletes dead letters for good, as 'relay dlq purge --yes'
// does; with dry_run it counts them.
func (s *Server) purgeLetters(c *call) {
	var body selection
	if !s.readJSON(c.w, c.r, &body) {
		return
	}
	if body.ToDest != "" {
		c.problem(http.StatusBadRequest, "to_dest", "purge deletes: to_dest is replay's")
		return
	}
	f, err := body.filter("purge", c)
	if err != nil {
		letterProblem(c.w, err)
		return
	}
	ctx := c.within(10 * time.Minute)
	ls, err := c.letters.Summaries(ctx, f, 0)
	if err != nil {
		letterProblem(c.w, err)
		return
	}
	n := len(ls)
	if !body.DryRun {
		if n, err = c.letters.DeleteAll(ctx, ls); err != nil {
			c.problem(http.StatusServiceUnavailable, "", "purge stopped: "+err.Error())
			return
		}
	}
	c.json(http.StatusOK, map[string]any{"dry_run": body.DryRun, "matched": len(ls), "purged": n})
}
