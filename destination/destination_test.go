package destination

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateURLTable(t *testing.T) {
	t.Parallel()
	base := "https://example.com/"
	tests := []struct {
		name    string
		url     string
		wantErr string // empty: valid
	}{
		{"http", "http://example.com/hook", ""},
		{"https", "https://example.com/hook", ""},
		{"https with port, path and query", "https://example.com:8443/a/b?x=1&y=2", ""},
		{"ip v4", "http://127.0.0.1:8080/", ""},
		{"ip v6", "http://[::1]:8080/hook", ""},
		{"upper-case scheme", "HTTPS://example.com/", ""},
		{"exactly 2048 characters", base + strings.Repeat("a", 2048-len(base)), ""},
		{"2049 characters", base + strings.Repeat("a", 2049-len(base)), "2049 characters long; the limit is 2048"},
		{"ftp", "ftp://example.com/file", `scheme must be http or https, not "ftp"`},
		{"file", "file:///etc/passwd", `not "file"`},
		{"javascript", "javascript:alert(1)", `not "javascript"`},
		{"ws", "ws://example.com/", `not "ws"`},
		{"no scheme", "example.com/hook", `not ""`},
		{"empty", "", "scheme must be http or https"},
		{"no host", "http:///hook", "has no host"},
		{"port only", "http://:8080/hook", "has no host"},
		{"opaque", "http:example.com", "has no host"},
		{"credentials", "https://user:s3cret@example.com/hook", "must not contain credentials"},
		{"user only", "https://user@example.com/hook", "must not contain credentials"},
		{"fragment", "https://example.com/hook#section", "has a fragment"},
		{"does not parse", "http://exa mple.com/", "does not parse"},
		{"bad escape", "http://example.com/%zz", "does not parse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateURL(tc.url)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestValidateURLDoesNotEchoPassword(t *testing.T) {
	t.Parallel()
	err := ValidateURL("https://admin:hunter2-secret@example.com/hook")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2-secret")
}

func TestValidateHeaderTable(t *testing.T) {
	t.Parallel()
	const (
		invalidName = "is not a valid HTTP header name"
		setByRelay  = "is set by relay"
		reserved    = "reserved for NATS and relay"
		control     = "control characters"
	)
	tests := []struct {
		name, value string
		wantErr     string // empty: valid
	}{
		{"X-Api", "abc", ""},
		{"Authorization", "Bearer abc.def", ""},
		{"X-Api-Key", "k", ""},
		{"x-lower-case", "v", ""},
		{"X-Empty", "", ""},
		{"X-Tab", "a\tb", ""},
		{"X-Unicode-Value", "héllo", ""},
		{"X-Symbols", "!#$%&'*+-.^_`|~", ""},
		{"Host", "evil.example", setByRelay},
		{"host", "evil.example", setByRelay},
		{"Content-Length", "1", setByRelay},
		{"Transfer-Encoding", "chunked", setByRelay},
		{"Connection", "close", setByRelay},
		{"Content-Type", "text/plain", setByRelay},
		{"User-Agent", "x", setByRelay},
		{"TE", "trailers", setByRelay},
		{"Upgrade", "h2c", setByRelay},
		{"Trailer", "X", setByRelay},
		{"webhook-id", "x", setByRelay},
		{"Webhook-Signature", "v1,x", setByRelay},
		{"WEBHOOK-TIMESTAMP", "1", setByRelay},
		{"Relay-Attempt", "1", reserved},
		{"relay-x", "1", reserved},
		{"Nats-Msg-Id", "x", reserved},
		{"nats-x", "x", reserved},
		{"X-Api", "a\rb", control},
		{"X-Api", "a\nb", control},
		{"X-Api", "a\r\nInjected: yes", control},
		{"X-Api", "a\x00b", control},
		{"X-Api", "a\x7fb", control},
		{"", "x", invalidName},
		{"X Api", "x", invalidName},
		{"X:Api", "x", invalidName},
		{"X-Api\n", "x", invalidName},
		{"X(a)", "x", invalidName},
		{"X/Y", "x", invalidName},
		{"Ünïcode", "x", invalidName},
		{"X\x7f", "x", invalidName},
	}
	for _, tc := range tests {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			err := ValidateHeader(tc.name, tc.value)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestValidateEventHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value string
		ok          bool
	}{
		{"Content-Type", "application/cloudevents+json", true},
		{"content-type", "text/plain; charset=utf-8", true},
		{"X-Trace", "abc", true},
		{"Content-Type", "text/plain\r\nX-Evil: 1", false},
		{"Content-Length", "3", false},
		{"Host", "x", false},
		{"webhook-id", "x", false},
		{"Relay-Order-Key", "k", false},
		{"Nats-Msg-Id", "x", false},
		{"Bad Name", "x", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateEventHeader(tc.name, tc.value)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

func destTestGood() Destination {
	return Destination{
		Name:    "orders",
		URL:     "https://example.com/hook",
		Secret:  "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		Headers: map[string]string{"Authorization": "Bearer abc", "X-Team": "billing"},
	}
}

func TestDestinationWithDefaults(t *testing.T) {
	t.Parallel()
	d := destTestGood().WithDefaults()
	require.Equal(t, Duration(30*time.Second), d.Timeout)
	require.Equal(t, 16, d.Concurrency)
	require.Equal(t, RetryPolicy{}.WithDefaults(), d.Retry)
	require.NoError(t, d.Validate())

	kept := Destination{Name: "a", URL: "http://x", Timeout: Duration(time.Second), Concurrency: 3,
		Retry: RetryPolicy{MaxAttempts: 2}}.WithDefaults()
	require.Equal(t, Duration(time.Second), kept.Timeout)
	require.Equal(t, 3, kept.Concurrency)
	require.Equal(t, 2, kept.Retry.MaxAttempts)
	require.Equal(t, Duration(2*time.Second), kept.Retry.Base)
	require.NoError(t, kept.Validate())
}

func TestDestinationValidate(t *testing.T) {
	t.Parallel()
	with := func(f func(*Destination)) Destination {
		d := destTestGood()
		f(&d)
		return d.WithDefaults()
	}
	tests := []struct {
		name    string
		d       Destination
		wantErr string // empty: valid
	}{
		{"good", with(func(*Destination) {}), ""},
		{"no secret", with(func(d *Destination) { d.Secret = "" }), ""},
		{"no headers", with(func(d *Destination) { d.Headers = nil }), ""},
		{"timeout 100ms", with(func(d *Destination) { d.Timeout = Duration(100 * time.Millisecond) }), ""},
		{"timeout 10m", with(func(d *Destination) { d.Timeout = Duration(10 * time.Minute) }), ""},
		{"timeout 99ms", with(func(d *Destination) { d.Timeout = Duration(99 * time.Millisecond) }), "timeout 99ms must be between 100ms and 10m"},
		{"timeout over 10m", with(func(d *Destination) { d.Timeout = Duration(10*time.Minute + time.Second) }), "must be between 100ms and 10m"},
		{"timeout negative", with(func(d *Destination) { d.Timeout = Duration(-time.Second) }), "must be between 100ms and 10m"},
		{"concurrency 1", with(func(d *Destination) { d.Concurrency = 1 }), ""},
		{"concurrency 1024", with(func(d *Destination) { d.Concurrency = 1024 }), ""},
		{"concurrency negative", with(func(d *Destination) { d.Concurrency = -1 }), "concurrency -1 must be between 1 and 1024"},
		{"concurrency 1025", with(func(d *Destination) { d.Concurrency = 1025 }), "concurrency 1025"},
		{"bad name", with(func(d *Destination) { d.Name = "Orders!" }), "invalid destination name"},
		{"empty name", with(func(d *Destination) { d.Name = "" }), "invalid destination name"},
		{"bad url", with(func(d *Destination) { d.URL = "ftp://example.com" }), "scheme must be http or https"},
		{"bad secret", with(func(d *Destination) { d.Secret = "hunter2" }), "whsec_"},
		{"short secret", with(func(d *Destination) { d.Secret = "whsec_c2hvcnQ=" }), "5 bytes"},
		{"reserved header", with(func(d *Destination) { d.Headers = map[string]string{"Host": "x"} }), "set by relay"},
		{"header with newline", with(func(d *Destination) { d.Headers = map[string]string{"X-A": "a\nb"} }), "control characters"},
		{"bad retry policy", with(func(d *Destination) { d.Retry.MaxAttempts = 5000 }), "max attempts 5000"},
		{"bad retry jitter", with(func(d *Destination) { d.Retry.Jitter = 0.9 }), "jitter"},
		{"filter", with(func(d *Destination) { d.Filter = `data.amount > 100` }), ""},
		// A record written by other means than 'relay dest add' is refused too.
		{"filter that does not compile", with(func(d *Destination) { d.Filter = `data.amount >` }), "filter does not compile: unexpected token EOF (1:13)"},
		{"filter not boolean", with(func(d *Destination) { d.Filter = `1 + 1` }), "expected bool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.d.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestDestinationRedacted(t *testing.T) {
	t.Parallel()
	d := destTestGood()
	d.Headers = map[string]string{
		"Authorization": "Bearer abc",
		"authorization": "Basic xyz",
		"X-Api-Key":     "k-123",
		"X-Auth-Token":  "t-456",
		"X-Team":        "billing",
	}
	orig := d.Secret

	d.Headers["Cookie"] = "session=c00kie"
	d.Headers["Proxy-Authorization"] = "Basic pa-789"
	d.Headers["X-Webhook-Secret"] = "wh-456"
	d.URL = "https://example.test/hook?token=q-secret"
	d.BodyTemplate = `{"routing_key":"rk-789"}`

	r := d.Redacted()
	require.Equal(t, "(set: 24 bytes, sha256 "+fmt.Sprintf("%x", sha256.Sum256([]byte(d.BodyTemplate)))+")", r.BodyTemplate,
		"the body template's size and digest, not its text")
	require.Equal(t, "(set)", r.Secret)
	require.Equal(t, map[string]string{
		"Authorization":       "(set)",
		"authorization":       "(set)",
		"X-Api-Key":           "(set)",
		"X-Auth-Token":        "(set)",
		"X-Team":              "(set)",
		"Cookie":              "(set)",
		"Proxy-Authorization": "(set)",
		"X-Webhook-Secret":    "(set)",
	}, r.Headers, "no configured header value is shown, only names")
	require.Equal(t, d.Name, r.Name)
	require.Equal(t, "https://example.test/hook?token=xxxxx", r.URL)

	// The original is untouched (the headers map is copied, not edited).
	require.Equal(t, orig, d.Secret)
	require.Equal(t, "Bearer abc", d.Headers["Authorization"])
	require.Equal(t, "k-123", d.Headers["X-Api-Key"])

	b, err := json.Marshal(r)
	require.NoError(t, err)
	for _, secret := range []string{orig, "Bearer abc", "Basic xyz", "k-123", "t-456", "billing", "c00kie", "pa-789", "wh-456", "q-secret", "rk-789"} {
		require.NotContains(t, string(b), secret)
	}

	none := Destination{Name: "a", URL: "http://x"}.Redacted()
	require.Empty(t, none.Secret, "an unset secret must stay visibly unset")
	require.Nil(t, none.Headers)
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Duration(90 * time.Second))
	require.NoError(t, err)
	require.JSONEq(t, `"1m30s"`, string(b))

	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"1m30s"`, 90 * time.Second, false},
		{`"250ms"`, 250 * time.Millisecond, false},
		{`"0s"`, 0, false},
		{`1500000000`, 1500 * time.Millisecond, false},
		{`0`, 0, false},
		{`-5`, -5, false},
		{`"90"`, 0, true},
		{`"bogus"`, 0, true},
		{`true`, 0, true},
		{`{}`, 0, true},
		{`1.5`, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			var d Duration
			err := json.Unmarshal([]byte(tc.in), &d)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, time.Duration(d))
		})
	}

	for _, v := range []time.Duration{0, time.Nanosecond, 90 * time.Second, 36*time.Hour + 7*time.Millisecond} {
		b, err := json.Marshal(Duration(v))
		require.NoError(t, err)
		var back Duration
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, v, time.Duration(back), "round trip of %s", b)
	}
}

func TestDestinationJSONRoundTrip(t *testing.T) {
	t.Parallel()
	d := destTestGood()
	d.Timeout = Duration(90 * time.Second)
	d.Retry = RetryPolicy{Base: Duration(time.Second), Max: Duration(10 * time.Minute), NoJitter: true, MaxAttempts: 7}
	d = d.WithDefaults()

	b, err := json.Marshal(d)
	require.NoError(t, err)
	require.Contains(t, string(b), `"timeout":"1m30s"`)
	require.Contains(t, string(b), `"base":"1s"`)
	require.Contains(t, string(b), `"max":"10m0s"`)

	var back Destination
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, d, back)

	var numeric Destination
	require.NoError(t, json.Unmarshal([]byte(`{"name":"a","url":"http://x","timeout":5000000000,"retry":{"base":"3s"}}`), &numeric))
	require.Equal(t, Duration(5*time.Second), numeric.Timeout)
	require.Equal(t, Duration(3*time.Second), numeric.Retry.Base)
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://example.test/hook":                         "https://example.test/hook",
		"https://example.test/hook?token=abc":               "https://example.test/hook?token=xxxxx",
		"https://example.test/h?a=1&token=abc&b":            "https://example.test/h?a=xxxxx&token=xxxxx&xxxxx",
		"https://example.test/h?tok%3Den=abc":               "https://example.test/h?tok%3Den=xxxxx",
		"https://user:pw@example.test/h":                    "https://xxxxx@example.test/h",
		"https://only-a-token@example.test/h?x=1":           "https://xxxxx@example.test/h?x=xxxxx",
		"http://example.test:8080/p/a/t/h?":                 "http://example.test:8080/p/a/t/h?",
		"https://exa mple.test/\x7f?token=abc":              "(URL that does not parse)",
		"https://example.test/h?token=abc&token=def#frag-x": "https://example.test/h?token=xxxxx&token=xxxxx#frag-x",
	} {
		got := RedactURL(in)
		require.Equal(t, want, got, in)
		for _, secret := range []string{"abc", "def", "pw", "only-a-token"} {
			require.NotContains(t, got, secret, in)
		}
	}
}
