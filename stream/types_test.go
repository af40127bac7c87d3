package stream

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTypeMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, typ string
		want         bool
	}{
		{"order.created", "order.created", true},
		{"order.created", "order.paid", false},
		{"order.created", "order", false},
		{"order", "order.created", false},
		{"order.*", "order.created", true},
		{"order.*", "order", false},
		{"order.*", "order.created.eu", false},
		{"*.created", "order.created", true},
		{"*.created", "invoice.created", true},
		{"*.created", "order.paid", false},
		{"order.>", "order.created", true},
		{"order.>", "order.created.eu", true},
		{"order.>", "order", false},
		{">", "order", true},
		{">", "a.b.c", true},
		{"*", "order", true},
		{"*", "order.created", false},
		{"*.*.eu", "order.created.eu", true},
		{"*.*.eu", "order.created.us", false},
		{"order.*.>", "order.created", false},
		{"order.*.>", "order.created.eu", true},
		{"relay.>", "relay.destination.disabled", true},
		{"Order.Created", "order.created", false}, // case matters, as in NATS subjects
	} {
		require.Equal(t, c.want, TypeMatches(c.pattern, c.typ), "%q ~ %q", c.pattern, c.typ)
		// The server's subject filter agrees.
		require.Equal(t, c.want, subjectMatches(TypeFilter(c.pattern), TypeSubject(c.typ)), "server rule for %q ~ %q", c.pattern, c.typ)
	}
}

// subjectMatches is the NATS rule for a filter and a subject, written out
// token by token to check TypeMatches against.
func subjectMatches(filter, subject string) bool {
	f, s := splitDots(filter), splitDots(subject)
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func TestValidateEventTypeAndPattern(t *testing.T) {
	for _, ok := range []string{"order", "order.created", "Order_v2.created-eu", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p"} {
		require.NoError(t, ValidateEventType(ok), ok)
		require.NoError(t, ValidateTypePattern(ok), ok)
	}
	for typ, msg := range map[string]string{
		"":                                  "empty",
		"order..created":                    "empty token",
		".order":                            "empty token",
		"order.":                            "empty token",
		"order.*":                           `token "*"`,
		"order.>":                           `token ">"`,
		"order created":                     `token "order created"`,
		"order.créé":                        `token "créé"`,
		"relay.dead_letters":                "relay's own",
		"relay":                             "relay's own",
		"Relay.destination.disabled":        "relay's own, in any case",
		"RELAY.x":                           "relay's own, in any case",
		"rElAy":                             "relay's own, in any case",
		"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q": "more than 16 tokens",
	} {
		err := ValidateEventType(typ)
		require.ErrorContains(t, err, msg, "%q", typ)
		require.ErrorContains(t, err, "invalid event type", "%q", typ)
	}
	for _, ok := range []string{"order.*", "*.created", "order.>", ">", "*", "relay.>"} {
		require.NoError(t, ValidateTypePattern(ok), ok)
	}
	for p, msg := range map[string]string{
		"order.>.created": "'>' must be the last",
		"order.*x":        `token "*x"`,
		"":                "empty",
		"order..*":        "empty token",
		// relay's own events are relay.*: a pattern naming them in another
		// case would match nothing.
		"Relay.>":             "in lower case",
		"RELAY.destination.*": "in lower case",
	} {
		require.ErrorContains(t, ValidateTypePattern(p), msg, "%q", p)
	}
}

func TestTypeOf(t *testing.T) {
	typ, ok := TypeOf(TypeSubject("order.created"))
	require.True(t, ok)
	require.Equal(t, "order.created", typ)
	_, ok = TypeOf("relay.in.orders")
	require.False(t, ok)
	_, ok = TypeOf("relay.type.")
	require.False(t, ok)
}

func TestSubMark(t *testing.T) {
	d, ok := SubMarkDest(SubMarkSubject("crm"))
	require.True(t, ok)
	require.Equal(t, "crm", d)
	for _, bad := range []string{"relay.sub.", "relay.sub.a.b", "relay.in.crm", "relay.sub"} {
		_, ok := SubMarkDest(bad)
		require.False(t, ok, bad)
	}
}
