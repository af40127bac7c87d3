package tenant

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Portal is how the customer portal (docs/portal.md) shows itself to the
// tenant's customers, and where it may be embedded. Zero: relay's own
// look, and no site may embed it.
type Portal struct {
	// ProductName is the sender's product name shown in the portal's
	// header: at most MaxProductNameLen bytes of printable UTF-8.
	// Optional.
	ProductName string `json:"product_name,omitempty"`
	// AccentColor is the portal's accent color, "#rrggbb"; stored
	// lowercased. Optional.
	AccentColor string `json:"accent_color,omitempty"`
	// FrameAncestors are the origins allowed to embed the portal in an
	// iframe (its Content-Security-Policy's frame-ancestors): at most
	// MaxFrameAncestors, each as ValidateOrigin accepts it, stored as it
	// returns it. Optional: none.
	FrameAncestors []string `json:"frame_ancestors,omitempty"`
}

// Limits of a tenant's portal settings.
const (
	MaxProductNameLen = 100
	MaxFrameAncestors = 20
)

// IsZero reports whether p sets nothing.
func (p Portal) IsZero() bool {
	return p.ProductName == "" && p.AccentColor == "" && len(p.FrameAncestors) == 0
}

var accentColor = regexp.MustCompile(`^#[0-9a-fA-F]{6}$`)

// normalize checks p, naming the field at fault as portal.<field>, and
// returns it as it is stored: its color and origins lowercased, the
// origins as ValidateOrigin returns them.
func (p Portal) normalize() (Portal, error) {
	if len(p.ProductName) > MaxProductNameLen {
		return Portal{}, &FieldError{"portal.product_name", fmt.Sprintf("%d bytes; at most %d", len(p.ProductName), MaxProductNameLen)}
	}
	if !utf8.ValidString(p.ProductName) || strings.ContainsFunc(p.ProductName, isControl) {
		return Portal{}, &FieldError{"portal.product_name", "use printable UTF-8 text, without control characters"}
	}
	if p.AccentColor != "" && !accentColor.MatchString(p.AccentColor) {
		return Portal{}, &FieldError{"portal.accent_color", fmt.Sprintf("%q: give a color as #rrggbb, such as #1a73e8", p.AccentColor)}
	}
	out := Portal{ProductName: p.ProductName, AccentColor: strings.ToLower(p.AccentColor)}
	if len(p.FrameAncestors) > MaxFrameAncestors {
		return Portal{}, &FieldError{"portal.frame_ancestors", fmt.Sprintf("%d origins; at most %d", len(p.FrameAncestors), MaxFrameAncestors)}
	}
	for _, s := range p.FrameAncestors {
		o, err := ValidateOrigin(s)
		if err != nil {
			return Portal{}, &FieldError{"portal.frame_ancestors", err.Error()}
		}
		for _, prev := range out.FrameAncestors {
			if prev == o {
				return Portal{}, &FieldError{"portal.frame_ancestors", fmt.Sprintf("origin %s given twice; give each once", o)}
			}
		}
		out.FrameAncestors = append(out.FrameAncestors, o)
	}
	return out, nil
}

// ValidateOrigin checks s, an origin allowed to embed the customer portal,
// and returns it normalized. It is scheme://host or scheme://host:port:
// the scheme http or https; the host a DNS name or an IPv4 address, whose
// leftmost label may be the wildcard * (https://*.example.com: its
// subdomains, as a Content-Security-Policy source allows); nothing more (no
// path, not even "/", no query, fragment or user info). Normalized, it is
// lowercased and without the scheme's default port (443 for https, 80 for
// http), which the browser leaves out of an origin as well.
func ValidateOrigin(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("origin %q: %s; give scheme://host or scheme://host:port, such as https://app.example.com or https://*.example.com", s, why)
	}
	scheme, rest, ok := strings.Cut(strings.ToLower(s), "://")
	switch {
	case !ok:
		return bad("no scheme")
	case scheme != "http" && scheme != "https":
		return bad("the scheme must be http or https")
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		switch rest[i] {
		case '/':
			return bad("a path (" + rest[i:] + ") is not part of an origin, not even /")
		case '?':
			return bad("a query is not part of an origin")
		default:
			return bad("a fragment is not part of an origin")
		}
	}
	if strings.Contains(rest, "@") {
		return bad("user info (user@) is not part of an origin")
	}
	if strings.HasPrefix(rest, "[") {
		return bad("an IPv6 address cannot be a frame ancestor (a Content-Security-Policy source cannot name one): give a host name")
	}
	host, port := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		host, port = rest[:i], rest[i+1:]
		n, err := strconv.Atoi(port)
		if err != nil || strings.Trim(port, "0123456789") != "" || n < 1 || n > 65535 {
			return bad("the port must be a number from 1 to 65535")
		}
		port = ":" + strconv.Itoa(n)
		if scheme == "https" && n == 443 || scheme == "http" && n == 80 {
			port = ""
		}
	}
	if why := checkHost(host); why != "" {
		return bad(why)
	}
	return scheme + "://" + host + port, nil
}

// checkHost says what is wrong with host, lowercased, as the host of an
// origin: "" if nothing.
func checkHost(host string) string {
	if host == "" {
		return "no host"
	}
	if len(host) > 253 {
		return "the host is longer than 253 bytes"
	}
	if strings.ContainsFunc(host, func(r rune) bool { return r >= utf8.RuneSelf }) {
		return "the host is not ASCII: give its IDNA form (xn--...)"
	}
	for _, label := range strings.Split(strings.TrimPrefix(host, "*."), ".") {
		ok := len(label) >= 1 && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for _, c := range []byte(label) {
			ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
		}
		if !ok {
			if strings.Contains(label, "*") {
				return "a wildcard is allowed only as the host's whole first label (*.example.com)"
			}
			return fmt.Sprintf("label %q of the host: use 1-63 letters, digits or '-', neither first nor last a '-'", label)
		}
	}
	return ""
}
