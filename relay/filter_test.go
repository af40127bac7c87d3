package relay

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What a filter means, event by event: a missing value is nil and compares
// false; what still fails is an error (the event is dead-lettered).
func TestFilterMatch(t *testing.T) {
	t.Parallel()
	order := filterEvent{id: "ev1", key: "k1", dest: "d", body: []byte(`{"amount":150,"region":"eu","items":[{"sku":"a"}],"flag":true,"s":"x"}`),
		headers: http.Header{"X-Region": {"eu", "us"}}}
	notJSON := filterEvent{id: "ev2", dest: "d", body: []byte("plain text")}
	tests := []struct {
		src     string
		ev      filterEvent
		want    bool
		wantErr string
	}{
		{`data.amount > 100 && headers["X-Region"] == "eu"`, order, true, ""},
		{`data.amount > 100 && headers["x-region"] == "eu"`, order, true, ""}, // names as typed: canonical
		{`data.amount > 200`, order, false, ""},
		{`data.missing > 100`, order, false, ""},          // missing: nil, compares false
		{`data.missing.deeper == 1`, order, false, ""},    // a missing object: nil, no error
		{`data.missing.deeper >= 1`, order, false, ""},    //
		{`(data.missing ?? 0) < 1`, order, true, ""},      // a default for a missing value
		{`data.amount > 100`, notJSON, false, ""},         // not JSON: data is nil
		{`body startsWith "plain"`, notJSON, true, ""},    //
		{`data.items[0].sku == "a"`, order, true, ""},     //
		{`any(data.items, .sku == "a")`, order, true, ""}, //
		{`data.flag == true`, order, true, ""},
		{`data.flag`, order, true, ""},
		{`id == "ev1" && key == "k1" && dest == "d"`, order, true, ""},
		{`type == ""`, order, true, ""}, // published for one destination
		{`type startsWith "order."`, filterEvent{typ: "order.created", body: []byte("{}")}, true, ""},
		{`type == "order.paid"`, filterEvent{typ: "order.created", body: []byte("{}")}, false, ""},
		{`headers["X-Other"] == ""`, order, true, ""},
		{`data.s > 100`, order, false, "invalid operation: string > int (1:8)"},
		{`data.amount`, order, false, "float64"},
		{`len(1..1000000) > 0`, order, false, "memory budget exceeded"},
		// The examples of docs/routing.md.
		{`data.status in ["paid", "refunded"]`, order, false, ""},
		{`data.customer.tier == "gold"`, order, false, ""},
		{`(data.retries ?? 0) < 3`, order, true, ""},
		{`data.amount * 2 > 100`, notJSON, false, "invalid operation"},
		{`data.s`, order, false, "string"},
		{`data.region matches "^e"`, order, true, ""},
	}
	for _, tc := range tests {
		f, err := CompileFilter(tc.src)
		require.NoError(t, err, tc.src)
		got, err := f.Match(tc.ev)
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.src)
			continue
		}
		require.NoError(t, err, tc.src)
		require.Equal(t, tc.want, got, tc.src)
	}
}

// A filter that cannot run is refused when it is saved, with where it is
// wrong.
func TestCompileFilterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ src, want string }{
		{`data.amount >`, "unexpected token EOF (1:13)"},
		{"data.amount > 1 &&\n  regoin == \"eu\"", "unknown name regoin (2:3)"},
		{`1 + 2`, "expected bool, but got int"},
		{`body > 5`, "(mismatched types string and int) (1:6)"},
		{` `, "filter is empty"},
		{strings.Repeat("a", MaxFilterLen+1), "the limit is 4096"},
		{strings.Repeat("1 + ", 300) + "1 > 0", "exceeds maximum allowed nodes"},
	}
	for _, tc := range tests {
		_, err := CompileFilter(tc.src)
		require.ErrorContains(t, err, tc.want, tc.src)
	}
}

// BenchmarkFilter is the cost of evaluating the example filter on a 1 KiB
// JSON body (docs/performance.md): parsing the body is most of it, as a
// filter that reads only headers shows.
func BenchmarkFilter(b *testing.B) {
	body := []byte(`{"amount":150,"currency":"EUR","customer":{"id":"c_123","name":"Ada","tags":["a","b"]},"note":"` +
		strings.Repeat("x", 1024) + `"}`)
	body = append(body[:1024-2], '"', '}') // 1 KiB exactly, still JSON
	ev := filterEvent{id: "ev1", dest: "d", body: body, headers: http.Header{"X-Region": {"eu"}}}
	for _, bc := range []struct{ name, src string }{
		{"example", `data.amount > 100 && headers["X-Region"] == "eu"`},
		{"headers-only", `headers["X-Region"] == "eu"`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f, err := CompileFilter(bc.src)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				ok, err := f.Match(ev)
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
