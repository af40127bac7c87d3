package api

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/tenant"

	"github.com/relaydev/relay/stream"
)

// destView is a destination as the API shows it: every setting, never a
// secret or a configured header's value (their names only), URLs redacted
// as 'relay dest list' shows them. Its body template's text (which may
// embed a credential) to admin keys only; every key sees its size and
// digest.
type destView struct {
	Name string `json:"name"`
	// Tenant is the tenant the destination belongs to; omitted for none.
	Tenant string `json:"tenant,omitempty"`
	// Kind is the system it delivers to (http, nats, kafka...); Config
	// its kind's configuration but the credentials, whose names alone
	// CredentialNames lists.
	Kind                string            `json:"kind"`
	Config              map[string]string `json:"config,omitempty"`
	CredentialNames     []string          `json:"credential_names,omitempty"`
	URL                 string            `json:"url"`
	URLs                []string          `json:"urls"`
	URLStrategy         string            `json:"url_strategy"`
	Signed              bool              `json:"signed"`
	PreviousSecretUntil *time.Time        `json:"previous_secret_until,omitempty"`
	// Signature is how deliveries are signed: hmac, ed25519 or both.
	Signature string `json:"signature"`
	// PublicKeys verify its v1a signatures: the current key, then the
	// previous one during a rotation's overlap (with until).
	PublicKeys         []publicKeyView `json:"public_keys,omitempty"`
	HeaderNames        []string        `json:"header_names"`
	Timeout            string          `json:"timeout"`
	MaxAttempts        int             `json:"max_attempts"`
	BackoffBase        string          `json:"backoff_base"`
	BackoffMax         string          `json:"backoff_max"`
	Jitter             float64         `json:"jitter"`
	Concurrency        int             `json:"concurrency"`
	RateLimit          float64         `json:"rate_limit"`
	BreakerThreshold   int             `json:"breaker_threshold"`
	BreakerPause       string          `json:"breaker_pause"`
	OnGone             string          `json:"on_gone"`
	Ordered            bool            `json:"ordered"`
	Partitions         int             `json:"partitions,omitempty"`
	OnFailure          string          `json:"on_failure,omitempty"`
	Shared             bool            `json:"shared"`
	Types              []string        `json:"types"`
	Filter             string          `json:"filter,omitempty"`
	BodyTemplate       string          `json:"body_template,omitempty"`
	BodyTemplateBytes  int             `json:"body_template_bytes,omitempty"`
	BodyTemplateSHA256 string          `json:"body_template_sha256,omitempty"`
	BodyContentType    string          `json:"body_content_type,omitempty"`
	State              string          `json:"state"`
	PausedUntil        *time.Time      `json:"paused_until,omitempty"`
	Created            time.Time       `json:"created"`
	Updated            time.Time       `json:"updated"`
	// Secret is the signing secret relay generated, in the answer that
	// created it only (create, rotate-secret).
	Secret string `json:"secret,omitempty"`
}

// viewOf is d as the API shows it; admin: to an admin key, with its body
// template's text.
// publicKeyView is a public key of a destination's, as the API shows it.
type publicKeyView struct {
	Key   string     `json:"key"`
	Kid   string     `json:"kid"`
	Until *time.Time `json:"until,omitempty"`
}

func viewOf(d destination.Destination, now time.Time, admin bool) destView {
	d = d.WithDefaults()
	r := d.Redacted()
	v := destView{
		Name: d.ShortName(), Tenant: d.Tenant(), Kind: d.KindName(), Config: d.Config, URL: r.URL, URLs: r.Pool(), URLStrategy: d.URLStrategy, Signed: d.SignsHMAC() && d.Secret != "" || d.SignsEd25519(), Signature: d.Signature,
		HeaderNames: []string{}, Timeout: time.Duration(d.Timeout).String(),
		MaxAttempts: d.Retry.MaxAttempts, BackoffBase: time.Duration(d.Retry.Base).String(), BackoffMax: time.Duration(d.Retry.Max).String(), Jitter: d.Retry.Jitter,
		Concurrency: d.Concurrency, RateLimit: d.RateLimit, BreakerThreshold: d.BreakerThreshold, BreakerPause: time.Duration(d.BreakerPause).String(),
		OnGone: d.OnGone, Ordered: d.Ordered, Partitions: d.Partitions, OnFailure: d.OnFailure, Shared: d.Shared,
		Types: append([]string{}, d.Types...), Filter: d.Filter,
		BodyContentType: d.BodyContentType, State: d.State(now), Created: d.Created, Updated: d.Updated,
	}
	if n, sum := d.BodyTemplateSum(); n > 0 {
		v.BodyTemplateBytes, v.BodyTemplateSHA256 = n, sum
		if admin {
			v.BodyTemplate = d.BodyTemplate
		}
	}
	if d.PrevSecret != "" && now.Before(d.PrevSecretUntil) && d.SignsHMAC() {
		v.PreviousSecretUntil = &d.PrevSecretUntil
	}
	for _, pk := range d.PublicKeys(now) {
		pv := publicKeyView{Key: pk.Key, Kid: pk.ID}
		if !pk.Until.IsZero() {
			pv.Until = &pk.Until
		}
		v.PublicKeys = append(v.PublicKeys, pv)
	}
	for k := range d.Headers {
		v.HeaderNames = append(v.HeaderNames, k)
	}
	slices.Sort(v.HeaderNames)
	for k := range d.Credentials {
		v.CredentialNames = append(v.CredentialNames, k)
	}
	slices.Sort(v.CredentialNames)
	if !d.IsHTTP() {
		v.URLs = []string{}
	}
	if now.Before(d.PausedUntil) && !d.PausedUntil.Equal(destination.Forever) {
		v.PausedUntil = &d.PausedUntil
	}
	return v
}

// PortalMaxDestinations bounds the destinations of a tenant without
// limits.max_destinations that its customers add from the portal.
const PortalMaxDestinations = 25

// portalField is the first field of b that a customer portal's session
// may not set ("" when none): a customer sets an endpoint's URL, event
// types and filter; its delivery settings, headers, template and secret
// are the sender's.
func (b destChange) portalField() string {
	v := reflect.ValueOf(b)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "name", "url", "types", "filter", "kind", "config":
			continue
		}
		if !v.Field(i).IsZero() {
			return name
		}
	}
	return ""
}

// portalAllows answers 403 and returns false when the request is a
// portal session's that sets a field it may not.
func portalAllows(c *call, b destChange) bool {
	if c.key.Session == "" {
		return true
	}
	if f := b.portalField(); f != "" {
		c.problem(http.StatusForbidden, f, f+": a customer portal session sets an endpoint's url (or kind and config), types and filter only")
		return false
	}
	return true
}

// destChange is the body of POST /v1/destinations (with a name) and of
// PATCH /v1/destinations/{name} (without): the settings of 'relay dest add'
// and 'update', named as their flags with '_' for '-'. A field left out is
// not given.
type destChange struct {
	Name string `json:"name"` // POST only
	// Kind and Config: a destination of another kind than HTTP, and its
	// configuration, credentials included ("" removes a field).
	Kind             *string            `json:"kind"`
	Config           map[string]string  `json:"config"`
	URL              *string            `json:"url"`
	URLs             []string           `json:"urls"`
	URLStrategy      *string            `json:"url_strategy"`
	Secret           *string            `json:"secret"`
	NoSecret         bool               `json:"no_secret"`
	Signature        *string            `json:"signature"`
	SigningKey       *string            `json:"signing_key"`
	Headers          *map[string]string `json:"headers"`
	Timeout          *string            `json:"timeout"`
	MaxAttempts      *int               `json:"max_attempts"`
	BackoffBase      *string            `json:"backoff_base"`
	BackoffMax       *string            `json:"backoff_max"`
	Jitter           *float64           `json:"jitter"`
	Concurrency      *int               `json:"concurrency"`
	RateLimit        *float64           `json:"rate_limit"`
	BreakerThreshold *int               `json:"breaker_threshold"`
	BreakerPause     *string            `json:"breaker_pause"`
	OnGone           *string            `json:"on_gone"`
	Ordered          *bool              `json:"ordered"`
	Shared           *bool              `json:"shared"`
	Partitions       *int               `json:"partitions"`
	OnFailure        *string            `json:"on_failure"`
	Types            *[]string          `json:"types"`
	Filter           *string            `json:"filter"`
	BodyTemplate     *string            `json:"body_template"`
	BodyContentType  *string            `json:"body_content_type"`
}

// fieldError is a request field that is wrong.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.err.Error() }

// settings are c as relay takes them.
func (c destChange) settings() (destination.Settings, error) {
	s := destination.Settings{
		URLStrategy: c.URLStrategy, Headers: c.Headers, MaxAttempts: c.MaxAttempts, Jitter: c.Jitter,
		Concurrency: c.Concurrency, RateLimit: c.RateLimit, BreakerThreshold: c.BreakerThreshold, OnGone: c.OnGone,
		Ordered: c.Ordered, Shared: c.Shared, Partitions: c.Partitions, OnFailure: c.OnFailure, Types: c.Types, Filter: c.Filter,
		BodyTemplate: c.BodyTemplate, BodyContentType: c.BodyContentType, Signature: c.Signature, SigningKey: c.SigningKey,
		Kind: c.Kind, Config: c.Config,
	}
	switch {
	case c.URL != nil && c.URLs != nil:
		return s, &fieldError{"urls", errors.New("give url (one URL) or urls (a pool), not both")}
	case c.URL != nil:
		s.URLs = []string{*c.URL}
	case c.URLs != nil:
		if len(c.URLs) == 0 {
			return s, &fieldError{"urls", errors.New("urls holds one URL or more")}
		}
		s.URLs = c.URLs
	}
	switch {
	case c.Secret != nil && c.NoSecret:
		return s, &fieldError{"no_secret", errors.New("secret and no_secret exclude each other")}
	case c.Secret != nil && *c.Secret == "":
		return s, &fieldError{"secret", errors.New(`secret is "": give no_secret: true for unsigned deliveries, or leave secret out to have one generated`)}
	case c.NoSecret:
		s.Secret = new("")
	default:
		s.Secret = c.Secret
	}
	for _, d := range []struct {
		field string
		v     *string
		dst   **time.Duration
	}{{"timeout", c.Timeout, &s.Timeout}, {"backoff_base", c.BackoffBase, &s.BackoffBase}, {"backoff_max", c.BackoffMax, &s.BackoffMax}, {"breaker_pause", c.BreakerPause, &s.BreakerPause}} {
		if d.v == nil {
			continue
		}
		v, err := time.ParseDuration(*d.v)
		if err != nil {
			return s, &fieldError{d.field, fmt.Errorf("%s %q: give a duration such as 30s, 1m30s or 2h", d.field, *d.v)}
		}
		*d.dst = &v
	}
	return s, s.Validate()
}

// fieldOf is the request field of a destination setting as relay names it
// (its flag's name).
func fieldOf(c *destChange) func(setting string) string {
	return func(setting string) string {
		switch setting {
		case "header":
			return "headers"
		case "type":
			return "types"
		case "url":
			if c != nil && c.URLs != nil {
				return "urls"
			}
			return "url"
		}
		return strings.ReplaceAll(setting, "-", "_")
	}
}

// destProblem answers err, from a change of a destination whose body was
// c (nil: none).
func destProblem(w http.ResponseWriter, c *destChange, err error) {
	var (
		fe *fieldError
		ke *kind.FieldError
		se *destination.SettingError
		be *destination.BlockedURLError
		pe *destination.PendingError
	)
	switch {
	case errors.As(err, &fe):
		problem(w, http.StatusUnprocessableEntity, fe.field, fe.Error())
	case errors.Is(err, destination.ErrSealed):
		problem(w, http.StatusServiceUnavailable, "", "cannot change the destination: "+err.Error())
	case errors.As(err, &ke):
		problem(w, http.StatusUnprocessableEntity, "config."+ke.Field, ke.Error())
	case errors.As(err, &se):
		problem(w, http.StatusUnprocessableEntity, fieldOf(c)(se.Setting), se.Text(fieldOf(c)))
	case errors.As(err, &be):
		problem(w, http.StatusUnprocessableEntity, fieldOf(c)("url"), be.Error())
	case errors.Is(err, destination.ErrNotFound):
		problem(w, http.StatusNotFound, "", err.Error())
	case errors.Is(err, destination.ErrExists):
		problem(w, http.StatusConflict, "name", err.Error())
	case errors.Is(err, destination.ErrLayoutFixed):
		field := ""
		switch {
		case c == nil:
		case c.Ordered != nil:
			field = "ordered"
		case c.Shared != nil:
			field = "shared"
		case c.Partitions != nil:
			field = "partitions"
		}
		problem(w, http.StatusConflict, field, err.Error())
	case errors.As(err, &pe):
		problem(w, http.StatusConflict, "", fmt.Sprintf("destination %s still has %d undelivered events; they stay in the event log but will not be delivered: add ?force=true to remove it anyway", pe.Dest, pe.Pending))
	case errors.Is(err, destination.ErrNoConsumerRoom), errors.Is(err, destination.ErrWouldStoreInClear):
		problem(w, http.StatusConflict, "", err.Error())
	default:
		problem(w, http.StatusServiceUnavailable, "", "cannot reach relay's destinations now: "+err.Error())
	}
}

// dests is the destination store, or false after answering 503.
func (s *Server) dests(w http.ResponseWriter) (*destination.Store, bool) {
	if s.cfg.Dests == nil {
		problem(w, http.StatusServiceUnavailable, "", "this server does not serve destinations (no store configured)")
		return nil, false
	}
	return s.cfg.Dests, true
}

func (s *Server) listDests(c *call) {
	ds, err := c.dests.List(c.within(30 * time.Second))
	if err != nil {
		destProblem(c.w, nil, err)
		return
	}
	now := time.Now()
	out := []destView{}
	for _, d := range ds {
		if c.all || d.Tenant() == c.scope {
			out = append(out, viewOf(d, now, c.admin()))
		}
	}
	c.json(http.StatusOK, map[string]any{"destinations": out})
}

func (s *Server) getDest(c *call) {
	d, err := c.dests.Get(c.within(30*time.Second), c.name)
	if err != nil {
		destProblem(c.w, nil, err)
		return
	}
	c.json(http.StatusOK, viewOf(d, time.Now(), c.admin()))
}

// createDest adds a destination as 'relay dest add' does: the same
// defaults, checks and generated secret (answered once).
func (s *Server) createDest(c *call) {
	var body destChange
	if !s.readJSON(c.w, c.r, &body) || !portalAllows(c, body) {
		return
	}
	if err := stream.ValidateDestName(body.Name); err != nil {
		c.problem(http.StatusUnprocessableEntity, "name", err.Error())
		return
	}
	if body.URL == nil && body.URLs == nil && (body.Kind == nil || *body.Kind == kind.HTTP || *body.Kind == "") {
		c.problem(http.StatusUnprocessableEntity, "url", "url is required: the http(s) URL that receives a POST per attempt (or urls, a pool)")
		return
	}
	set, err := body.settings()
	if err != nil {
		destProblem(c.w, &body, err)
		return
	}
	ctx := c.within(30 * time.Second)
	if c.scope != "" && s.cfg.Tenants != nil {
		t, err := s.cfg.Tenants.Get(ctx, c.scope)
		if err != nil {
			tenantProblem(c, err)
			return
		}
		if !s.roomForDest(c, t) {
			return
		}
		t.Defaults.Fill(&set) // what the tenant's destinations take by default
	}
	d, generated, err := set.NewDestination(stream.DestRef(c.scope, body.Name))
	if err != nil {
		destProblem(c.w, &body, err)
		return
	}
	if d.IsHTTP() { // another kind's addresses are checked as its publisher connects
		if err := destination.CheckPool(ctx, s.cfg.JS, d.Pool()); err != nil {
			destProblem(c.w, &body, err)
			return
		}
	}
	if d, err = c.dests.Add(ctx, d); err != nil {
		destProblem(c.w, &body, err)
		return
	}
	if c.scope != "" && s.cfg.Tenants != nil {
		// A tenant deleted meanwhile keeps no destination.
		if _, err := s.cfg.Tenants.Get(ctx, c.scope); errors.Is(err, tenant.ErrNotFound) {
			_ = c.dests.RemoveIdle(ctx, d.Name, true)
			c.problem(http.StatusNotFound, "", err.Error())
			return
		}
	}
	v := viewOf(d, time.Now(), c.admin())
	if generated {
		v.Secret = d.Secret
	}
	loc := "/v1/destinations/" + d.ShortName()
	if c.scope != "" {
		loc = TenantPath(c.scope, "/destinations/"+d.ShortName())
	}
	c.w.Header().Set("Location", loc)
	s.jwks.forget() // its keys may have changed: this replica serves the change at once
	c.json(http.StatusCreated, v)
}

// roomForDest reports whether tenant t may have one more destination, or
// answers 409 and returns false.
func (s *Server) roomForDest(c *call, t tenant.Tenant) bool {
	max := t.Limits.MaxDestinations
	if max <= 0 && c.key.Session != "" {
		// A customer adds endpoints from the portal: bounded, since each
		// takes room in the stream's consumers, which all tenants share.
		max = PortalMaxDestinations
	}
	if max <= 0 {
		return true
	}
	ds, err := c.dests.List(c.within(30 * time.Second))
	if err != nil {
		destProblem(c.w, nil, err)
		return false
	}
	n := 0
	for _, d := range ds {
		if d.Tenant() == t.ID {
			n++
		}
	}
	if n >= max && c.key.Session != "" {
		c.problem(http.StatusConflict, "", fmt.Sprintf("you have %d endpoints, the most you may have", n))
		return false
	}
	if n >= max {
		c.problem(http.StatusConflict, "", fmt.Sprintf("tenant %s has %d destinations, its limit (limits.max_destinations %d): remove one, or raise the limit", t.ID, n, max))
		return false
	}
	return true
}

// updateDest changes the settings given, as 'relay dest update' does.
func (s *Server) updateDest(c *call) {
	var body destChange
	if !s.readJSON(c.w, c.r, &body) || !portalAllows(c, body) {
		return
	}
	if body.Name != "" {
		c.problem(http.StatusBadRequest, "name", "a destination's name does not change: add one with the new name, and remove this one once it drained")
		return
	}
	set, err := body.settings()
	if err != nil {
		destProblem(c.w, &body, err)
		return
	}
	ctx := c.within(30 * time.Second)
	if set.URLs != nil {
		if err := destination.CheckPool(ctx, s.cfg.JS, set.URLs); err != nil {
			destProblem(c.w, &body, err)
			return
		}
	}
	var generated string
	d, err := c.dests.Update(ctx, c.name, func(d *destination.Destination) error {
		before := *d
		set.Apply(d)
		generated = set.GeneratedSecret(before, *d)
		return nil
	})
	if err != nil {
		destProblem(c.w, &body, err)
		return
	}
	v := viewOf(d, time.Now(), c.admin())
	v.Secret = generated // a destination back to signing v1: its new secret, once
	s.jwks.forget()      // its keys may have changed: this replica serves the change at once
	c.json(http.StatusOK, v)
}

// removeDest removes a destination as 'relay dest rm' does: refused (409)
// while events wait for its delivery, unless ?force=true.
func (s *Server) removeDest(c *call) {
	force, ok := c.force()
	if !ok {
		return
	}
	if err := c.dests.RemoveIdle(c.within(30*time.Second), c.name, force); err != nil {
		destProblem(c.w, nil, err)
		return
	}
	s.jwks.forget() // its keys may have changed: this replica serves the change at once
	c.w.WriteHeader(http.StatusNoContent)
}

// readOptionalJSON is readJSON for a body that may be left out (empty,
// whatever its content type): false after answering a problem.
func (s *Server) readOptionalJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength == 0 {
		return true
	}
	return s.readJSON(w, r, v)
}

// pauseDest pauses deliveries, until resumed or for the body's "for".
func (s *Server) pauseDest(c *call) {
	var body struct {
		For *string `json:"for"`
	}
	if !s.readOptionalJSON(c.w, c.r, &body) {
		return
	}
	until := destination.Forever
	if body.For != nil {
		d, err := time.ParseDuration(*body.For)
		if err != nil || d <= 0 {
			c.problem(http.StatusUnprocessableEntity, "for", fmt.Sprintf("for %q: give a positive duration such as 10m or 2h, or leave it out to pause until resumed", *body.For))
			return
		}
		until = time.Now().Add(d).UTC()
	}
	d, err := c.dests.Pause(c.within(30*time.Second), c.name, until)
	if err != nil {
		destProblem(c.w, nil, err)
		return
	}
	c.json(http.StatusOK, viewOf(d, time.Now(), c.admin()))
}

// resumeDest resumes a paused, circuit-broken or disabled destination.
func (s *Server) resumeDest(c *call) {
	d, err := c.dests.Resume(c.within(30*time.Second), c.name)
	if err != nil {
		destProblem(c.w, nil, err)
		return
	}
	c.json(http.StatusOK, viewOf(d, time.Now(), c.admin()))
}

// rotateSecret gives a destination a new signing secret, generated (and
// answered, once) unless the body gives one; the old one signs too during
// the overlap (default 24h), as 'relay dest rotate-secret' does.
func (s *Server) rotateSecret(c *call) {
	var body struct {
		Overlap *string `json:"overlap"`
		Secret  string  `json:"secret"`
	}
	if !s.readOptionalJSON(c.w, c.r, &body) {
		return
	}
	overlap := 24 * time.Hour
	if body.Overlap != nil {
		d, err := time.ParseDuration(*body.Overlap)
		if err != nil || d < 0 {
			c.problem(http.StatusUnprocessableEntity, "overlap", fmt.Sprintf("overlap %q: give a duration such as 24h, or 0s to stop signing with the old secret at once", *body.Overlap))
			return
		}
		overlap = d
	}
	d, err := c.dests.RotateSecret(c.within(30*time.Second), c.name, body.Secret, overlap)
	if err != nil {
		destProblem(c.w, nil, err)
		return
	}
	v := viewOf(d, time.Now(), c.admin())
	if body.Secret == "" && d.SignsHMAC() {
		v.Secret = d.Secret // generated: answered once
	}
	s.jwks.forget() // its keys may have changed: this replica serves the change at once
	c.json(http.StatusOK, v)
}
