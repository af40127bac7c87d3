package stream

import (
	"strings"
	"testing"
	"unicode"
)

func FuzzKeyToken(f *testing.F) {
	for _, s := range []string{
		"", "user-1", "a", "A_b:c=d-e", strings.Repeat("k", 64), strings.Repeat("k", 65),
		"a.b", "a*b", "a>b", ">", "*", "a b", "tab\there", "new\nline", "ünïcödé", "\x00", "\xff\xfe",
		"h-0123456789abcdef0123456789abcdef", "h-", "..", "a\u00a0b", "\u3000", "日本",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		tok := KeyToken(key)
		if n := len(tok); n < 1 || n > 64 {
			t.Fatalf("KeyToken(%q) = %q: %d characters", key, tok, n)
		}
		if strings.ContainsAny(tok, ".*>") || strings.ContainsFunc(tok, unicode.IsSpace) {
			t.Fatalf("KeyToken(%q) = %q is not a single subject token", key, tok)
		}
		if strings.ContainsFunc(tok, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) }) {
			t.Fatalf("KeyToken(%q) = %q has characters outside printable ASCII", key, tok)
		}
		if KeyToken(key) != tok {
			t.Fatalf("KeyToken(%q) is not deterministic", key)
		}
		if again := KeyToken(tok); again != tok {
			t.Fatalf("KeyToken(KeyToken(%q)) = %q, want %q", key, again, tok)
		}
		if tok != key && (!strings.HasPrefix(tok, "h-") || len(tok) != 34) {
			t.Fatalf("KeyToken(%q) = %q: a replaced key must be h- and 32 hex digits", key, tok)
		}
		// A key published with InSubject parses back to its token.
		subj := InSubject("orders", key)
		p, err := ParseSubject(subj)
		if key == "" {
			if err != nil || p.KeyToken != "" || p.Dest != "orders" {
				t.Fatalf("ParseSubject(%q) = %+v, %v", subj, p, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParseSubject(InSubject(%q)) = %v", key, err)
		}
		if p.Dest != "orders" || p.KeyToken != tok || p.Bucket != -1 {
			t.Fatalf("ParseSubject(%q) = %+v, want dest orders and token %q", subj, p, tok)
		}
	})
}

func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{
		"relay.in.orders", "relay.in.orders.user-1", "relay.ev.orders.5.user-1", "relay.ev.orders.63",
		"relay.ev.orders.64", "relay.ev.orders.-1", "relay.ev.orders.05", "relay.ev.orders.+5",
		"relay.ev.orders. 5", "relay.ev.orders.5", "relay.in", "relay.in.", "relay.in..k", "relay.in.*",
		"relay.in.>", "relay.in.a.b.c", "relay.dlq.orders", "", ".", "relay.ev.orders.99999999999999999999",
		"relay.t.acme.in.orders", "relay.t.acme.in.orders.k", "relay.tev.acme.orders.5", "relay.tev.acme.orders.64",
		"relay.t.acme.type.x", "relay.lane.orders", "relay.in.acme=orders", "relay.t.a=b.in.c",
		"relay.in.ev", "relay.ev.in.1", "relay.in.a b", "relay.in.d.\x00", "relay.in.0*", "relay.in.d.k>",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		p, err := ParseSubject(subj)
		if err != nil {
			if p != (Parsed{}) {
				t.Fatalf("ParseSubject(%q) failed but returned %+v", subj, p)
			}
			return
		}
		// Each part is one literal subject token ('*' and '>' are
		// wildcards only as whole tokens).
		if p.Dest == "" || p.Dest == "*" || p.Dest == ">" || strings.Contains(p.Dest, ".") {
			t.Fatalf("ParseSubject(%q): bad destination %q", subj, p.Dest)
		}
		if p.KeyToken == "*" || p.KeyToken == ">" || strings.Contains(p.KeyToken, ".") {
			t.Fatalf("ParseSubject(%q): bad key token %q", subj, p.KeyToken)
		}
		tenantSubj := strings.HasPrefix(subj, TenantPrefix+".") || strings.HasPrefix(subj, TenantKeyedPrefix+".")
		if want := strings.Count(subj, ".") + 1; want < 3 || want > 4 && !tenantSubj || want > 6 {
			t.Fatalf("ParseSubject(%q) accepted %d tokens", subj, want)
		}
		if tenantSubj && strings.Count(p.Dest, RefSep) != 1 {
			t.Fatalf("ParseSubject(%q): a tenant's subject, destination %q", subj, p.Dest)
		}
		if p.Bucket < -1 || p.Bucket >= Buckets {
			t.Fatalf("ParseSubject(%q): bucket %d", subj, p.Bucket)
		}
		unbucketed := strings.HasPrefix(subj, InPrefix+".") || strings.HasPrefix(subj, TenantPrefix+".") || strings.HasPrefix(subj, LanePrefix+".")
		if (p.Bucket == -1) != unbucketed {
			t.Fatalf("ParseSubject(%q): bucket %d for this prefix", subj, p.Bucket)
		}
		if p.Bucket >= 0 && p.KeyToken != "" {
			t.Fatalf("ParseSubject(%q): a stored keyed subject with a key token", subj)
		}
		for _, key := range []string{"", "k", "tenant.7 user"} {
			in := p.InputSubject(key)
			if strings.HasPrefix(subj, InPrefix+".") && in != subj {
				t.Fatalf("InputSubject(%q) of input subject %q = %q: not itself", key, subj, in)
			}
			q, err := ParseSubject(in)
			if err != nil || q.Dest != p.Dest || q.Bucket != -1 || !strings.HasPrefix(in, InPrefix+".") {
				t.Fatalf("InputSubject(%q) of %q = %q, parsed as %+v, %v", key, subj, in, q, err)
			}
			if p.Bucket >= 0 && (q.KeyToken == "" || Bucket(q.KeyToken) != p.Bucket) {
				t.Fatalf("InputSubject(%q) of %q = %q: not in bucket %d", key, subj, in, p.Bucket)
			}
			if q.InputSubject(key) != in {
				t.Fatalf("InputSubject is not a fixed point: %q then %q", in, q.InputSubject(key))
			}
		}
	})
}
