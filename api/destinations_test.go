package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/webhook"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
)

// noSecretIn fails if m, as JSON, holds one of secrets.
func noSecretIn(t *testing.T, m map[string]any, secrets ...string) {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	for _, s := range secrets {
		require.NotContains(t, string(b), s)
	}
}

func TestDestinationsOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	st := mustStore(t, e)

	// Created as 'relay dest add' would: defaults, a generated secret
	// answered once; header values never shown.
	code, m := e.send("POST", "/v1/destinations", e.admin, `{"name":"orders","url":"https://orders.example.com/hooks?token=s3cret-q",
		"headers":{"Authorization":"Bearer s3cret-h"},"types":["order.*"],"filter":"data.amount > 100","max_attempts":5}`)
	require.Equal(t, http.StatusCreated, code, m)
	secret, _ := m["secret"].(string)
	require.True(t, strings.HasPrefix(secret, webhook.SecretPrefix), "generated and shown once: %v", m)
	require.Equal(t, "https://orders.example.com/hooks?token=xxxxx", m["url"], "query values redacted, as the CLI shows them")
	require.Equal(t, []any{"Authorization"}, m["header_names"])
	require.Equal(t, true, m["signed"])
	require.Equal(t, "30s", m["timeout"], "defaults as 'relay dest add'")
	require.Equal(t, float64(5), m["max_attempts"])
	require.Equal(t, float64(16), m["concurrency"])
	require.Equal(t, "failover", m["url_strategy"])
	require.Equal(t, "active", m["state"])
	require.Equal(t, []any{"order.*"}, m["types"])
	noSecretIn(t, m, "s3cret-h", "s3cret-q")
	d, err := st.Get(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, secret, d.Secret, "the secret answered is the one stored")
	require.Equal(t, "Bearer s3cret-h", d.Headers["Authorization"])

	// Read may read everything but secrets.
	code, m = e.do("GET", "/v1/destinations/orders", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "orders", m["name"])
	require.Equal(t, "data.amount > 100", m["filter"])
	require.NotContains(t, m, "secret")
	noSecretIn(t, m, secret, "s3cret-h", "s3cret-q")

	code, m = e.send("POST", "/v1/destinations", e.admin, `{"name":"audit","urls":["https://a.example.com/h","https://b.example.com/h"],"url_strategy":"round-robin",
		"no_secret":true,"ordered":true,"partitions":4,"on_failure":"skip","timeout":"5s","backoff_base":"1s","backoff_max":"10m","jitter":0,"rate_limit":50}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.NotContains(t, m, "secret", "no secret: none generated")
	require.Equal(t, false, m["signed"])
	require.Equal(t, []any{"https://a.example.com/h", "https://b.example.com/h"}, m["urls"])
	require.Equal(t, float64(4), m["partitions"])
	require.Equal(t, "skip", m["on_failure"])
	require.Equal(t, float64(0), m["jitter"])
	require.Equal(t, "10m0s", m["backoff_max"])

	code, m = e.do("GET", "/v1/destinations", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	ds := m["destinations"].([]any)
	require.Len(t, ds, 2)
	require.Equal(t, "audit", ds[0].(map[string]any)["name"], "sorted by name")
	noSecretIn(t, m, secret, "s3cret-h", "s3cret-q")

	// Update: only the fields given change.
	code, m = e.send("PATCH", "/v1/destinations/orders", e.admin, `{"concurrency":4,"types":[],"filter":""}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, float64(4), m["concurrency"])
	require.Equal(t, []any{}, m["types"])
	require.NotContains(t, m, "filter")
	require.Equal(t, float64(5), m["max_attempts"], "unchanged")
	d, err = st.Get(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, secret, d.Secret, "unchanged")
	require.Equal(t, "Bearer s3cret-h", d.Headers["Authorization"], "unchanged")

	// Pause, for a while or until resumed; resume.
	code, m = e.do("POST", "/v1/destinations/orders/pause", e.admin, "application/json", nil)
	require.Equal(t, http.StatusOK, code, "no body, whatever its type: %v", m)
	require.Equal(t, destination.PauseOperator, m["state"])
	require.NotContains(t, m, "paused_until", "until resumed")
	code, m = e.send("POST", "/v1/destinations/orders/pause", e.admin, `{"for":"10m"}`)
	require.Equal(t, http.StatusOK, code, m)
	until, err := time.Parse(time.RFC3339, m["paused_until"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(10*time.Minute), until, time.Minute)
	code, m = e.do("POST", "/v1/destinations/orders/resume", e.admin, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, destination.StateActive, m["state"])

	// Rotate: a generated secret is answered once; the old one signs during
	// the overlap. A secret given is not answered.
	code, m = e.do("POST", "/v1/destinations/orders/rotate-secret", e.admin, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	next, _ := m["secret"].(string)
	require.True(t, strings.HasPrefix(next, webhook.SecretPrefix), m)
	require.NotEqual(t, secret, next)
	require.Contains(t, m, "previous_secret_until")
	mine := webhook.GenerateSecret()
	code, m = e.send("POST", "/v1/destinations/orders/rotate-secret", e.admin, `{"secret":"`+mine+`","overlap":"0s"}`)
	require.Equal(t, http.StatusOK, code, m)
	require.NotContains(t, m, "secret")
	require.NotContains(t, m, "previous_secret_until", "overlap 0s: the old one stops at once")
	d, err = st.Get(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, mine, d.Secret)

	// Remove.
	code, m = e.do("DELETE", "/v1/destinations/audit", e.admin, "", nil)
	require.Equal(t, http.StatusNoContent, code, m)
	code, m = e.do("GET", "/v1/destinations/audit", e.read, "", nil)
	require.Equal(t, http.StatusNotFound, code, m)
	require.Contains(t, m["detail"], "destination not found: audit")
}

func TestDestinationRemovalWaitsForItsEvents(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	_, err := mustStore(t, e).Add(ctx, destFor("orders"))
	require.NoError(t, err)
	// The consumer relay would have, with an event waiting.
	_, err = e.srv.JS.CreateOrUpdateConsumer(ctx, stream.EventsStream, jetstream.ConsumerConfig{
		Durable: destination.ConsumerName("orders"), FilterSubjects: stream.DestFilters("orders"), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	code, m := e.send("POST", "/v1/events", e.publish, `{"dest":"orders","data":1}`)
	require.Equal(t, http.StatusAccepted, code, m)

	code, m = e.do("DELETE", "/v1/destinations/orders", e.admin, "", nil)
	require.Equal(t, http.StatusConflict, code, m)
	require.Contains(t, m["detail"], "still has 1 undelivered events")
	require.Contains(t, m["detail"], "force=true")
	code, m = e.do("DELETE", "/v1/destinations/orders?force=maybe", e.admin, "", nil)
	require.Equal(t, http.StatusBadRequest, code, m)
	require.Equal(t, "force", m["field"])
	code, m = e.do("DELETE", "/v1/destinations/orders?force=true", e.admin, "", nil)
	require.Equal(t, http.StatusNoContent, code, m)
	_, err = mustStore(t, e).Get(ctx, "orders")
	require.ErrorIs(t, err, destination.ErrNotFound)
}

// A destination's body template and its content type, through the API:
// created, shown, changed, removed. Its text may hold a credential: admin
// keys get it; read keys get its size and SHA-256 only.
func TestDestinationBodyTemplateOverHTTP(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	const tmpl = `{"text": {{json .Type}}, "routing_key": "rk-s3cret-42"}`
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(tmpl)))
	code, m := e.send("POST", "/v1/destinations", e.admin, `{"name":"slack","url":"https://hooks.example.com/x","no_secret":true,"body_template":`+strconv.Quote(tmpl)+`}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, tmpl, m["body_template"])
	require.Equal(t, "application/json", m["body_content_type"], "the default")
	d, err := mustStore(t, e).Get(ctx, "slack")
	require.NoError(t, err)
	require.Equal(t, tmpl, d.BodyTemplate)

	code, m = e.do("GET", "/v1/destinations/slack", e.admin, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, tmpl, m["body_template"], "an admin key sees the text")
	require.Equal(t, float64(len(tmpl)), m["body_template_bytes"])
	require.Equal(t, sum, m["body_template_sha256"])
	code, m = e.do("GET", "/v1/destinations/slack", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.NotContains(t, m, "body_template", "a read key does not")
	require.Equal(t, float64(len(tmpl)), m["body_template_bytes"], "but sees that one is set")
	require.Equal(t, sum, m["body_template_sha256"])
	noSecretIn(t, m, "rk-s3cret-42")
	code, m = e.do("GET", "/v1/destinations", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	noSecretIn(t, m, "rk-s3cret-42")
	require.Equal(t, sum, m["destinations"].([]any)[0].(map[string]any)["body_template_sha256"])
	code, m = e.do("GET", "/v1/destinations", e.admin, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, tmpl, m["destinations"].([]any)[0].(map[string]any)["body_template"])

	code, m = e.send("PATCH", "/v1/destinations/slack", e.admin, `{"body_content_type":"text/plain; charset=utf-8"}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, tmpl, m["body_template"], "unchanged")
	require.Equal(t, "text/plain; charset=utf-8", m["body_content_type"])

	code, m = e.send("PATCH", "/v1/destinations/slack", e.admin, `{"body_template":""}`)
	require.Equal(t, http.StatusOK, code, m)
	require.NotContains(t, m, "body_template", "removed")
	require.NotContains(t, m, "body_template_bytes")
	require.NotContains(t, m, "body_template_sha256")
	require.NotContains(t, m, "body_content_type", "with its content type")
}

func TestDestinationsRefuseBadRequests(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	_, err := mustStore(t, e).Add(ctx, destFor("orders"))
	require.NoError(t, err)
	// The address policy of the relays, as 'relay run' records it: public
	// addresses only.
	require.NoError(t, egress.AgreePolicy(ctx, e.srv.JS, egress.Policy{}))
	big := `{"name":"big","url":"https://x.example.com","filter":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, tc := range []struct {
		name, method, path, key, ct, body string
		status                            int
		field, detail                     string
	}{
		{"no key", "GET", "/v1/destinations", "", "", "", 401, "", "an API key is required"},
		{"publish key lists", "GET", "/v1/destinations", e.publish, "", "", 403, "", "this needs read or admin"},
		{"publish key reads", "GET", "/v1/destinations/orders", e.publish, "", "", 403, "", "this needs read or admin"},
		{"read key creates", "POST", "/v1/destinations", e.read, "application/json", `{"name":"x","url":"https://x.example.com"}`, 403, "", `the key "reader" has scope read; this needs admin`},
		{"publish key creates", "POST", "/v1/destinations", e.publish, "application/json", `{"name":"x","url":"https://x.example.com"}`, 403, "", "this needs admin"},
		{"read key updates", "PATCH", "/v1/destinations/orders", e.read, "application/json", `{}`, 403, "", "this needs admin"},
		{"read key removes", "DELETE", "/v1/destinations/orders", e.read, "", "", 403, "", "this needs admin"},
		{"read key pauses", "POST", "/v1/destinations/orders/pause", e.read, "", "", 403, "", "this needs admin"},
		{"read key resumes", "POST", "/v1/destinations/orders/resume", e.read, "", "", 403, "", "this needs admin"},
		{"read key rotates", "POST", "/v1/destinations/orders/rotate-secret", e.read, "", "", 403, "", "this needs admin"},
		{"not JSON", "POST", "/v1/destinations", e.admin, "text/plain", `name=x`, 415, "", "application/json"},
		{"too large", "POST", "/v1/destinations", e.admin, "application/json", big, 413, "", "larger than 65536 bytes"},
		{"unknown field", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","retries":3}`, 400, "retries", "unknown field"},
		{"wrong type", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","concurrency":"4"}`, 400, "concurrency", "concurrency must be a whole number, not a JSON string"},
		{"no name", "POST", "/v1/destinations", e.admin, "application/json", `{"url":"https://x.example.com"}`, 422, "name", ""},
		{"bad name", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"Orders!","url":"https://x.example.com"}`, 422, "name", ""},
		{"no url", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x"}`, 422, "url", "url is required"},
		{"url and urls", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","urls":["https://y.example.com"]}`, 422, "urls", "not both"},
		{"empty urls", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","urls":[]}`, 422, "urls", "one URL or more"},
		{"bad url", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"ftp://x.example.com"}`, 422, "url", "scheme must be http or https"},
		{"bad pool url", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","urls":["https://x.example.com","ftp://y"]}`, 422, "urls", "URL 2 of the pool"},
		{"blocked url", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"http://10.1.2.3/hook"}`, 422, "url", "10.1.2.3 is 10.1.2.3, a non-public address"},
		{"bad strategy", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","url_strategy":"random"}`, 422, "url_strategy", `url-strategy "random"`},
		{"secret and no secret", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","secret":"whsec_eA==","no_secret":true}`, 422, "no_secret", "exclude each other"},
		{"empty secret", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","secret":""}`, 422, "secret", "no_secret"},
		{"bad secret", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","secret":"hunter2"}`, 422, "secret", "not a Standard Webhooks secret"},
		{"bad header", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","headers":{"Content-Length":"1"}}`, 422, "headers", "set by relay"},
		{"bad timeout", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","timeout":"soon"}`, 422, "timeout", `timeout "soon": give a duration`},
		{"short timeout", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","timeout":"1ms"}`, 422, "timeout", "between 100ms and 10m"},
		{"no attempts", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","max_attempts":0}`, 422, "max_attempts", "max_attempts 0: give 1 or more"},
		{"bad backoff", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","backoff_base":"1m","backoff_max":"1s"}`, 422, "backoff_max", "must not be below the base"},
		{"bad jitter", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","jitter":0.9}`, 422, "jitter", "between 0 and 0.5"},
		{"bad concurrency", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","concurrency":2000}`, 422, "concurrency", "between 1 and 1024"},
		{"bad rate", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","rate_limit":-1}`, 422, "rate_limit", "rate limit -1"},
		{"bad breaker", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","breaker_pause":"1ms"}`, 422, "breaker_pause", "at least 1s"},
		{"bad on gone", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","on_gone":"ignore"}`, 422, "on_gone", `on-gone "ignore"`},
		{"partitions unordered", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","partitions":4}`, 422, "partitions", "ordered destinations only"},
		{"ordered and shared", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","ordered":true,"shared":true}`, 422, "shared", "unordered destinations only"},
		{"too many partitions", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","ordered":true,"partitions":65}`, 422, "partitions", "between 1 and 64"},
		{"type twice", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","types":["a.b","a.b"]}`, 422, "types", "types a.b given twice"},
		{"bad type", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","types":["a b"]}`, 422, "types", "invalid event type pattern"},
		{"bad filter", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","filter":"data.amount >"}`, 422, "filter", "filter: filter does not compile"},
		{"bad body template", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","body_template":"{{.Data"}`, 422, "body_template", "body_template: body template does not compile: template: body:1: unclosed action"},
		{"body content type alone", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","body_content_type":"text/plain"}`, 422, "body_content_type", "applies with a body template only"},
		{"bad body content type", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"x","url":"https://x.example.com","body_template":"{}","body_content_type":"json"}`, 422, "body_content_type", "is not type/subtype"},
		{"exists", "POST", "/v1/destinations", e.admin, "application/json", `{"name":"orders","url":"https://x.example.com"}`, 409, "name", "already exists"},
		{"update unknown", "PATCH", "/v1/destinations/nobody", e.admin, "application/json", `{"concurrency":2}`, 404, "", "destination not found: nobody"},
		{"update bad name", "PATCH", "/v1/destinations/No!", e.admin, "application/json", `{"concurrency":2}`, 404, "", "destination not found"},
		{"update layout", "PATCH", "/v1/destinations/orders", e.admin, "application/json", `{"ordered":true}`, 409, "ordered", "cannot change the partition layout"},
		{"update bad value", "PATCH", "/v1/destinations/orders", e.admin, "application/json", `{"timeout":"1h"}`, 422, "timeout", "between 100ms and 10m"},
		{"update blocked url", "PATCH", "/v1/destinations/orders", e.admin, "application/json", `{"urls":["https://x.example.com","http://127.0.0.1:9/h"]}`, 422, "urls", "non-public address"},
		{"update bad body template", "PATCH", "/v1/destinations/orders", e.admin, "application/json", `{"body_template":"{{template \"x\"}}"}`, 422, "body_template", `{{template "x"}} is not allowed`},
		{"update body content type alone", "PATCH", "/v1/destinations/orders", e.admin, "application/json", `{"body_content_type":"text/plain"}`, 422, "body_content_type", "applies with a body template only"},
		{"update name", "PATCH", "/v1/destinations/orders", e.admin, "application/json", `{"name":"other"}`, 400, "name", "does not change"},
		{"update unknown field", "PATCH", "/v1/destinations/orders", e.admin, "application/json", `{"paused":true}`, 400, "paused", "unknown field"},
		{"update not JSON", "PATCH", "/v1/destinations/orders", e.admin, "text/plain", `x`, 415, "", "application/json"},
		{"get unknown", "GET", "/v1/destinations/nobody", e.read, "", "", 404, "", "destination not found: nobody"},
		{"remove unknown", "DELETE", "/v1/destinations/nobody", e.admin, "", "", 404, "", "destination not found: nobody"},
		{"pause unknown", "POST", "/v1/destinations/nobody/pause", e.admin, "", "", 404, "", "destination not found"},
		{"pause negative", "POST", "/v1/destinations/orders/pause", e.admin, "application/json", `{"for":"-1m"}`, 422, "for", "positive duration"},
		{"pause bad body", "POST", "/v1/destinations/orders/pause", e.admin, "application/json", `{"until":"later"}`, 400, "until", "unknown field"},
		{"pause not JSON", "POST", "/v1/destinations/orders/pause", e.admin, "text/plain", `10m`, 415, "", "application/json"},
		{"pause too large", "POST", "/v1/destinations/orders/pause", e.admin, "application/json", `{"for":"` + strings.Repeat("1", 70<<10) + `"}`, 413, "", "larger than"},
		{"resume unknown", "POST", "/v1/destinations/nobody/resume", e.admin, "", "", 404, "", "destination not found"},
		{"rotate unknown", "POST", "/v1/destinations/nobody/rotate-secret", e.admin, "", "", 404, "", "destination not found"},
		{"rotate bad overlap", "POST", "/v1/destinations/orders/rotate-secret", e.admin, "application/json", `{"overlap":"-1h"}`, 422, "overlap", "give a duration"},
		{"rotate bad secret", "POST", "/v1/destinations/orders/rotate-secret", e.admin, "application/json", `{"secret":"hunter2"}`, 422, "secret", "not a Standard Webhooks secret"},
		{"rotate wrong type", "POST", "/v1/destinations/orders/rotate-secret", e.admin, "application/json", `{"overlap":24}`, 400, "overlap", "overlap must be a string, not a JSON number"},
		{"rotate not JSON", "POST", "/v1/destinations/orders/rotate-secret", e.admin, "text/plain", `x`, 415, "", "application/json"},
		{"rotate too large", "POST", "/v1/destinations/orders/rotate-secret", e.admin, "application/json", `{"secret":"` + strings.Repeat("1", 70<<10) + `"}`, 413, "", "larger than"},
		{"wrong method", "PUT", "/v1/destinations/orders", e.admin, "application/json", `{}`, 405, "", "use GET, PATCH, DELETE"},
		{"wrong method on an action", "GET", "/v1/destinations/orders/pause", e.admin, "", "", 405, "", "use POST"},
	} {
		code, m := e.do(tc.method, tc.path, tc.key, tc.ct, []byte(tc.body))
		require.Equal(t, tc.status, code, "%s: %v", tc.name, m)
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], "%s: %v", tc.name, m)
		} else {
			require.NotContains(t, m, "field", tc.name)
		}
		require.Contains(t, m["detail"], tc.detail, tc.name)
	}
	d, err := mustStore(t, e).Get(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, destFor("orders").URL, d.URL, "refused changes changed nothing")
	require.Equal(t, destination.StateActive, d.State(time.Now()))
	_, err = mustStore(t, e).Get(ctx, "x")
	require.ErrorIs(t, err, destination.ErrNotFound, "nothing refused was added")
}
