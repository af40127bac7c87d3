package tenant

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaydev/relay/destination"
)

// Defaults are the settings a new destination of the tenant takes where
// whoever adds it gives none (and relay's own defaults where the tenant has
// none either). They apply when a destination is added; a change leaves
// the existing destinations as they are.
type Defaults struct {
	MaxAttempts int                  `json:"max_attempts,omitempty"`
	BackoffBase destination.Duration `json:"backoff_base,omitempty"`
	BackoffMax  destination.Duration `json:"backoff_max,omitempty"`
	Timeout     destination.Duration `json:"timeout,omitempty"`
	RateLimit   float64              `json:"rate_limit,omitempty"`
	Concurrency int                  `json:"concurrency,omitempty"`
	// Signature is how its new destinations sign: hmac, ed25519 or both
	// (a destination added from the customer portal takes it too).
	Signature string `json:"signature,omitempty"`
}

// Limits bound what the tenant may use. 0: no limit.
type Limits struct {
	// MaxDestinations bounds the tenant's destinations: adding one more
	// is refused.
	MaxDestinations int `json:"max_destinations,omitempty"`
	// PublishRate bounds the events published for the tenant over HTTP,
	// per second across relay's replicas (each takes an equal share), with
	// a burst of one second's worth: beyond, 429 with Retry-After.
	PublishRate float64 `json:"publish_rate,omitempty"`
	// MaxInFlight bounds the attempts under way at once across the
	// tenant's destinations, across relay's replicas (each takes an equal
	// share, at least 1): an event over it waits, in relay or handed back
	// to JetStream, without using an attempt.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// Upper bounds of the limits.
const (
	MaxMaxDestinations = 1_000_000
	MaxPublishRate     = 1_000_000
	MaxMaxInFlight     = 1_000_000
)

// IsZero reports whether d sets nothing.
func (d Defaults) IsZero() bool { return d == Defaults{} }

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Fill gives s the tenant's defaults for the settings it does not give.
func (d Defaults) Fill(s *destination.Settings) {
	if s.MaxAttempts == nil && d.MaxAttempts != 0 {
		s.MaxAttempts = &d.MaxAttempts
	}
	for _, f := range []struct {
		dst **time.Duration
		v   destination.Duration
	}{{&s.BackoffBase, d.BackoffBase}, {&s.BackoffMax, d.BackoffMax}, {&s.Timeout, d.Timeout}} {
		if *f.dst == nil && f.v != 0 {
			v := time.Duration(f.v)
			*f.dst = &v
		}
	}
	if s.RateLimit == nil && d.RateLimit != 0 {
		s.RateLimit = &d.RateLimit
	}
	if s.Concurrency == nil && d.Concurrency != 0 {
		s.Concurrency = &d.Concurrency
	}
	if s.Signature == nil && d.Signature != "" && s.Secret == nil {
		// A secret given says how the destination signs: v1.
		s.Signature = &d.Signature
	}
}

// validate checks d as a destination's settings would be checked, naming
// the field at fault as defaults.<field>.
func (d Defaults) validate() error {
	if d.MaxAttempts < 0 || d.Concurrency < 0 || d.RateLimit < 0 || d.BackoffBase < 0 || d.BackoffMax < 0 || d.Timeout < 0 {
		field := map[bool]string{d.MaxAttempts < 0: "max_attempts", d.Concurrency < 0: "concurrency", d.RateLimit < 0: "rate_limit",
			d.BackoffBase < 0: "backoff_base", d.BackoffMax < 0: "backoff_max", d.Timeout < 0: "timeout"}[true]
		return &FieldError{"defaults." + field, "must not be negative (0 or absent: relay's default)"}
	}
	s := destination.Settings{URLs: []string{"https://tenant-defaults.example/"}} // any URL: the defaults are checked
	d.Fill(&s)
	_, _, err := s.NewDestination("tenant-defaults")
	var se *destination.SettingError
	if errors.As(err, &se) {
		return &FieldError{"defaults." + strings.ReplaceAll(se.Setting, "-", "_"), strings.TrimSpace(se.Text(func(string) string { return "" }))}
	}
	if err != nil {
		return &FieldError{"defaults", err.Error()}
	}
	return nil
}

// validate checks l's bounds.
func (l Limits) validate() error {
	for _, c := range []struct {
		field  string
		v, max float64
	}{
		{"max_destinations", float64(l.MaxDestinations), MaxMaxDestinations},
		{"publish_rate", l.PublishRate, MaxPublishRate},
		{"max_in_flight", float64(l.MaxInFlight), MaxMaxInFlight},
	} {
		if c.v < 0 || c.v > c.max {
			return &FieldError{"limits." + c.field, fmt.Sprintf("%g: give 0 (no limit) to %g", c.v, c.max)}
		}
	}
	return nil
}
