package destination

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/webhook"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// SettingError is a destination setting that is wrong. Setting names it as
// its flag of 'relay dest add' does ("max-attempts"; the HTTP API spells
// it "max_attempts"), and Err says why.
type SettingError struct {
	Setting string
	Err     error
	// continues: Err's text goes on from the setting's name ("0: give 1
	// or more"), and Text puts the name before it. Otherwise Err's text
	// stands alone.
	continues bool
}

// settingErr marks err as about setting.
func settingErr(setting string, err error) error {
	if err == nil {
		return nil
	}
	return &SettingError{Setting: setting, Err: err}
}

func (e *SettingError) Error() string { return e.Text(func(s string) string { return s }) }

func (e *SettingError) Unwrap() error { return e.Err }

// Text is the error's text, with the setting named by name (a flag,
// "--max-attempts", or a request field, "max_attempts") where the text
// names it.
func (e *SettingError) Text(name func(setting string) string) string {
	if !e.continues {
		return e.Err.Error()
	}
	return name(e.Setting) + e.Err.Error()
}

// Settings are a destination's settings as 'relay dest add',
// 'relay dest update' and the HTTP API take them: a nil field was not given
// (add: the default; update: unchanged).
type Settings struct {
	// Kind is the destination's kind ("" or "http": HTTP). Fixed once the
	// destination exists.
	Kind *string
	// Config sets fields of a non-HTTP kind's configuration, credentials
	// included (its kind says which are); "" removes a field.
	Config map[string]string
	// URLs is the URL pool, in order (one URL: a pool of one).
	URLs []string
	// URLStrategy is failover or round-robin.
	URLStrategy *string
	// Secret is the signing secret; "": deliveries are not signed.
	Secret *string
	// Signature is how deliveries are signed: hmac, ed25519 or both.
	Signature *string
	// SigningKey is the Ed25519 signing key (whsk_) of "v1a" signatures.
	SigningKey *string
	// Headers are added to every request; they replace all the current
	// ones.
	Headers *map[string]string
	Timeout *time.Duration
	// MaxAttempts, BackoffBase, BackoffMax and Jitter are the retry
	// policy; a Jitter of 0 turns jitter off.
	MaxAttempts             *int
	BackoffBase, BackoffMax *time.Duration
	Jitter                  *float64
	Concurrency             *int
	RateLimit               *float64
	BreakerThreshold        *int
	BreakerPause            *time.Duration
	OnGone                  *string
	// Ordered, Shared and Partitions are fixed once a destination exists
	// (an update that changes them fails with ErrLayoutFixed).
	Ordered    *bool
	Shared     *bool
	Partitions *int
	OnFailure  *string
	// Types are the type patterns subscribed to; they replace all the
	// current ones ("" entries are left out: none subscribes to none).
	Types *[]string
	// Filter replaces the current filter ("" or blanks: none).
	Filter *string
	// BodyTemplate replaces the current body template, its source ("" or
	// blanks: none, and the body content type goes with it).
	BodyTemplate *string
	// BodyContentType is the Content-Type of the rendered body (default
	// application/json).
	BodyContentType *string
}

// Validate checks what Destination.Validate cannot tell once the settings
// are applied (a max attempts of 0 would read as the default), and tidies
// Types and Filter. Its errors are *SettingError.
func (s *Settings) Validate() error {
	if s.Types != nil {
		var types []string
		for _, t := range *s.Types {
			if t == "" {
				continue
			}
			if err := stream.ValidateTypePattern(t); err != nil {
				return &SettingError{Setting: "type", Err: fmt.Errorf(": %w", err), continues: true}
			}
			if slices.Contains(types, t) {
				return &SettingError{Setting: "type", Err: fmt.Errorf(" %s given twice", t), continues: true}
			}
			types = append(types, t)
		}
		if len(types) > MaxTypes {
			return &SettingError{Setting: "type", Err: fmt.Errorf(" given %d times: a destination subscribes to at most %d patterns", len(types), MaxTypes), continues: true}
		}
		*s.Types = types
	}
	// 0 in a stored destination means the default: refused here, not
	// silently stored as 15.
	if s.MaxAttempts != nil && *s.MaxAttempts < 1 {
		return &SettingError{Setting: "max-attempts", Err: fmt.Errorf(" %d: give 1 or more (1: no retries)", *s.MaxAttempts), continues: true}
	}
	// The same for the other settings whose 0 means the default.
	if s.Concurrency != nil && *s.Concurrency < 1 {
		return &SettingError{Setting: "concurrency", Err: fmt.Errorf(" %d: give 1 or more", *s.Concurrency), continues: true}
	}
	if s.Partitions != nil && *s.Partitions < 1 {
		return &SettingError{Setting: "partitions", Err: fmt.Errorf(" %d: give 1 to %d", *s.Partitions, stream.Buckets), continues: true}
	}
	if s.BreakerThreshold != nil && (*s.BreakerThreshold == 0 || *s.BreakerThreshold < -1) {
		return &SettingError{Setting: "breaker-threshold", Err: fmt.Errorf(" %d: give 1 or more, or -1 for never", *s.BreakerThreshold), continues: true}
	}
	if s.Timeout != nil && *s.Timeout <= 0 {
		return &SettingError{Setting: "timeout", Err: fmt.Errorf(" %s: give 100ms to 10m", *s.Timeout), continues: true}
	}
	if s.BreakerPause != nil && *s.BreakerPause <= 0 {
		return &SettingError{Setting: "breaker-pause", Err: fmt.Errorf(" %s: give a positive duration", *s.BreakerPause), continues: true}
	}
	if s.Filter != nil {
		if strings.TrimSpace(*s.Filter) == "" {
			*s.Filter = "" // no filter
		} else if _, err := CompileFilter(*s.Filter); err != nil {
			return &SettingError{Setting: "filter", Err: fmt.Errorf(": %w", err), continues: true}
		}
	}
	if s.BodyTemplate != nil {
		if strings.TrimSpace(*s.BodyTemplate) == "" {
			*s.BodyTemplate = "" // no template
		} else if _, err := CompileBodyTemplate(*s.BodyTemplate); err != nil {
			return &SettingError{Setting: "body-template", Err: fmt.Errorf(": %w", err), continues: true}
		}
	}
	if s.Signature != nil && *s.Signature == SignatureEd25519 && s.Secret != nil && *s.Secret != "" {
		return &SettingError{Setting: "secret", Err: errors.New(": signature ed25519 signs with a key, not a secret: leave the secret out, or sign both"), continues: true}
	}
	if s.BodyContentType != nil {
		if err := ValidateContentType(*s.BodyContentType); err != nil {
			return &SettingError{Setting: "body-content-type", Err: fmt.Errorf(": %w", err), continues: true}
		}
	}
	return nil
}

// Apply copies the settings given onto d.
func (s Settings) Apply(d *Destination) {
	if s.Kind != nil {
		d.Kind = normKind(*s.Kind)
	}
	if s.Config != nil {
		d.applyConfig(s.Config)
	}
	if s.URLs != nil {
		d.SetPool(s.URLs)
	}
	set(&d.URLStrategy, s.URLStrategy)
	set(&d.Secret, s.Secret)
	if s.Signature != nil && *s.Signature != d.Signature {
		switch {
		case *s.Signature == SignatureEd25519:
			// No HMAC secret left behind: one a receiver may have leaked
			// must not come back with a later move to both or hmac.
			d.Secret, d.PrevSecret, d.PrevSecretUntil = "", "", time.Time{}
		case d.Signature == SignatureEd25519 && s.Secret == nil:
			// Back to signing v1, with a new secret (GeneratedSecret),
			// never unsigned by surprise, and no old one beside it.
			d.Secret, d.PrevSecret, d.PrevSecretUntil = webhook.GenerateSecret(), "", time.Time{}
		}
	}
	set(&d.Signature, s.Signature)
	set(&d.SigningKey, s.SigningKey)
	// A destination that comes to sign "v1a" gets its key.
	d.withSigningKey()
	set(&d.Headers, s.Headers)
	if s.Timeout != nil {
		d.Timeout = Duration(*s.Timeout)
	}
	set(&d.Retry.MaxAttempts, s.MaxAttempts)
	if s.BackoffBase != nil {
		d.Retry.Base = Duration(*s.BackoffBase)
	}
	if s.BackoffMax != nil {
		d.Retry.Max = Duration(*s.BackoffMax)
	}
	if s.Jitter != nil {
		d.Retry.Jitter = *s.Jitter
		d.Retry.NoJitter = d.Retry.Jitter == 0
	}
	set(&d.Concurrency, s.Concurrency)
	set(&d.RateLimit, s.RateLimit)
	set(&d.BreakerThreshold, s.BreakerThreshold)
	if s.BreakerPause != nil {
		d.BreakerPause = Duration(*s.BreakerPause)
	}
	set(&d.OnGone, s.OnGone)
	set(&d.Ordered, s.Ordered)
	set(&d.Shared, s.Shared)
	set(&d.Partitions, s.Partitions)
	set(&d.OnFailure, s.OnFailure)
	set(&d.Types, s.Types)
	set(&d.Filter, s.Filter)
	if s.BodyTemplate != nil && *s.BodyTemplate == "" {
		d.BodyContentType = "" // goes with the template
	}
	set(&d.BodyTemplate, s.BodyTemplate)
	set(&d.BodyContentType, s.BodyContentType)
}

// GeneratedSecret is the HMAC secret Apply generated for a destination
// that signed with Ed25519 alone (before) and signs v1 again (after); ""
// when it generated none. It is shown once.
func (s Settings) GeneratedSecret(before, after Destination) string {
	if s.Secret == nil && !before.SignsHMAC() && after.SignsHMAC() && after.Secret != "" && after.Secret != before.Secret {
		return after.Secret
	}
	return ""
}

// set copies *v to *dst if v is not nil.
func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// NewDestination is the destination name with settings s, defaults for
// the settings not given, a generated signing secret unless s gives one
// or the destination does not sign with one (generated says which), and,
// signing "v1a", a generated signing key unless s gives one. It is validated, not stored (Store.Add).
func (s Settings) NewDestination(name string) (d Destination, generated bool, err error) {
	if err := s.Validate(); err != nil {
		return Destination{}, false, err
	}
	d = Destination{Name: name}
	s.Apply(&d)
	if err := d.WithDefaults().Validate(); err != nil {
		return Destination{}, false, err
	}
	if s.Secret == nil && d.SignsHMAC() {
		d.Secret, generated = webhook.GenerateSecret(), true
	}
	return d, generated, nil
}

// Pause stops deliveries to the destination name until until (Forever:
// until Resume), in the store and in its consumers at once, so that nothing
// more is handed out even before the running relays notice.
//
// It emits relay.destination.disabled (reason operator); a failure to is
// not the pause's: the destination is paused.
func (s *Store) Pause(ctx context.Context, name string, until time.Time) (Destination, error) {
	d, err := s.setPause(ctx, name, func(d *Destination) {
		d.PausedUntil, d.PauseReason = until, PauseOperator
	})
	if err == nil {
		now := s.now()
		_ = opevent.Publish(ctx, s.js, opevent.Event{Type: opevent.Disabled, ID: opevent.ID(opevent.Disabled, name, PauseOperator, opevent.Millis(now)),
			Data: opevent.DisabledBody{Dest: name, At: now.UTC(), Reason: PauseOperator, PausedUntil: d.PausedUntil.UTC()}})
	}
	return d, err
}

// Resume resumes deliveries to the destination name, paused by an operator,
// its circuit breaker or a 410 Gone.
func (s *Store) Resume(ctx context.Context, name string) (Destination, error) {
	return s.setPause(ctx, name, func(d *Destination) {
		d.PausedUntil, d.PauseReason, d.BreakerTrips = time.Time{}, "", 0
	})
}

func (s *Store) setPause(ctx context.Context, name string, fn func(*Destination)) (Destination, error) {
	d, err := s.Update(ctx, name, func(d *Destination) error {
		fn(d)
		return nil
	})
	if err != nil {
		return Destination{}, err
	}
	if err := s.ApplyPause(ctx, d); err != nil {
		return Destination{}, err
	}
	return d, nil
}

// RotateSecret makes new signing credentials for the destination name,
// those it signs with: its HMAC secret (next, or a generated one when next
// is ""), its Ed25519 signing key (always generated), or both. For overlap
// (when positive) the old secret or key signs too, so that receivers can
// switch without losing a delivery. The destination returned has the new
// secret, in clear.
func (s *Store) RotateSecret(ctx context.Context, name, next string, overlap time.Duration) (Destination, error) {
	return s.Update(ctx, name, func(d *Destination) error {
		if next != "" && !d.SignsHMAC() {
			return settingErr("secret", fmt.Errorf("destination %s signs with an Ed25519 key only (signature %s): it has no HMAC secret to set; leave the secret out to rotate its key", Display(name), d.Signature))
		}
		until := s.now().Add(overlap).UTC()
		if d.SignsHMAC() {
			d.PrevSecret, d.PrevSecretUntil = "", time.Time{}
			if overlap > 0 && d.Secret != "" {
				d.PrevSecret, d.PrevSecretUntil = d.Secret, until
			}
			d.Secret = cmp.Or(next, webhook.GenerateSecret())
		}
		if d.SignsEd25519() {
			d.PrevSigningKey, d.PrevSigningKeyUntil = "", time.Time{}
			if overlap > 0 && d.SigningKey != "" {
				d.PrevSigningKey, d.PrevSigningKeyUntil = d.SigningKey, until
			}
			d.SigningKey = webhook.GenerateSigningKey()
		}
		return nil
	})
}

// PendingError is returned by RemoveIdle for a destination with events
// still waiting for delivery.
type PendingError struct {
	Dest    string
	Pending uint64
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("destination %s still has %d undelivered events; they stay in the event log but will not be delivered: rerun with --force to remove it anyway", e.Dest, e.Pending)
}

// RemoveIdle removes the destination name (Remove) unless events are still
// waiting for its delivery: then it fails with a *PendingError, unless
// force.
func (s *Store) RemoveIdle(ctx context.Context, name string, force bool) error {
	if _, err := s.Get(ctx, name); err != nil {
		return err
	}
	n, err := s.Pending(ctx, name)
	if err != nil {
		return err
	}
	if n > 0 && !force {
		return &PendingError{Dest: name, Pending: n}
	}
	return s.Remove(ctx, name)
}

// BlockedURLError says that a URL of a destination's pool is one the
// address policy of the relays blocks: its events would only be
// dead-lettered.
type BlockedURLError struct {
	URL     string
	Blocked *egress.BlockedError
	// Policy is the relays' policy, as the last 'relay run' to start
	// recorded it.
	Policy egress.Policy
}

func (e *BlockedURLError) Error() string {
	return fmt.Sprintf("URL %s: %s is %s, a non-public address, and the relays may reach %s; "+
		"to deliver there, start every 'relay run' with --allow-net %s (RELAY_ALLOW_NET)",
		e.URL, e.Blocked.Host, e.Blocked.Addr, e.Policy, e.AllowNet())
}

func (e *BlockedURLError) Unwrap() error { return e.Blocked }

// AllowNet is the --allow-net range that would let the relays reach the
// URL.
func (e *BlockedURLError) AllowNet() string {
	return netip.PrefixFrom(e.Blocked.Addr, e.Blocked.Addr.BitLen()).String()
}

// CheckPool returns a *BlockedURLError for the first of urls that the
// address policy of the relays, as the last 'relay run' to start recorded
// it, blocks. Without a recorded policy, or one it cannot read, it checks
// nothing: each delivery checks again.
func CheckPool(ctx context.Context, js jetstream.JetStream, urls []string) error {
	p, ok, err := egress.RecordedPolicy(ctx, js)
	if err != nil || !ok {
		return nil
	}
	for _, u := range urls {
		var be *egress.BlockedError
		if errors.As(p.CheckURL(ctx, u), &be) {
			return &BlockedURLError{URL: u, Blocked: be, Policy: p}
		}
	}
	return nil
}

// ApplyPause pauses or resumes d's consumers in JetStream to match
// d.PausedUntil. Consumers that do not exist yet are created paused later.
func (s *Store) ApplyPause(ctx context.Context, d Destination) error {
	paused := s.now().Before(d.PausedUntil)
	var errs []error
	for _, c := range d.WithDefaults().ConsumerNames() {
		var err error
		if paused {
			_, err = s.js.PauseConsumer(ctx, stream.EventsStream, c, d.PausedUntil)
		} else {
			_, err = s.js.ResumeConsumer(ctx, stream.EventsStream, c)
		}
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			errs = append(errs, fmt.Errorf("consumer %s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}
