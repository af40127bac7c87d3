package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
)

// requireDownload checks an answer of a body's bytes: exactly want, as a
// download a browser neither renders nor sniffs.
func requireDownload(t *testing.T, resp *http.Response, got, want []byte, file string) {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", got)
	require.Equal(t, want, got, "the exact bytes")
	require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.Equal(t, `attachment; filename="`+file+`"`, resp.Header.Get("Content-Disposition"))
}

// TestBodiesDownloadAsTheirExactBytes: an event's and a dead letter's body
// are answered as the bytes published (JSON with its spaces, text,
// binary), as a download; a body that is gone is a 404 saying so.
func TestBodiesDownloadAsTheirExactBytes(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	pretty := []byte("{\n  \"a\" : [1,  2],\n\t\"b\": \"<b>x</b>\"\n}\n")
	binary := []byte{0xff, 0x00, 0x01, '<'}

	// Dead letters: holding the body, and one whose large event is gone.
	l := letterFor("a", "a1", 1, time.Now().UTC())
	l.Body = pretty
	seq := e.writeLetter(l)
	b := letterFor("a", "a2", 2, time.Now().UTC())
	b.Body = binary
	binSeq := e.writeLetter(b)
	gone := letterFor("a", "a3", 999, time.Now().UTC())
	gone.Body, gone.EventOmitted = nil, true
	goneSeq := e.writeLetter(gone)

	resp, got := e.exchange("GET", fmt.Sprintf("/v1/dead-letters/%d/body", seq), e.read, "", nil)
	requireDownload(t, resp, got, pretty, fmt.Sprintf("dead-letter-%d.body", seq))
	resp, got = e.exchange("GET", fmt.Sprintf("/v1/dead-letters/%d/body", binSeq), e.admin, "", nil)
	requireDownload(t, resp, got, binary, fmt.Sprintf("dead-letter-%d.body", binSeq))
	code, m := e.do("GET", fmt.Sprintf("/v1/dead-letters/%d/body", goneSeq), e.read, "", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, m["detail"], "no longer holds it")
	code, m = e.do("GET", "/v1/dead-letters/12345/body", e.read, "", nil)
	require.Equal(t, http.StatusNotFound, code, m)
	code, m = e.do("GET", "/v1/dead-letters/x/body", e.read, "", nil)
	require.Equal(t, http.StatusBadRequest, code, m)
	code, _ = e.do("GET", fmt.Sprintf("/v1/dead-letters/%d/body", seq), e.publish, "", nil)
	require.Equal(t, http.StatusForbidden, code, "scope read")
	code, _ = e.do("GET", fmt.Sprintf("/v1/dead-letters/%d/body", seq), "", "", nil)
	require.Equal(t, http.StatusUnauthorized, code)

	// Events, from the delivery log and the events stream; an id with a
	// '/' and a '"' is one path segment and no part of the file name.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(sink.Close)
	_, err := mustStore(t, e).Add(context.Background(), destination.Destination{Name: "calm", URL: sink.URL})
	require.NoError(t, err)
	runRelay(t, e)
	prod, err := publish.NewProducer(context.Background(), e.srv.JS)
	require.NoError(t, err)
	for id, body := range map[string][]byte{"evt-pretty": pretty, `evt/"bin"`: binary} {
		_, err = prod.Publish(context.Background(), publish.Event{Dest: "calm", ID: id, Data: body})
		require.NoError(t, err)
		e.waitAttempts("event="+url.QueryEscape(id)+"&status=2xx", 1)
	}
	resp, got = e.exchange("GET", "/v1/events/evt-pretty/body", e.read, "", nil)
	requireDownload(t, resp, got, pretty, "event-evt-pretty.body")
	resp, got = e.exchange("GET", "/v1/events/"+url.PathEscape(`evt/"bin"`)+"/body", e.read, "", nil)
	requireDownload(t, resp, got, binary, "event-evt__bin_.body")
	code, m = e.do("GET", "/v1/events/evt-none/body", e.read, "", nil)
	require.Equal(t, http.StatusNotFound, code, m)
}
