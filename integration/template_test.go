package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/webhook"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/relay"
)

// A destination added by 'relay dest add --body-template' with the Slack
// template receives the rendered JSON, as application/json, signed over
// the body sent; a destination whose template fails on an event
// dead-letters it with reason template_error and why, without an attempt,
// and delivers the events it renders.
func TestBodyTemplateRendersSignsAndDeadLettersFailures(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, plain := newSink(t, nil), newSink(t, nil)
	secret := webhook.GenerateSecret()

	// Refused when saved: exit 2, nothing stored.
	bad := filepath.Join(t.TempDir(), "bad.tmpl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"text": {{json .Data.reason}`), 0o600))
	code, out := e.relayCLI("dest", "add", "slack", "--url", s.URL+"/slack", "--body-template", bad)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "--body-template: body template does not compile")
	_, err := e.store.Get(context.Background(), "slack")
	require.ErrorIs(t, err, destination.ErrNotFound)

	code, out = e.relayCLI("dest", "add", "slack", "--url", s.URL+"/slack", "--secret", secret,
		"--type", "ops.>", "--body-template", "../docs/templates/slack.tmpl")
	require.Equal(t, 0, code, out)
	strict := filepath.Join(t.TempDir(), "strict.tmpl")
	require.NoError(t, os.WriteFile(strict, []byte(`{{.Type}} in {{.Data.dest}}: {{.Data.reason}}`), 0o600))
	code, out = e.relayCLI("dest", "add", "strict", "--url", plain.URL+"/strict", "--no-secret",
		"--type", "ops.>", "--body-template", strict, "--body-content-type", "text/plain; charset=utf-8")
	require.Equal(t, 0, code, out)
	rec, _ := e.startRelay()

	publishBody := func(body string) publish.Published {
		t.Helper()
		res, err := e.prod.Publish(context.Background(), publish.Event{Type: "ops.destination.breaker_opened", Data: []byte(body)})
		require.NoError(t, err)
		return res
	}
	// A reason with everything JSON and Slack must escape.
	full := publishBody(`{"dest":"orders","reason":"20 failures: 503 \"Unavailable\"\nfrom <https://x.example.com/?a=1&b=2>","at":"2026-03-04T05:06:07Z"}`)
	noReason := publishBody(`{"dest":"orders"}`)
	notJSON := publishBody("breaker opened <orders>")

	eventually(t, 60*time.Second, func() bool { return rec.count(anyOutcome) == 6 && e.settled("slack") && e.settled("strict") },
		"six outcomes and settled consumers (have %d)", rec.count(anyOutcome))

	tmpl, err := destination.CompileBodyTemplate(mustRead(t, "../docs/templates/slack.tmpl"))
	require.NoError(t, err)
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	bodies := map[string]string{}
	for _, h := range s.all() {
		require.Equal(t, http.StatusOK, h.Status)
		require.Equal(t, "application/json", h.Header.Get("Content-Type"))
		require.NoError(t, wh.Verify([]byte(h.Body), h.Header), "signed over the rendered body")
		require.True(t, json.Valid([]byte(h.Body)), h.Body)
		bodies[h.ID] = h.Body
	}
	hits := plain.all()
	require.Len(t, hits, 1, "strict receives the one event it renders")
	require.Equal(t, full.ID, hits[0].ID)
	require.Equal(t, "text/plain; charset=utf-8", hits[0].Header.Get("Content-Type"))
	require.Equal(t, "ops.destination.breaker_opened in orders: 20 failures: 503 \"Unavailable\"\nfrom <https://x.example.com/?a=1&b=2>", hits[0].Body)
	require.Empty(t, hits[0].Header.Get("webhook-signature"), "strict is not signed")
	require.Len(t, bodies, 3, "slack renders every event")
	for _, res := range []publish.Published{full, noReason, notJSON} {
		var data string
		switch res {
		case full:
			data = `{"dest":"orders","reason":"20 failures: 503 \"Unavailable\"\nfrom <https://x.example.com/?a=1&b=2>","at":"2026-03-04T05:06:07Z"}`
		case noReason:
			data = `{"dest":"orders"}`
		default:
			data = "breaker opened <orders>"
		}
		want, err := tmpl.Render(context.Background(), destination.NewTemplateEvent(res.ID, "ops.destination.breaker_opened", "", "slack", e.storedAt(res.Seq), []byte(data), nil))
		require.NoError(t, err)
		require.JSONEq(t, string(want), bodies[res.ID])
	}
	var msg struct{ Text string }
	require.NoError(t, json.Unmarshal([]byte(bodies[full.ID]), &msg))
	require.Contains(t, msg.Text, "• reason: 20 failures: 503 \"Unavailable\"\nfrom &lt;https://x.example.com/?a=1&amp;b=2&gt;")

	letters := e.deadLetters("strict")
	require.Len(t, letters, 2)
	notes := map[string]string{}
	for _, l := range letters {
		require.Equal(t, relay.ReasonTemplateError, l.Reason)
		require.Equal(t, 0, l.Attempts, "no attempt was made")
		notes[l.EventID] = l.Note
	}
	require.Contains(t, notes[noReason.ID], `map has no entry for key "reason"`)
	require.Contains(t, notes[notJSON.ID], `nil pointer evaluating interface {}.dest`, "a body that is not JSON: .Data is nil")
	require.Empty(t, e.deadLetters("slack"))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
