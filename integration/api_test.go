package integration

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
)

var apiURLRE = regexp.MustCompile(`msg="serving the HTTP API, the dashboard and the customer portal" url=(\S+)`)

// An event published over HTTP to 'relay run --api-addr' is delivered.
func TestEventPublishedOverHTTPIsDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "http-in", URL: s.URL})
	code, out := e.relayCLI("api-key", "create", "--name", "svc", "--scope", "publish")
	require.Equal(t, 0, code, out)
	key := regexp.MustCompile(`relay_[0-9a-f]{16}_\S+`).FindString(out)
	require.NotEmpty(t, key, out)

	p := startProc(t, "--nats-url", e.url, "run", "--api-addr", "127.0.0.1:0")
	var base string
	eventually(t, 20*time.Second, func() bool {
		m := apiURLRE.FindStringSubmatch(p.output())
		if m != nil {
			base = m[1]
		}
		return m != nil && p.logged("relay running")
	}, "relay serves the API:\n%s", p.output())

	req, err := http.NewRequest("POST", base+"/events", strings.NewReader(`{"dest":"http-in","data":{"via":"http"}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "evt-http-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	eventually(t, 20*time.Second, func() bool { return s.delivered()["evt-http-1"] == 1 }, "delivered")
	require.JSONEq(t, `{"via":"http"}`, s.all()[0].Body)

	// The dashboard is served beside it, with its content security policy.
	resp, err = http.Get(strings.TrimSuffix(base, "/v1") + "/ui/login")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Empty(t, resp.Header.Values("Strict-Transport-Security"), "no HSTS over plain HTTP")
}
