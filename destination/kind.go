package destination

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/relaydev/relay/kind"
)

// IsHTTP reports whether d delivers HTTP POSTs (its Kind is "" or "http").
func (d Destination) IsHTTP() bool { return d.Kind == "" || d.Kind == kind.HTTP }

// normKind is the Kind stored for name: "" for HTTP.
func normKind(name string) string {
	if name == kind.HTTP {
		return ""
	}
	return name
}

// KindName is d's kind's name: "http" for an HTTP destination.
func (d Destination) KindName() string {
	if d.IsHTTP() {
		return kind.HTTP
	}
	return d.Kind
}

// KindConfig is a non-HTTP destination's whole configuration: Config and
// Credentials together, as its kind's publisher takes it.
func (d Destination) KindConfig() kind.Config {
	c := make(kind.Config, len(d.Config)+len(d.Credentials))
	maps.Copy(c, d.Config)
	maps.Copy(c, d.Credentials)
	return c
}

// validateKind reports what is wrong with a non-HTTP destination's kind
// and configuration: HTTP's own settings given, a credential sealed with a
// key relay does not have, a field its kind does not have or cannot take
// (the error names it: "config brokers: required").
func (d Destination) validateKind() error {
	k, ok := kind.Lookup(d.Kind)
	if !ok {
		return settingErr("kind", fmt.Errorf("unknown kind %q: use one of %s", d.Kind, strings.Join(kind.Names(), ", ")))
	}
	switch {
	case d.URL != "" || len(d.URLs) > 0:
		return settingErr("url", fmt.Errorf("a %s destination has no URL: its target is in its config (relay dest types %s)", d.Kind, d.Kind))
	case len(d.Headers) > 0:
		return settingErr("header", fmt.Errorf("headers are HTTP's: a %s destination carries the event's metadata in its own attributes", d.Kind))
	}
	for name, v := range d.Credentials {
		if isSealed(v) {
			return settingErr("config", fmt.Errorf("credential %s: %w", name, ErrSealed))
		}
		if !kind.Sensitive(k, name) {
			return settingErr("config", fmt.Errorf("config %s: not a credential of %s", name, d.Kind))
		}
	}
	for name := range d.Config {
		if kind.Sensitive(k, name) {
			return settingErr("config", fmt.Errorf("config %s: a credential of %s, kept apart from the config", name, d.Kind))
		}
	}
	c := d.KindConfig()
	if err := kind.Check(k, c); err != nil {
		return settingErr("config", err)
	}
	if a, ok := k.(kind.Ambient); ok && d.Tenant() != "" {
		if ambient, field := a.AmbientCredentials(c); ambient {
			return settingErr("config", kind.Errorf(field, "required for a tenant's destination: without it, relay would publish with its own identity on the host, which is the operator's, not the tenant's"))
		}
	}
	if d.Ordered && !k.Ordered(c) {
		return settingErr("ordered", fmt.Errorf("this %s destination does not keep the order of the events of a key (docs/destinations.md): leave --ordered out", d.Kind))
	}
	return nil
}

// applyConfig sets the fields of cfg on d: a credential (its kind says
// which fields are) in Credentials, the others in Config; an empty value
// removes the field. With a kind relay does not know, everything goes to
// Config (Validate then refuses the kind).
func (d *Destination) applyConfig(cfg map[string]string) {
	k, known := kind.Lookup(d.Kind)
	for name, v := range cfg {
		delete(d.Config, name)
		delete(d.Credentials, name)
		if v == "" {
			continue
		}
		dst := &d.Config
		if known && kind.Sensitive(k, name) {
			dst = &d.Credentials
		}
		if *dst == nil {
			*dst = map[string]string{}
		}
		(*dst)[name] = v
	}
	if len(d.Config) == 0 {
		d.Config = nil
	}
	if len(d.Credentials) == 0 {
		d.Credentials = nil
	}
}

// errKindFixed is the error of an update that would change a destination's
// kind.
var errKindFixed = errors.New("a destination's kind is fixed: add a new destination of the other kind")
