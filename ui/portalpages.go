package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/relaydev/relay/api/client"
	"github.com/relaydev/relay/kind"
)

// endpointForm is the form that adds or edits an endpoint, as filled in.
type endpointForm struct {
	Name, URL, Filter string
	Types             []string
	// Kind is the kind of endpoint ("" or http: a URL), and Config the
	// fields of its configuration filled in (credentials are never sent
	// back to the page: Value leaves them out).
	Kind   string
	Config map[string]string
}

func endpointFormOf(r *http.Request) endpointForm {
	f := endpointForm{Name: strings.TrimSpace(r.PostFormValue("name")), URL: strings.TrimSpace(r.PostFormValue("url")),
		Filter: strings.TrimSpace(r.PostFormValue("filter")), Kind: r.PostFormValue("kind")}
	if f.Kind != "" && f.Kind != kind.HTTP {
		// Only the chosen kind's fields: config.KIND.FIELD.
		prefix := "config." + f.Kind + "."
		for k, vs := range r.PostForm {
			if name, ok := strings.CutPrefix(k, prefix); ok && len(vs) > 0 && strings.TrimSpace(vs[0]) != "" {
				if f.Config == nil {
					f.Config = map[string]string{}
				}
				f.Config[name] = strings.TrimSpace(vs[0])
			}
		}
	}
	for _, t := range r.PostForm["type"] {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(f.Types, t) {
			f.Types = append(f.Types, t)
		}
	}
	return f
}

// Has reports whether the form subscribes to type t.
func (f endpointForm) Has(t string) bool { return slices.Contains(f.Types, t) }

// IsKind reports whether the form is for an endpoint of kind k (http when
// it says none).
func (f endpointForm) IsKind(k string) bool {
	if f.Kind == "" {
		return k == kind.HTTP
	}
	return f.Kind == k
}

// Value is what the form shows in field name of kind k: what was typed,
// but never a credential.
func (f endpointForm) Value(k string, field client.KindField) string {
	if f.Kind != k || field.Sensitive {
		return ""
	}
	return f.Config[field.Name]
}

// endpointRow is an endpoint's line of the list.
type endpointRow struct {
	client.Destination
	Health      string
	DeadLetters uint64
}

type endpointsData struct {
	Rows []endpointRow
	// Egress are the addresses deliveries come from, for the customer's
	// allowlist (none declared: not shown).
	Egress []string
	Types  []client.EventType
	// Kinds are the kinds of endpoint the relay delivers to (HTTP first).
	Kinds  []client.DestinationType
	Form   endpointForm
	Error  string
	Notice string
}

// catalog is the event-type catalog, for the forms (none when it cannot be
// read: the forms take typed patterns too).
func (p *Portal) catalog(r *http.Request, v *visitor) []client.EventType {
	ts, err := p.api(r, v).EventTypes(r.Context())
	if err != nil {
		p.cfg.Logger.Warn("portal: cannot read the event-type catalog", "err", err)
		return nil
	}
	return ts
}

func (p *Portal) endpointsOf(r *http.Request, v *visitor) (endpointsData, error) {
	api := p.api(r, v)
	ds, err := api.Destinations(r.Context())
	if err != nil {
		return endpointsData{}, err
	}
	stats, err := api.Stats(r.Context())
	if err != nil {
		return endpointsData{}, err
	}
	d := endpointsData{Types: p.catalog(r, v)}
	if d.Egress, err = api.Egress(r.Context()); err != nil {
		p.cfg.Logger.Warn("portal: cannot read the egress addresses", "err", err)
	}
	if d.Kinds, err = api.DestinationTypes(r.Context()); err != nil {
		p.cfg.Logger.Warn("portal: cannot read the kinds of destination", "err", err)
	}
	for _, dest := range ds {
		row := endpointRow{Destination: dest, Health: dest.State}
		for _, s := range stats {
			if s.Dest == dest.Name {
				row.Health, row.DeadLetters = health(s), s.DeadLetters
			}
		}
		d.Rows = append(d.Rows, row)
	}
	return d, nil
}

func (p *Portal) endpoints(w http.ResponseWriter, r *http.Request, v *visitor) {
	d, err := p.endpointsOf(r, v)
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	p.render(w, r, http.StatusOK, "endpoints", v, d)
}

// explain is what the API refused of a form, for the customer: the
// address guard's refusal says what it checks, not how an operator would
// lift it.
func explain(err error) string {
	var e *client.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	if e.Field == "url" || e.Field == "urls" {
		if before, _, ok := strings.Cut(e.Detail, ", and the relays may reach"); ok && strings.Contains(before, "non-public address") {
			return before + ". Webhooks are delivered to public internet addresses only: a name that resolves to a private, loopback, link-local or otherwise reserved address is refused, here and again at every delivery."
		}
	}
	if e.Field != "" && !strings.HasPrefix(e.Field, "config.") { // a config field's detail names it
		return e.Field + ": " + e.Detail
	}
	return e.Detail
}

// addEndpoint adds an endpoint through the API; its secret is shown once.
func (p *Portal) addEndpoint(w http.ResponseWriter, r *http.Request, v *visitor) {
	if !p.may(w, r, v, "manage_endpoints") {
		return
	}
	f := endpointFormOf(r)
	nd := client.NewDestination{Name: f.Name, DestinationSettings: client.DestinationSettings{URL: &f.URL, Types: f.Types}}
	if !f.IsKind(kind.HTTP) {
		nd.URL, nd.Kind, nd.Config = nil, &f.Kind, f.Config
	}
	if f.Filter != "" {
		nd.Filter = &f.Filter
	}
	dest, err := p.api(r, v).CreateDestination(r.Context(), nd)
	if st := statusOf(err); st >= 400 && st < 500 && st != http.StatusUnauthorized {
		d, lerr := p.endpointsOf(r, v)
		if lerr != nil {
			p.fail(w, r, v, lerr)
			return
		}
		d.Form, d.Error = f, explain(err)
		p.render(w, r, http.StatusOK, "endpoints", v, d)
		return
	}
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	p.showEndpoint(w, r, v, dest.Name, func(d *endpointData) {
		d.Notice = "Endpoint added."
		d.Secret = dest.Secret
	})
}

type endpointData struct {
	Dest        client.Destination
	Stats       *client.DestStats
	Health      string
	Attempts    []client.AttemptRecord
	Types       []client.EventType
	Form        endpointForm
	Notice      string
	Error       string
	Secret      string // shown once: generated, revealed or rotated
	TestType    string
	TestData    string
	Sent        *client.Published
	Filter      *client.FilterResult
	FilterError string
}

func (p *Portal) endpointOf(r *http.Request, v *visitor, name string) (endpointData, error) {
	api := p.api(r, v)
	var d endpointData
	var err error
	if d.Dest, err = api.Destination(r.Context(), name); err != nil {
		return d, err
	}
	stats, err := api.Stats(r.Context())
	if err != nil {
		return d, err
	}
	for i := range stats {
		if stats[i].Dest == name {
			d.Stats = &stats[i]
			d.Health = health(stats[i])
		}
	}
	page, err := api.Attempts(r.Context(), client.AttemptQuery{Dest: name, Limit: 10})
	if err != nil {
		return d, err
	}
	d.Attempts = page.Attempts
	d.Types = p.catalog(r, v)
	d.Form = endpointForm{Name: d.Dest.Name, URL: d.Dest.URL, Filter: d.Dest.Filter, Types: d.Dest.Types}
	d.TestType, d.TestData = exampleOf(d.Types, d.Dest.Types, "")
	return d, nil
}

// exampleOf is the type and example body a test event or a filter test
// starts from: type want's, else the first subscribed type's in the
// catalog, else a body of its own.
func exampleOf(catalog []client.EventType, subscribed []string, want string) (string, string) {
	pick := func(t client.EventType) (string, string) {
		if len(t.Example) == 0 {
			return t.Type, "{\n  \"test\": true\n}"
		}
		return t.Type, indent(t.Example)
	}
	for _, t := range catalog {
		if want != "" && t.Type == want {
			return pick(t)
		}
	}
	if want == "" {
		for _, t := range catalog {
			if slices.Contains(subscribed, t.Type) {
				return pick(t)
			}
		}
	}
	return want, "{\n  \"test\": true\n}"
}

// indent is raw indented, for people: < as <, not \u003c (the page
// escapes what it shows).
func indent(raw json.RawMessage) string {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return string(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

func (p *Portal) endpoint(w http.ResponseWriter, r *http.Request, v *visitor) {
	p.showEndpoint(w, r, v, r.PathValue("name"), nil)
}

// showEndpoint renders endpoint name's page, with what set adds.
func (p *Portal) showEndpoint(w http.ResponseWriter, r *http.Request, v *visitor, name string, set func(*endpointData)) {
	d, err := p.endpointOf(r, v, name)
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	if set != nil {
		set(&d)
	}
	p.render(w, r, http.StatusOK, "endpoint", v, d)
}

// may reports whether the session has capability c, or answers 403 (the
// API would refuse too: this says so before anything is read).
func (p *Portal) may(w http.ResponseWriter, r *http.Request, v *visitor, c string) bool {
	if v.Can(c) {
		return true
	}
	p.fail(w, r, v, &client.Error{Status: http.StatusForbidden, Detail: "This session may not do this: it needs the " + c + " capability (ask for a link that has it)."})
	return false
}

// actionNeeds are the capabilities of the endpoint page's actions.
var actionNeeds = map[string]string{
	"update": "manage_endpoints", "pause": "manage_endpoints", "resume": "manage_endpoints", "test": "manage_endpoints",
	"reveal-secret": "view_secret", "rotate-secret": "rotate_secret",
}

// endpointAction changes an endpoint, through the API: update, pause,
// resume, reveal-secret, rotate-secret, or test (a test event).
func (p *Portal) endpointAction(w http.ResponseWriter, r *http.Request, v *visitor) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if c, ok := actionNeeds[action]; ok && !p.may(w, r, v, c) {
		return
	}
	api := p.api(r, v)
	ctx := r.Context()
	var set func(*endpointData)
	var err error
	switch action {
	case "update":
		f := endpointFormOf(r)
		change := client.DestinationSettings{Filter: &f.Filter, Types: f.Types}
		if change.Types == nil {
			change.Types = []string{}
		}
		// The form shows the URL with its credentials masked (and a pool's
		// first URL): sent back unchanged, it would replace the real one.
		was, gerr := api.Destination(ctx, name)
		if gerr != nil {
			p.fail(w, r, v, gerr)
			return
		}
		if f.URL != was.URL {
			change.URL = &f.URL
		}
		_, err = api.UpdateDestination(ctx, name, change)
		set = func(d *endpointData) { d.Notice = "Saved." }
		if st := statusOf(err); st >= 400 && st < 500 && st != http.StatusNotFound && st != http.StatusUnauthorized {
			msg := explain(err)
			p.showEndpoint(w, r, v, name, func(d *endpointData) { d.Form, d.Error = f, msg })
			return
		}
	case "pause":
		_, err = api.PauseDestination(ctx, name)
		set = func(d *endpointData) {
			d.Notice = "Paused: no delivery is attempted until you resume it. Events wait meanwhile."
		}
	case "resume":
		_, err = api.ResumeDestination(ctx, name)
		set = func(d *endpointData) { d.Notice = "Resumed." }
	case "reveal-secret":
		var s client.DestinationSecret
		s, err = api.DestinationSecret(ctx, name)
		set = func(d *endpointData) { d.Secret = s.Secret }
	case "rotate-secret":
		var out client.Destination
		out, err = api.RotateSecret(ctx, name)
		set = func(d *endpointData) {
			switch out.Signature {
			case "ed25519":
				d.Notice = "New signing key: its public key is below, and in your key set. The previous key keeps signing too for 24 hours, so that you can deploy the new public key."
			case "both":
				d.Notice = "New signing secret below, and a new signing key (its public key below). The previous ones keep signing too for 24 hours, so that you can deploy the new ones."
			default:
				d.Notice = "New signing secret below. The previous one keeps signing too for 24 hours, so that you can deploy the new one."
			}
			d.Secret = out.Secret
		}
	case "test":
		typ, data := strings.TrimSpace(r.PostFormValue("type")), strings.TrimSpace(r.PostFormValue("data"))
		if !json.Valid([]byte(data)) {
			p.showEndpoint(w, r, v, name, func(d *endpointData) {
				d.TestType, d.TestData, d.Error = typ, data, "The test event's body must be JSON."
			})
			return
		}
		var res client.Published
		res, err = api.Publish(ctx, client.NewEvent{Dest: name, Data: json.RawMessage(data)})
		set = func(d *endpointData) {
			d.Sent = &res
			d.TestType, d.TestData = typ, data
		}
	default:
		http.Error(w, "no such action: "+action, http.StatusNotFound)
		return
	}
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	p.showEndpoint(w, r, v, name, set)
}

// filterTest tries the form's filter on an example event (the catalog's
// example of the type chosen, or the body given) through the API.
func (p *Portal) filterTest(w http.ResponseWriter, r *http.Request, v *visitor) {
	filter, typ := strings.TrimSpace(r.PostFormValue("filter")), strings.TrimSpace(r.PostFormValue("example_type"))
	data := strings.TrimSpace(r.PostFormValue("example"))
	if typ == "" && len(r.PostForm["type"]) > 0 {
		typ = r.PostForm["type"][0] // the endpoint form's first type
	}
	if data == "" {
		_, data = exampleOf(p.catalog(r, v), nil, typ)
	}
	out := map[string]any{"Filter": filter, "Type": typ, "Example": data}
	switch {
	case filter == "":
		out["Error"] = "Write a filter first: an empty filter delivers every event."
	case !json.Valid([]byte(data)):
		out["Error"] = "The example must be JSON."
	default:
		res, err := p.api(r, v).TestFilter(r.Context(), filter, client.FilterExample{Type: typ, Data: json.RawMessage(data)})
		switch st := statusOf(err); {
		case st == http.StatusUnprocessableEntity:
			var e *client.Error
			errors.As(err, &e)
			out["Error"] = e.Detail
		case err != nil:
			p.fail(w, r, v, err)
			return
		default:
			out["Result"] = res
		}
	}
	p.render(w, r, http.StatusOK, "filter", v, out)
}

// attemptFilter is the attempts page's filter, as its form has it.
type attemptFilter struct {
	Endpoint, Type, Status, Since, Until string
}

func (f attemptFilter) query() string {
	q := url.Values{}
	for k, v := range map[string]string{"endpoint": f.Endpoint, "type": f.Type, "status": f.Status, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

func (p *Portal) attempts(w http.ResponseWriter, r *http.Request, v *visitor) {
	q := r.URL.Query()
	f := attemptFilter{Endpoint: strings.TrimSpace(q.Get("endpoint")), Type: strings.TrimSpace(q.Get("type")), Status: strings.TrimSpace(q.Get("status")),
		Since: strings.TrimSpace(q.Get("since")), Until: strings.TrimSpace(q.Get("until"))}
	d := map[string]any{"Filter": f, "Query": f.query()}
	aq := client.AttemptQuery{Dest: f.Endpoint, Type: f.Type, Status: f.Status, Limit: 50, Cursor: q.Get("cursor")}
	var err error
	if f.Since != "" {
		if aq.Since, err = parseWhen(f.Since); err != nil {
			d["Error"] = "since: " + err.Error()
		}
	}
	if f.Until != "" {
		if aq.Until, err = parseWhen(f.Until); err != nil {
			d["Error"] = "until: " + err.Error()
		}
	}
	api := p.api(r, v)
	if ds, err := api.Destinations(r.Context()); err == nil {
		d["Endpoints"] = ds
	}
	d["Types"] = p.catalog(r, v)
	if d["Error"] == nil {
		page, err := api.Attempts(r.Context(), aq)
		switch st := statusOf(err); {
		case st == http.StatusBadRequest || st == http.StatusNotFound:
			d["Error"] = explain(err)
		case err != nil:
			p.fail(w, r, v, err)
			return
		default:
			d["Attempts"], d["Next"] = page.Attempts, page.Next
		}
	}
	p.render(w, r, http.StatusOK, "attempts", v, d)
}

func (p *Portal) event(w http.ResponseWriter, r *http.Request, v *visitor) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	ev, err := p.api(r, v).Event(r.Context(), id)
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	p.render(w, r, http.StatusOK, "event", v, map[string]any{"Event": ev, "Body": viewBody(ev.BodyJSON, ev.BodyBase64, ev.BodyText)})
}

// portalLetters is the dead-letter page's data.
type portalLetters struct {
	Filter    letterFilter
	Query     string
	Letters   []client.DeadLetter
	NextAfter uint64
	Endpoints []client.Destination
	Error     string
	Confirm   *confirmation
	Replay    *client.ReplayResult
}

func (p *Portal) lettersOf(r *http.Request, v *visitor, f letterFilter, after uint64) (portalLetters, error) {
	d := portalLetters{Filter: f, Query: f.query()}
	api := p.api(r, v)
	if ds, err := api.Destinations(r.Context()); err == nil {
		d.Endpoints = ds
	}
	sel, err := f.selection()
	if err != nil {
		d.Error = err.Error()
		return d, nil
	}
	page, err := api.DeadLetters(r.Context(), client.DeadLetterQuery{Dest: sel.Dest, Reason: sel.Reason, Status: sel.Status, Since: sel.Since, Until: sel.Until, Limit: 50, After: after})
	if st := statusOf(err); st == http.StatusBadRequest || st == http.StatusUnprocessableEntity || st == http.StatusNotFound {
		d.Error = explain(err)
		return d, nil
	}
	if err != nil {
		return d, err
	}
	d.Letters, d.NextAfter = page.DeadLetters, page.NextAfter
	return d, nil
}

// lettersFilterOf is the filter of the form (its endpoint field is the
// dashboard's dest).
func lettersFilterOf(v url.Values) letterFilter {
	f := filterOf(v)
	if e := strings.TrimSpace(v.Get("endpoint")); e != "" {
		f.Dest = e
	}
	return f
}

func (p *Portal) letters(w http.ResponseWriter, r *http.Request, v *visitor) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	d, err := p.lettersOf(r, v, lettersFilterOf(r.URL.Query()), after)
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	p.render(w, r, http.StatusOK, "dead-letters", v, d)
}

// replay replays the dead letters selected, or all that match the filter:
// first a dry run that counts them, then, confirmed, the replay.
func (p *Portal) replay(w http.ResponseWriter, r *http.Request, v *visitor) {
	if !p.may(w, r, v, "replay") {
		return
	}
	_ = r.ParseForm()
	f := lettersFilterOf(r.PostForm)
	d, err := p.lettersOf(r, v, f, 0)
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	var sel client.LetterSelection
	all := r.PostFormValue("all") == "1"
	var seqs []uint64
	for _, s := range r.PostForm["seq"] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			d.Error = fmt.Sprintf("%q is not a dead letter's number", s)
			p.render(w, r, http.StatusOK, "dead-letters", v, d)
			return
		}
		seqs = append(seqs, n)
	}
	switch {
	case all:
		if sel, err = f.selection(); err != nil {
			d.Error = err.Error()
			p.render(w, r, http.StatusOK, "dead-letters", v, d)
			return
		}
		sel.All = true
	case len(seqs) > 0:
		sel.Seqs = seqs
	default:
		d.Error = "Select dead letters first, or choose all that match the filter."
		p.render(w, r, http.StatusOK, "dead-letters", v, d)
		return
	}
	confirmed := r.PostFormValue("confirm") == "1"
	sel.DryRun = !confirmed
	res, err := p.api(r, v).ReplayDeadLetters(r.Context(), client.ReplaySelection{LetterSelection: sel})
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	if !confirmed {
		d.Confirm = &confirmation{Action: "replay", Matched: res.Matched, Seqs: seqs, All: all}
		p.render(w, r, http.StatusOK, "dead-letters", v, d)
		return
	}
	fresh, err := p.lettersOf(r, v, f, 0)
	if err != nil {
		p.fail(w, r, v, err)
		return
	}
	fresh.Replay = &res
	p.render(w, r, http.StatusOK, "dead-letters", v, fresh)
}
