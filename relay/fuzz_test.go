package relay

import (
	"context"
	"errors"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{
		"", " ", "0", "5", " 7 ", "007", "-5", "+5", "abc", "1.5", "5s", "0x10", "1e3",
		"2592000", "2592001", "18446744073709551615", "18446744073709551616",
		"99999999999999999999", "9223372036854775807", "9223372036854775808",
		now.Add(2 * time.Second).Format(http.TimeFormat),
		now.Add(-time.Hour).Format(http.TimeFormat),
		now.AddDate(1, 0, 0).Format(http.TimeFormat),
		"Mon, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
		"Friday, 01-Mar-24 12:00:10 GMT", "Fri Mar  1 12:00:10 2024",
		"Fri, 99 Foo 2024 99:99:99 GMT", "\u0663", "1\x00", "\t12\n",
	} {
		f.Add(s, int64(0))
	}
	f.Add("10", int64(-1<<62))
	f.Add("Fri, 31 Dec 9999 23:59:59 GMT", int64(-1<<62))
	f.Add("Mon, 01 Jan 0001 00:00:00 GMT", int64(1<<62))
	const month = 30 * 24 * time.Hour
	f.Fuzz(func(t *testing.T, v string, offset int64) {
		at := now.Add(time.Duration(offset))
		d, ok := ParseRetryAfter(v, at)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s: negative", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s, false: an invalid value must give 0", v, d)
		}
		if ok && d > month {
			t.Fatalf("ParseRetryAfter(%q) = %s: above 30 days", v, d)
		}
		if d2, ok2 := ParseRetryAfter(v, at); d2 != d || ok2 != ok {
			t.Fatalf("ParseRetryAfter(%q) not deterministic", v)
		}
		if d2, ok2 := ParseRetryAfter("  "+v+"\t", at); d2 != d || ok2 != ok {
			t.Fatalf("ParseRetryAfter(%q): surrounding blanks changed the result: %s %v vs %s %v", v, d, ok, d2, ok2)
		}
		// Plain delay-seconds are read exactly (up to the clamp), and only
		// those and HTTP dates are valid.
		tv := strings.TrimSpace(v)
		if n, err := strconv.ParseUint(tv, 10, 64); err == nil {
			want := month
			if n <= uint64(month/time.Second) {
				want = time.Duration(n) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("ParseRetryAfter(%q) = %s, %v; want %s, true", v, d, ok, want)
			}
		} else if tv != "" && tv[0] == '-' && ok {
			t.Fatalf("ParseRetryAfter(%q) accepted a negative value", v)
		}
		if ok && (tv == "" || tv[0] < '0' || tv[0] > '9') {
			if _, err := http.ParseTime(tv); err != nil {
				t.Fatalf("ParseRetryAfter(%q) accepted something that is neither a number nor an HTTP date", v)
			}
		}
		// Whatever the destination sends, a policy's Max caps the wait.
		p := destination.RetryPolicy{Max: destination.Duration(10 * time.Second), NoJitter: true}.WithDefaults()
		dec := classify(Result{Status: http.StatusTooManyRequests, RetryAfter: d, HasRetryAfter: ok}, 1, p, nil)
		if dec.Action != Retry || dec.Delay < 0 || dec.Delay > 10*time.Second {
			t.Fatalf("Decide with Retry-After %q: %+v", v, dec)
		}
	})
}

func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{
		"http://example.com/hook", "https://example.com:8443/a/b?x=1&y=2", "HTTPS://example.com/",
		"http://127.0.0.1:8080/", "http://[::1]:8080/hook", "http://[fe80::1%25en0]/", "http://[::ffff:127.0.0.1]/",
		"ftp://example.com/file", "file:///etc/passwd", "javascript:alert(1)", "example.com/hook", "",
		"http:///hook", "http://:8080/hook", "http:example.com", "https://user:s3cret@example.com/hook",
		"https://user@example.com/hook", "https://@example.com/", "https://example.com/hook#section", "https://example.com/#",
		"http://exa mple.com/", "http://example.com/%zz", "http://example.com:port/", "http://[::1/",
		"http://example.com\\@evil.com/", "http://evil.com%2f@good.com/", "http://a\x00b/", "http://a\r\nb/",
		"https://example.com/" + strings.Repeat("a", 2030), "//example.com/", "http://%41/", "http://0x7f.1/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		err := destination.ValidateURL(u)
		if err != nil {
			// Error texts end up in logs and API answers: they never
			// contain a password given in the URL.
			if p, perr := url.Parse(u); perr == nil && p.User != nil {
				if pw, ok := p.User.Password(); ok && len(pw) >= 4 {
					msg := strings.ReplaceAll(err.Error(), "user:password@", "")
					if strings.Contains(msg, pw) {
						t.Fatalf("ValidateURL(%q) echoes the password: %v", u, err)
					}
				}
			}
			return
		}
		if len(u) > 2048 {
			t.Fatalf("ValidateURL accepted a URL of %d characters", len(u))
		}
		p, perr := url.Parse(u)
		if perr != nil {
			t.Fatalf("ValidateURL accepted %q, which url.Parse refuses: %v", u, perr)
		}
		if p.Scheme != "http" && p.Scheme != "https" {
			t.Fatalf("ValidateURL accepted %q with scheme %q", u, p.Scheme)
		}
		if p.User != nil {
			t.Fatalf("ValidateURL accepted %q with credentials", u)
		}
		if p.Hostname() == "" {
			t.Fatalf("ValidateURL accepted %q without a host", u)
		}
		if p.Fragment != "" {
			t.Fatalf("ValidateURL accepted %q with a fragment", u)
		}
		// Every accepted URL can be made into the request Send makes, and
		// that request can be written on the wire.
		req, rerr := http.NewRequest(http.MethodPost, u, nil)
		if rerr != nil {
			t.Fatalf("ValidateURL accepted %q but a request to it cannot be built: %v", u, rerr)
		}
		if werr := req.Write(io.Discard); werr != nil {
			t.Fatalf("ValidateURL accepted %q but a request to it cannot be sent: %v", u, werr)
		}
	})
}

func FuzzNetGuardPermits(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1", "::ffff:127.0.0.1", "::1", "::", "169.254.169.254", "::ffff:169.254.169.254",
		"10.1.2.3", "8.8.8.8", "::ffff:8.8.8.8", "2606:4700:4700::1111", "fe80::1", "64:ff9b::7f00:1",
		"2002:7f00:1::", "::7f00:1", "ff02::1", "fc00::1", "2001:db8::1",
	} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff})
	var zero egress.Guard
	allowAll := egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}
	mustBlock := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"),
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var b [16]byte
		copy(b[:], raw)
		a := netip.AddrFrom16(b)
		u := a.Unmap()
		p := zero.Permits(a)
		if p != zero.Permits(u) {
			t.Fatalf("Permits(%s) = %v but Permits(%s) = %v", a, p, u, !p)
		}
		if p != zero.Permits(a.WithZone("eth0")) {
			t.Fatalf("a zone changed the verdict on %s", a)
		}
		for _, pfx := range mustBlock {
			if pfx.Contains(u) && p {
				t.Fatalf("the zero guard permits %s (%s), in %s", a, u, pfx)
			}
		}
		if u.Is4() {
			// The IPv6 forms that embed an IPv4 address are never permitted
			// for an address that is itself refused.
			v4 := u.As4()
			for _, wrap := range []netip.Prefix{
				netip.MustParsePrefix("64:ff9b::/96"), // NAT64
				netip.MustParsePrefix("::/96"),        // IPv4-compatible
			} {
				w := wrap.Addr().As16()
				copy(w[12:], v4[:])
				if zero.Permits(netip.AddrFrom16(w)) && !p {
					t.Fatalf("%s is refused but its embedding %s is permitted", u, netip.AddrFrom16(w))
				}
			}
		}
		if !(egress.Guard{Off: true}).Permits(a) {
			t.Fatalf("Off refuses %s", a)
		}
		if !allowAll.Permits(a) {
			t.Fatalf("allowing everything refuses %s", a)
		}
		// Allowing a range opens it and nothing else.
		one := egress.Guard{Allow: []netip.Prefix{netip.PrefixFrom(u, u.BitLen())}}
		if !one.Permits(a) {
			t.Fatalf("allowing %s/%d does not permit %s", u, u.BitLen(), a)
		}
	})
}

var errFuzzTestNoDial = errors.New("fuzz test: no dialling")

// fuzzTestNoDial is a transport that checks a request and fails to dial.
var fuzzTestNoDial = &http.Transport{
	Proxy: nil,
	DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errFuzzTestNoDial
	},
}

func FuzzValidateHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"Authorization", "Bearer x"}, {"X-Api-Key", "k"}, {"X-Empty", ""}, {"X-Tab", "a\tb"},
		{"X-Crlf", "a\r\nInjected: 1"}, {"X-Lf", "a\nb"}, {"X-Nul", "a\x00b"}, {"X-Del", "a\x7fb"},
		{"X-Utf8", "héllo"}, {"X-Bytes", "\xff\xfe"}, {"Host", "x"}, {"host", "x"}, {"Content-Length", "1"},
		{"Content-Type", "text/plain"}, {"webhook-id", "x"}, {"Webhook-Signature", "x"}, {"Relay-X", "x"},
		{"nats-msg-id", "x"}, {"Bad Name", "x"}, {"Bad:Name", "x"}, {"", "x"}, {"X-É", "x"},
		{"!#$%&'*+-.^_`|~09azAZ", "x"},
	} {
		f.Add(s[0], s[1])
	}
	isTChar := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		err := destination.ValidateHeader(name, value)
		eerr := destination.ValidateEventHeader(name, value)
		if !strings.EqualFold(name, "Content-Type") && (err == nil) != (eerr == nil) {
			t.Fatalf("ValidateHeader and ValidateEventHeader disagree on %q: %v / %v", name, err, eerr)
		}
		for i, e := range []error{err, eerr} {
			if e != nil {
				continue
			}
			if strings.ContainsAny(value, "\r\n\x00\x7f") {
				t.Fatalf("validator %d accepted a value with CR, LF, NUL or DEL: %q", i, value)
			}
			for _, c := range []byte(value) {
				if c < ' ' && c != '\t' {
					t.Fatalf("validator %d accepted a value with control byte %#x: %q", i, c, value)
				}
			}
			if name == "" || strings.IndexFunc(name, func(r rune) bool { return !isTChar(r) }) >= 0 {
				t.Fatalf("validator %d accepted the name %q, not an HTTP token", i, name)
			}
			l := strings.ToLower(name)
			if strings.HasPrefix(l, "webhook-") || strings.HasPrefix(l, "relay-") || strings.HasPrefix(l, "nats-") {
				t.Fatalf("validator %d accepted the reserved name %q", i, name)
			}
			if i == 0 && (l == "host" || l == "content-type" || l == "content-length" || l == "user-agent") {
				t.Fatalf("ValidateHeader accepted the reserved name %q", name)
			}
			if i == 1 && (l == "host" || l == "content-length" || l == "user-agent") {
				t.Fatalf("ValidateEventHeader accepted the reserved name %q", name)
			}
		}
		for i, e := range []error{err, eerr} {
			if e != nil {
				continue
			}
			// An accepted header can be sent: Go's transport refuses invalid
			// names and values before it dials.
			req, rerr := http.NewRequest(http.MethodPost, "http://example.com/", nil)
			if rerr != nil {
				t.Fatal(rerr)
			}
			req.Header.Set(name, value)
			_, rterr := fuzzTestNoDial.RoundTrip(req)
			if !errors.Is(rterr, errFuzzTestNoDial) {
				t.Fatalf("validator %d accepted %q=%q, which Go's client refuses: %v", i, name, value, rterr)
			}
		}
	})
}

// FuzzDeliveryValidate: an event Delivery.Validate accepts becomes a request
// Go's transport accepts, with the headers Send copies; one it refuses names
// a header.
func FuzzDeliveryValidate(f *testing.F) {
	for _, s := range [][3]string{
		{"evt_1", "Content-Type", "application/json"}, {"evt_1", "Content-Type", "application/json\x01"},
		{"evt_1", "content-type", "text/plain\r\nX: 1"}, {"evt\x01", "X-A", "b"}, {"evt_1", "X-A", "a\x7f"},
		{"evt_1", "Bad Name", "x"}, {"evt_1", "Host", "a\x00"}, {"evt_1", "webhook-id", "\n"}, {"", "X-É", "é"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, id, name, value string) {
		ev := Delivery{ID: id, Headers: http.Header{name: {value}}}
		err := ev.Validate()
		if err != nil {
			var ie *InvalidEventError
			if !errors.As(err, &ie) || ie.Header != name && ie.Header != "webhook-id" {
				t.Fatalf("Validate(%q, %q=%q) = %v: not an InvalidEventError naming the header", id, name, value, err)
			}
			return
		}
		req, rerr := http.NewRequest(http.MethodPost, "http://example.com/", nil)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !destination.RelaySets(name) {
			req.Header[name] = []string{value}
		}
		if strings.EqualFold(name, "Content-Type") {
			req.Header["Content-Type"] = []string{value}
		}
		req.Header["Webhook-Id"] = []string{id}
		if _, rterr := fuzzTestNoDial.RoundTrip(req); !errors.Is(rterr, errFuzzTestNoDial) {
			t.Fatalf("Validate accepted id %q and %q=%q, which Go's client refuses: %v", id, name, value, rterr)
		}
	})
}
