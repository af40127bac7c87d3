package destination

import (
	"fmt"
	"slices"

	"github.com/relaydev/relay/stream"
)

// MaxTypes is the most type patterns one destination subscribes to.
const MaxTypes = 64

// maxRetired is how many ended subscriptions a destination keeps, so that
// the router, a moment behind, still routes the events published while
// they applied.
const maxRetired = 16

// Subscription is one pattern a destination subscribed to, over the
// stream sequences it applied to: it routes a typed event stored at seq
// when Since < seq and (Until is 0 or seq <= Until). The store keeps them
// (Destination.Subscriptions) from Destination.Types.
type Subscription struct {
	Pattern string `json:"pattern"`
	Since   uint64 `json:"since"`
	Until   uint64 `json:"until,omitempty"`
}

// validateTypes reports an invalid or repeated pattern among types.
func validateTypes(types []string) error {
	if len(types) > MaxTypes {
		return fmt.Errorf("%d event type patterns: at most %d per destination", len(types), MaxTypes)
	}
	for i, p := range types {
		if err := stream.ValidateTypePattern(p); err != nil {
			return err
		}
		if slices.Contains(types[:i], p) {
			return fmt.Errorf("event type pattern %q given twice", p)
		}
	}
	return nil
}

// Subscribed reports whether d receives the typed event of type typ
// stored at sequence seq: whether a pattern it was subscribed to when the
// event was stored matches typ.
func (d Destination) Subscribed(typ string, seq uint64) bool {
	if len(d.Subscriptions) == 0 {
		// A record written without the store's windows: its types apply
		// from its start.
		if seq < d.StartSeq {
			return false
		}
		for _, p := range d.Types {
			if stream.TypeMatches(p, typ) {
				return true
			}
		}
		return false
	}
	for _, s := range d.Subscriptions {
		if seq > s.Since && (s.Until == 0 || seq <= s.Until) && stream.TypeMatches(s.Pattern, typ) {
			return true
		}
	}
	return false
}

// subscribe brings d's subscription windows in line with d.Types, last
// being the sequence of the change's mark in the events stream: a pattern
// added applies to events stored after last, one removed to none after it. Windows that
// ended longest ago go beyond maxRetired.
func (d *Destination) subscribe(last uint64) {
	var open, retired []Subscription
	for _, s := range d.Subscriptions {
		switch {
		case s.Until != 0:
			retired = append(retired, s)
		case slices.Contains(d.Types, s.Pattern):
			open = append(open, s)
		default:
			s.Until = last
			retired = append(retired, s)
		}
	}
	for _, p := range d.Types {
		if !slices.ContainsFunc(open, func(s Subscription) bool { return s.Pattern == p }) {
			open = append(open, Subscription{Pattern: p, Since: last})
		}
	}
	slices.SortStableFunc(retired, func(a, b Subscription) int { return cmpUint(b.Until, a.Until) })
	if len(retired) > maxRetired {
		retired = retired[:maxRetired]
	}
	d.Subscriptions = append(open, retired...)
	if len(d.Subscriptions) == 0 {
		d.Subscriptions = nil
	}
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// marks reports whether d's subscription windows start or end at the mark
// at sequence seq.
func (d Destination) marks(seq uint64) bool {
	for _, s := range d.Subscriptions {
		if s.Since == seq || s.Until == seq {
			return true
		}
	}
	return false
}

// typesChanged reports whether a and b subscribe to different patterns.
func typesChanged(a, b []string) bool {
	if len(a) != len(b) {
		return true
	}
	for _, p := range a {
		if !slices.Contains(b, p) {
			return true
		}
	}
	return false
}
