package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaydev/relay/api/client"
)

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := u.sessions.open(r); ok {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	u.loginForm(w, r, http.StatusOK, "")
}

// loginForm shows the sign-in form, with msg when there is one, and the
// CSRF token of the browser's pre-session.
func (u *UI) loginForm(w http.ResponseWriter, r *http.Request, status int, msg string) {
	data := map[string]any{"CSRF": u.sessions.loginToken(w, r)}
	if msg != "" {
		data["Error"] = msg
	}
	u.render(w, r, status, "login", user{}, data)
}

// login checks the form's CSRF token, then the key with the API (GET
// /v1/key), and starts a session. Without the token a page elsewhere
// could sign the browser in with a key of its choosing (login CSRF): what
// the user then did would be done with, and seen by, that key.
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		status, msg := http.StatusBadRequest, "The sign-in form could not be read: "+err.Error()
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			status = http.StatusRequestEntityTooLarge
		case errors.Is(err, os.ErrDeadlineExceeded):
			// relay run's --api-body-timeout passed: the server closes
			// the connection rather than wait for the rest.
			status, msg = http.StatusRequestTimeout, "The sign-in form did not arrive in time: send it again."
			w.Header().Set("Connection", "close")
		}
		u.loginForm(w, r, status, msg)
		return
	}
	if !u.sessions.loginOK(r, r.PostFormValue("csrf")) {
		u.loginForm(w, r, http.StatusForbidden, "This sign-in form is stale or did not come from this dashboard (CSRF check failed): sign in again with the form below.")
		return
	}
	key := strings.TrimSpace(r.PostFormValue("key"))
	if key == "" {
		u.loginForm(w, r, http.StatusOK, "Paste an API key (relay api-key create).")
		return
	}
	k, err := u.apiFor(r, key).Key(r.Context())
	if err != nil {
		msg := "That API key is not valid."
		switch statusOf(err) {
		case http.StatusTooManyRequests:
			msg = "Too many wrong keys from this address: wait a little and try again."
		case http.StatusUnauthorized:
		default:
			msg = "Cannot check the key now: " + err.Error()
		}
		// 200: the sign-in form again, with why (a browser reports a page
		// loaded with an error status as a console error).
		u.loginForm(w, r, http.StatusOK, msg)
		return
	}
	u.sessions.endLogin(w, r)
	u.sessions.start(w, r, key)
	u.cfg.Logger.Info("dashboard: signed in", "key", k.Name, "scope", k.Scope, "client", r.RemoteAddr)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request, _ user) {
	u.sessions.end(w, r)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// rateWindow is how far back the overview counts attempts for its rates;
// at most rateRecords records are read (the window is then what they
// cover).
const (
	rateWindow  = 30 * time.Second
	rateRecords = 3000
)

// destRow is a destination's line of the overview.
type destRow struct {
	client.DestStats
	Health     string // healthy, retrying, breaker open, paused, disabled, waiting
	PerSecond  float64
	Success    float64 // of the attempts in the window, 0..1; -1 without any
	Attempts   int
	OldestAge  time.Duration
	HasOldest  bool
	DeadLetter map[string]int // by reason, of the sample read
}

type overviewData struct {
	Rows                          []destRow
	Backlog, Retrying, Dead       uint64
	PerSecond, Success            float64
	Attempts                      int
	Window                        time.Duration
	Reasons                       []reasonCount
	LettersSampled, LettersCapped int
}

type reasonCount struct {
	Dest, Reason string
	N            int
}

func health(s client.DestStats) string {
	switch s.State {
	case "circuit_open":
		return "breaker open"
	case "operator":
		return "paused"
	case "retry_after":
		return "paused (Retry-After)"
	case "gone":
		return "disabled"
	case "probing":
		return "probing"
	}
	if s.Unconsumed != "" {
		return "not consumed"
	}
	if s.Retrying > 0 {
		return "retrying"
	}
	return "healthy"
}

// overviewOf reads what the overview shows: every destination's stats, the
// attempts of the last rateWindow (for rates and success ratios), and a
// sample of the dead letters (for their reasons).
func (u *UI) overviewOf(r *http.Request, usr user) (overviewData, error) {
	api := u.apiFor(r, usr.key)
	stats, err := api.Stats(r.Context())
	if err != nil {
		return overviewData{}, err
	}
	now := u.cfg.Now()
	d := overviewData{Window: rateWindow}
	since := now.Add(-rateWindow)
	type counts struct{ attempts, ok, delivered int }
	byDest := map[string]*counts{}
	q := client.AttemptQuery{Since: since, Limit: 1000}
	read := 0
	for read < rateRecords {
		p, err := api.Attempts(r.Context(), q)
		if err != nil {
			return overviewData{}, err
		}
		for _, a := range p.Attempts {
			c := byDest[a.Dest]
			if c == nil {
				c = &counts{}
				byDest[a.Dest] = c
			}
			if a.Attempt > 0 {
				c.attempts++
				if a.Class == "2xx" {
					c.ok++
				}
			}
			if a.Outcome == "delivered" {
				c.delivered++
			}
			since = a.At // newest first: the window shrinks to what was read
		}
		read += len(p.Attempts)
		if p.Next == "" {
			since = now.Add(-rateWindow)
			break
		}
		q.Cursor = p.Next
	}
	if span := now.Sub(since); span > time.Second && span < rateWindow {
		d.Window = span
	}
	var allAttempts, allOK, allDelivered int
	for _, s := range stats {
		row := destRow{DestStats: s, Health: health(s), Success: -1}
		if c := byDest[s.Dest]; c != nil {
			row.PerSecond = float64(c.delivered) / d.Window.Seconds()
			row.Attempts = c.attempts
			if c.attempts > 0 {
				row.Success = float64(c.ok) / float64(c.attempts)
			}
			allAttempts, allOK, allDelivered = allAttempts+c.attempts, allOK+c.ok, allDelivered+c.delivered
		}
		if !s.OldestUndelivered.IsZero() {
			row.OldestAge, row.HasOldest = now.Sub(s.OldestUndelivered), true
		}
		d.Backlog += s.Backlog
		d.Retrying += uint64(s.Retrying)
		d.Dead += s.DeadLetters
		d.Rows = append(d.Rows, row)
	}
	d.Attempts = allAttempts
	d.PerSecond = float64(allDelivered) / d.Window.Seconds()
	d.Success = -1
	if allAttempts > 0 {
		d.Success = float64(allOK) / float64(allAttempts)
	}
	if d.Dead > 0 {
		lp, err := api.DeadLetters(r.Context(), client.DeadLetterQuery{Limit: 1000})
		if err != nil {
			return overviewData{}, err
		}
		n := map[[2]string]int{}
		for _, l := range lp.DeadLetters {
			n[[2]string{l.Dest, l.Reason}]++
		}
		for k, c := range n {
			d.Reasons = append(d.Reasons, reasonCount{Dest: k[0], Reason: k[1], N: c})
		}
		slices.SortFunc(d.Reasons, func(a, b reasonCount) int {
			return cmpOr(strings.Compare(a.Dest, b.Dest), strings.Compare(a.Reason, b.Reason))
		})
		d.LettersSampled = len(lp.DeadLetters)
		if lp.NextAfter != 0 {
			d.LettersCapped = len(lp.DeadLetters)
		}
	}
	return d, nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func (u *UI) overview(w http.ResponseWriter, r *http.Request, usr user) {
	d, err := u.overviewOf(r, usr)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	u.render(w, r, http.StatusOK, "overview", usr, d)
}

// overviewLive is the overview's live part, which the page fetches every
// Refresh.
func (u *UI) overviewLive(w http.ResponseWriter, r *http.Request, usr user) {
	d, err := u.overviewOf(r, usr)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	u.render(w, r, http.StatusOK, "overview", usr, d)
}

type destPageData struct {
	// Ref is the destination as the dashboard's paths name it: its name,
	// or tenant=name for a tenant's.
	Ref      string
	Dest     client.Destination
	Stats    *client.DestStats
	Health   string
	Attempts []client.AttemptRecord
	Retrying []client.Retrying
	// RetryingErr says why events in retry could not be listed.
	RetryingErr string
	Notice      string
	Secret      string
}

func (u *UI) destData(r *http.Request, usr user, name string) (destPageData, error) {
	d := destPageData{Ref: name}
	api := u.apiFor(r, usr.key)
	own, short := destClient(api, name)
	var err error
	if d.Dest, err = own.Destination(r.Context(), short); err != nil {
		return d, err
	}
	stats, err := api.Stats(r.Context())
	if err != nil {
		return d, err
	}
	for i := range stats {
		if stats[i].Dest == name {
			d.Stats = &stats[i]
			d.Health = health(*d.Stats)
		}
	}
	p, err := api.Attempts(r.Context(), client.AttemptQuery{Dest: name, Limit: 20})
	if err != nil {
		return d, err
	}
	d.Attempts = p.Attempts
	if !d.Dest.Ordered {
		if d.Retrying, err = own.Retrying(r.Context(), short, 50); err != nil {
			d.RetryingErr = err.Error()
		}
	}
	return d, nil
}

// destClient is api for destination name, as the operator's view names it
// (a tenant's: tenant=name), and its name there.
func destClient(api *client.Client, name string) (*client.Client, string) {
	if t, n, ok := strings.Cut(name, "="); ok {
		return api.ForTenant(t), n
	}
	return api, name
}

func (u *UI) destPage(w http.ResponseWriter, r *http.Request, usr user) {
	d, err := u.destData(r, usr, r.PathValue("name"))
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	u.render(w, r, http.StatusOK, "destination", usr, d)
}

// destAction pauses, resumes or rotates the secret of a destination.
func (u *UI) destAction(w http.ResponseWriter, r *http.Request, usr user) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if !slices.Contains([]string{"pause", "resume", "rotate-secret"}, action) {
		http.Error(w, "no such action: "+action, http.StatusNotFound)
		return
	}
	own, short := destClient(u.apiFor(r, usr.key), name)
	var out client.Destination
	var err error
	switch action {
	case "pause":
		out, err = own.PauseDestination(r.Context(), short)
	case "resume":
		out, err = own.ResumeDestination(r.Context(), short)
	default:
		out, err = own.RotateSecret(r.Context(), short)
	}
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	d, err := u.destData(r, usr, name)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	switch action {
	case "pause":
		d.Notice = "Paused: no attempt is made until it is resumed."
	case "resume":
		d.Notice = "Resumed."
	case "rotate-secret":
		d.Notice = "New signing secret: it is shown once. The previous one keeps signing during the overlap."
		d.Secret = out.Secret
	}
	u.render(w, r, http.StatusOK, "destination", usr, d)
}

// skip gives up on an event in retry.
func (u *UI) skip(w http.ResponseWriter, r *http.Request, usr user) {
	name, id := r.PathValue("name"), r.PathValue("id")
	own, short := destClient(u.apiFor(r, usr.key), name)
	if _, err := own.SkipRetrying(r.Context(), short, id, strings.TrimSpace(r.PostFormValue("reason"))); err != nil {
		u.fail(w, r, usr, err)
		return
	}
	d, err := u.destData(r, usr, name)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	d.Notice = fmt.Sprintf("Event %s is skipped: it is dead-lettered (reason skipped) at its next delivery.", id)
	u.render(w, r, http.StatusOK, "destination", usr, d)
}

// letterFilter is the dead-letter page's filter, as the form has it.
type letterFilter struct {
	Dest, Reason, Status, Since, Until string
}

func filterOf(v url.Values) letterFilter {
	return letterFilter{Dest: strings.TrimSpace(v.Get("dest")), Reason: strings.TrimSpace(v.Get("reason")),
		Status: strings.TrimSpace(v.Get("status")), Since: strings.TrimSpace(v.Get("since")), Until: strings.TrimSpace(v.Get("until"))}
}

// selection is the filter as the API takes it; the times are the page's
// datetime-local fields (UTC), or RFC 3339.
func (f letterFilter) selection() (client.LetterSelection, error) {
	sel := client.LetterSelection{Dest: f.Dest, Reason: f.Reason, Status: f.Status}
	var err error
	if f.Since != "" {
		if sel.Since, err = parseWhen(f.Since); err != nil {
			return sel, fmt.Errorf("since: %w", err)
		}
	}
	if f.Until != "" {
		if sel.Until, err = parseWhen(f.Until); err != nil {
			return sel, fmt.Errorf("until: %w", err)
		}
	}
	return sel, nil
}

// query is the filter as the page's query string.
func (f letterFilter) query() string {
	q := url.Values{}
	for k, v := range map[string]string{"dest": f.Dest, "reason": f.Reason, "status": f.Status, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

func parseWhen(v string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (2026-01-02T15:04, UTC)", v)
}

type lettersData struct {
	Filter    letterFilter
	Letters   []client.DeadLetter
	NextAfter uint64
	Query     string // the filter, for the next page's link
	Error     string
	// Confirm is set when a replay or purge waits for confirmation.
	Confirm *confirmation
	Replay  *client.ReplayResult
	Purge   *client.PurgeResult
}

type confirmation struct {
	Action  string // replay or purge
	Matched int
	Seqs    []uint64
	All     bool
}

// lettersData reads the page of dead letters f selects, after sequence
// after. A filter the API refuses is shown on the page, not as a failure.
func (u *UI) lettersData(r *http.Request, usr user, f letterFilter, after uint64) (lettersData, error) {
	d := lettersData{Filter: f, Query: f.query()}
	sel, err := f.selection()
	if err != nil {
		d.Error = err.Error()
		return d, nil
	}
	p, err := u.apiFor(r, usr.key).DeadLetters(r.Context(), client.DeadLetterQuery{
		Dest: sel.Dest, Reason: sel.Reason, Status: sel.Status, Since: sel.Since, Until: sel.Until, Limit: 100, After: after})
	if st := statusOf(err); st == http.StatusBadRequest || st == http.StatusUnprocessableEntity || st == http.StatusNotFound {
		d.Error = err.Error()
		return d, nil
	}
	if err != nil {
		return d, err
	}
	d.Letters, d.NextAfter = p.DeadLetters, p.NextAfter
	return d, nil
}

func (u *UI) letters(w http.ResponseWriter, r *http.Request, usr user) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	d, err := u.lettersData(r, usr, filterOf(r.URL.Query()), after)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	u.render(w, r, http.StatusOK, "dead-letters", usr, d)
}

// letterAction replays or purges dead letters: the ones selected, or all
// that match the filter. The first request is a dry run whose count the
// page shows with a button to confirm; the confirmed one acts.
func (u *UI) letterAction(w http.ResponseWriter, r *http.Request, usr user) {
	action := r.PathValue("action")
	if action != "replay" && action != "purge" {
		http.Error(w, "no such action: "+action, http.StatusNotFound)
		return
	}
	_ = r.ParseForm()
	f := filterOf(r.PostForm)
	d, err := u.lettersData(r, usr, f, 0)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	refuse := func(msg string) {
		d.Error = msg
		u.render(w, r, http.StatusOK, "dead-letters", usr, d)
	}
	var sel client.LetterSelection
	all := r.PostFormValue("all") == "1"
	var seqs []uint64
	for _, v := range r.PostForm["seq"] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			refuse(fmt.Sprintf("%q is not a dead letter's sequence", v))
			return
		}
		seqs = append(seqs, n)
	}
	switch {
	case all:
		if sel, err = f.selection(); err != nil {
			refuse(err.Error())
			return
		}
		sel.All = true
	case len(seqs) > 0:
		sel.Seqs = seqs
	default:
		refuse("Select dead letters first, or choose all that match the filter.")
		return
	}
	confirmed := r.PostFormValue("confirm") == "1"
	sel.DryRun = !confirmed
	api := u.apiFor(r, usr.key)
	matched := 0
	if action == "replay" {
		res, err := api.ReplayDeadLetters(r.Context(), client.ReplaySelection{LetterSelection: sel})
		if err != nil {
			u.fail(w, r, usr, err)
			return
		}
		matched, d.Replay = res.Matched, &res
	} else {
		res, err := api.PurgeDeadLetters(r.Context(), sel)
		if err != nil {
			u.fail(w, r, usr, err)
			return
		}
		matched, d.Purge = res.Matched, &res
	}
	if !confirmed {
		d.Replay, d.Purge = nil, nil
		d.Confirm = &confirmation{Action: action, Matched: matched, Seqs: seqs, All: all}
		u.render(w, r, http.StatusOK, "dead-letters", usr, d)
		return
	}
	// The list after the change, with what was done.
	fresh, err := u.lettersData(r, usr, f, 0)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	fresh.Replay, fresh.Purge = d.Replay, d.Purge
	u.render(w, r, http.StatusOK, "dead-letters", usr, fresh)
}

func (u *UI) letter(w http.ResponseWriter, r *http.Request, usr user) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		u.render(w, r, http.StatusNotFound, "error", usr, map[string]any{"Status": 404, "Error": fmt.Sprintf("%q is not a dead letter's sequence", r.PathValue("seq"))})
		return
	}
	l, err := u.apiFor(r, usr.key).DeadLetter(r.Context(), seq)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	body := viewBody(l.BodyJSON, l.BodyBase64, "")
	if l.BodyUnavailable == "" {
		body.Download = fmt.Sprintf("/ui/dead-letters/%d/body", seq)
	}
	u.render(w, r, http.StatusOK, "dead-letter", usr, map[string]any{"Letter": l, "Body": body})
}

// letterBody is a dead letter's body as a download.
func (u *UI) letterBody(w http.ResponseWriter, r *http.Request, usr user) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		u.render(w, r, http.StatusNotFound, "error", usr, map[string]any{"Status": 404, "Error": fmt.Sprintf("%q is not a dead letter's sequence", r.PathValue("seq"))})
		return
	}
	b, err := u.apiFor(r, usr.key).DeadLetterBody(r.Context(), seq)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	download(w, fmt.Sprintf("dead-letter-%d.body", seq), b)
}

// eventBody is an event's body as a download.
func (u *UI) eventBody(w http.ResponseWriter, r *http.Request, usr user) {
	id := r.URL.Query().Get("id")
	b, err := u.apiFor(r, usr.key).EventBody(r.Context(), id)
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	download(w, "event-"+fileSafe(id)+".body", b)
}

// download answers b, a body as it was published, as a file to save: typed
// application/octet-stream whatever it holds, so that a browser never
// renders it as a page of the dashboard's origin, nor sniffs it.
func download(w http.ResponseWriter, name string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
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

func (u *UI) eventPage(w http.ResponseWriter, r *http.Request, usr user) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	data := map[string]any{"ID": id}
	if id != "" {
		ev, err := u.apiFor(r, usr.key).Event(r.Context(), id)
		switch st := statusOf(err); {
		case err == nil:
			data["Event"] = ev
			body := viewBody(ev.BodyJSON, ev.BodyBase64, ev.BodyText)
			body.Download = "/ui/events/body?" + url.Values{"id": {id}}.Encode()
			data["Body"] = body
		case st == http.StatusNotFound || st == http.StatusBadRequest:
			var e *client.Error
			errors.As(err, &e)
			data["Error"] = e.Detail
		default:
			u.fail(w, r, usr, err)
			return
		}
	}
	u.render(w, r, http.StatusOK, "event", usr, data)
}

func (u *UI) sendPage(w http.ResponseWriter, r *http.Request, usr user) {
	ds, err := u.apiFor(r, usr.key).Destinations(r.Context())
	if err != nil && statusOf(err) != http.StatusForbidden {
		u.fail(w, r, usr, err)
		return
	}
	u.render(w, r, http.StatusOK, "send", usr, map[string]any{"Dests": ds, "Data": "{\n  \"test\": true\n}"})
}

// send publishes a test event through the API.
func (u *UI) send(w http.ResponseWriter, r *http.Request, usr user) {
	to, target := r.PostFormValue("to"), strings.TrimSpace(r.PostFormValue("target"))
	data := strings.TrimSpace(r.PostFormValue("data"))
	form := map[string]any{"To": to, "Target": target, "Data": data, "Key": r.PostFormValue("key")}
	ev := client.NewEvent{Key: strings.TrimSpace(r.PostFormValue("key"))}
	if to == "type" {
		ev.Type = target
	} else {
		ev.Dest = target
	}
	if !json.Valid([]byte(data)) {
		form["Error"] = "The body must be JSON (it is sent as the event's data)."
		u.render(w, r, http.StatusOK, "send", usr, form)
		return
	}
	ev.Data = json.RawMessage(data)
	res, err := u.apiFor(r, usr.key).Publish(r.Context(), ev)
	if st := statusOf(err); st != 0 && st < 500 {
		form["Error"] = err.Error()
		u.render(w, r, http.StatusOK, "send", usr, form)
		return
	}
	if err != nil {
		u.fail(w, r, usr, err)
		return
	}
	form["Sent"] = res
	u.render(w, r, http.StatusOK, "send", usr, form)
}
