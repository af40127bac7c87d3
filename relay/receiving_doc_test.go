package relay

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relaydev/relay/webhook"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// docs/receiving.md's header table lists every header relay sets on a
// delivery, and only those: a typed, signed, traced delivery is sent, and
// what the receiver gets, less the event's own headers and the
// destination's configured ones, is what the table names.
func TestReceivingDocListsEveryHeader(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/receiving.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "| header | what |")
	require.True(t, ok, "docs/receiving.md has a header table")
	table, _, _ = strings.Cut(table, "\n\n")
	documented := map[string]bool{}
	for line := range strings.Lines(table) {
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			documented[http.CanonicalHeaderKey(m[1])] = true
		}
	}

	srv, got := senderTestCapturingServer(t)
	d := senderTestDest(srv.URL, 5*time.Second)
	d.Secret = webhook.GenerateSecret()
	d.Headers = map[string]string{"Authorization": "Bearer t"}
	ts, err := trace.ParseTraceState("vendor=x")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	ev := Delivery{ID: "evt_1", Type: "order.paid", Body: []byte(`{}`), Headers: http.Header{"X-Region": {"eu"}}, Trace: sc}
	res := senderTestSender(t).Send(t.Context(), d, ev)
	require.NoError(t, res.Err)
	r := senderTestReceive(t, got)
	sent := map[string]bool{"Host": true} // net/http moves it to Request.Host
	for k := range r.Header {
		if _, ours := d.Headers[k]; !ours && ev.Headers.Get(k) == "" {
			sent[k] = true
		}
	}
	require.Equal(t, sent, documented, "the headers relay sends, and those docs/receiving.md lists")
}
