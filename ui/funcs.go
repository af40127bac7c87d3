package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaydev/relay/api/client"
)

// funcs are the templates' helpers; now is the clock.
func funcs(now func() time.Time) template.FuncMap {
	return template.FuncMap{
		// ago is how long ago t was, rounded.
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return roundDur(now().Sub(t))
		},
		"dur": roundDur,
		// seg is s as one segment of a URL path: an event ID may hold
		// '/', '?' or '#', which html/template leaves as they are in a
		// path.
		"seg": url.PathEscape,
		// clock is t in UTC, to the second.
		"clock": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"rate": func(v float64) string {
			if v >= 100 {
				return strconv.FormatFloat(v, 'f', 0, 64)
			}
			return strconv.FormatFloat(v, 'f', 1, 64)
		},
		// pct is a ratio as a percentage, "-" when there is none (< 0).
		"pct": func(v float64) string {
			if v < 0 {
				return "-"
			}
			return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
		},
		"ms":   func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " ms" },
		"msOf": func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) },
		// status is an attempt's status, or its class when no response
		// came (error) or no attempt was made (none).
		"status": func(status int, class string) string {
			if status != 0 {
				return strconv.Itoa(status)
			}
			return class
		},
		// indentJSON is a JSON value indented, for reading.
		"indentJSON": func(raw []byte) string { return indent(raw) },
		// typesOf is what the portal's event-type checkboxes show: the
		// catalog's types, and the form's other patterns (order.*).
		"typesOf": func(catalog []client.EventType, f endpointForm) map[string]any {
			var others []string
			for _, t := range f.Types {
				if !slices.ContainsFunc(catalog, func(c client.EventType) bool { return c.Type == t }) {
					others = append(others, t)
				}
			}
			return map[string]any{"Catalog": catalog, "Form": f, "Others": others}
		},
		// slug makes a CSS class of a state: "breaker open" -> breaker-open.
		"slug": func(s string) string {
			return strings.Map(func(r rune) rune {
				switch {
				case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
					return r
				case r >= 'A' && r <= 'Z':
					return r + 'a' - 'A'
				}
				return '-'
			}, s)
		},
	}
}

// roundDur is d to a precision that reads well: 850ms, 12s, 3m5s, 2h10m.
func roundDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
