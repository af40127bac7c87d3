package stream

import (
	"fmt"
	"strings"
)

// Event types. A producer may publish an event by its type instead of for
// one destination:
//
//	relay.type.T      (T: the type, dot-separated tokens, such as order.created)
//
// with its order key, if any, in the Relay-Order-Key header. relay's router
// copies it to relay.in.D[.K] for every destination D subscribed to T, each
// copy carrying the event's id, type and publish time; from there on each
// copy is an event of its destination like any other.
const (
	TypePrefix = "relay.type"

	// MaxTypeLen bounds an event type, MaxTypeTokens its tokens.
	MaxTypeLen    = 200
	MaxTypeTokens = 16

	// ReservedTypePrefix starts the types of relay's own operator events.
	ReservedTypePrefix = "relay."
)

// SubPrefix starts the subject of a subscription mark: a change of
// destination D's subscriptions is marked by a message on relay.sub.D in the
// events stream, and the mark's sequence is the change's. Typed events
// stored before the mark go by D's subscriptions before the change, those
// after it by the new ones.
const SubPrefix = "relay.sub"

// SubMarkSubject is the subject of dest's subscription marks.
func SubMarkSubject(dest string) string { return SubPrefix + "." + dest }

// SubMarkDest returns the destination of a subscription mark's subject, and
// false when subject is not one.
func SubMarkDest(subject string) (string, bool) {
	d, ok := strings.CutPrefix(subject, SubPrefix+".")
	return d, ok && d != "" && !strings.Contains(d, ".")
}

// TypeSubject is the subject an event of type t is published to.
func TypeSubject(t string) string { return TypePrefix + "." + t }

// TypeFilter is the filter subject of the events whose type pattern
// matches.
func TypeFilter(pattern string) string { return TypePrefix + "." + pattern }

// TypeOf returns the type of an event stored on subject (relay.type.X, or
// a tenant's relay.t.T.type.X), and false when subject is not a typed
// event's.
func TypeOf(subject string) (string, bool) {
	_, t, ok := TypedTarget(subject)
	return t, ok
}

// TypedTarget returns the tenant ("" for none) and the type of an event
// stored on subject, and false when subject is not a typed event's.
func TypedTarget(subject string) (tenant, typ string, ok bool) {
	if t, ok := strings.CutPrefix(subject, TypePrefix+"."); ok {
		return "", t, t != ""
	}
	rest, ok := strings.CutPrefix(subject, TenantPrefix+".")
	if !ok {
		return "", "", false
	}
	tenant, rest, _ = strings.Cut(rest, ".")
	t, ok := strings.CutPrefix(rest, "type.")
	if !ok || t == "" || ValidateTenantID(tenant) != nil {
		return "", "", false
	}
	return tenant, t, true
}

// ValidateEventType reports whether a producer may publish an event of type
// t: a valid type (ValidTypeName) not starting with "relay." in any case
// (relay's own events; Relay.x would pass for one with a receiver that
// does not compare types case-sensitively).
func ValidateEventType(t string) error {
	if err := ValidTypeName(t); err != nil {
		return err
	}
	if Reserved(t) {
		return fmt.Errorf("invalid event type %q: types starting with %q are relay's own, in any case", t, ReservedTypePrefix)
	}
	return nil
}

// Reserved reports whether type t is, or case-insensitively looks like,
// one of relay's own: its first token is "relay" in any case.
func Reserved(t string) bool {
	first, _, _ := strings.Cut(t, ".")
	return strings.EqualFold(first, "relay")
}

// Spoofed reports whether type t looks like one of relay's own but is
// not: its first token is "relay" in another case. relay publishes its
// own in lower case only; the router routes no spoofed type.
func Spoofed(t string) bool {
	first, _, _ := strings.Cut(t, ".")
	return first != "relay" && strings.EqualFold(first, "relay")
}

// ValidTypeName reports whether t is a valid event type: 1 to 16
// dot-separated tokens of a-z, A-Z, 0-9, '_' and '-', 200 characters at
// most.
func ValidTypeName(t string) error {
	if err := validateTokens(t, false); err != nil {
		return fmt.Errorf("invalid event type %q: %w", t, err)
	}
	return nil
}

// ValidateTypePattern reports whether p can be a subscription's pattern:
// an event type whose tokens may be "*" (any one token) and whose last
// token may be ">" (one or more tokens), as in NATS subjects. Unlike a
// type, a pattern may name relay's own events ("relay.>").
//
// A pattern whose first token is "relay" in another case is refused: it
// would match nothing, relay's own types being lower case.
func ValidateTypePattern(p string) error {
	if err := validateTokens(p, true); err != nil {
		return fmt.Errorf("invalid event type pattern %q: %w", p, err)
	}
	if Spoofed(p) {
		return fmt.Errorf("invalid event type pattern %q: relay's own types start with %q, in lower case; no other type may start so", p, ReservedTypePrefix)
	}
	return nil
}

func validateTokens(s string, wild bool) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	if len(s) > MaxTypeLen {
		return fmt.Errorf("longer than %d characters", MaxTypeLen)
	}
	toks := strings.Split(s, ".")
	if len(toks) > MaxTypeTokens {
		return fmt.Errorf("more than %d tokens", MaxTypeTokens)
	}
	for i, tok := range toks {
		switch {
		case tok == "":
			return fmt.Errorf("empty token (two dots, or a dot at an end)")
		case wild && tok == "*":
		case wild && tok == ">":
			if i != len(toks)-1 {
				return fmt.Errorf("'>' must be the last token")
			}
		default:
			for _, r := range tok {
				if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
					if wild {
						return fmt.Errorf("token %q: use a-z, A-Z, 0-9, '_', '-', or a whole token '*' or '>'", tok)
					}
					return fmt.Errorf("token %q: use a-z, A-Z, 0-9, '_' or '-'", tok)
				}
			}
		}
	}
	return nil
}

// TypeMatches reports whether event type t matches pattern p (both valid).
func TypeMatches(p, t string) bool {
	for {
		ptok, prest, pmore := strings.Cut(p, ".")
		if ptok == ">" {
			return true
		}
		ttok, trest, tmore := strings.Cut(t, ".")
		if ptok != "*" && ptok != ttok {
			return false
		}
		if !pmore || !tmore {
			return pmore == tmore
		}
		p, t = prest, trest
	}
}
