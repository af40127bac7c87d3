package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// letterFor is a dead letter of event id for dest, that died at deadAt
// after a 503.
func letterFor(dest, id string, streamSeq uint64, deadAt time.Time) dlq.Letter {
	return dlq.Letter{
		DeadAt: deadAt, Dest: dest, EventID: id, Reason: "max_attempts", Attempts: 3, LastStatus: 503,
		Subject: stream.InSubject(dest, ""), StreamSeq: streamSeq, Body: []byte(`{"id":"` + id + `"}`),
		Headers: nats.Header{"X-Tenant": []string{"t-" + id}, "X-Api-Key": []string{"k-" + id}},
		History: []dlq.Attempt{{N: 1, At: deadAt, Status: 503}, {N: 2, At: deadAt, Status: 503}, {N: 3, At: deadAt, Status: 503}},
	}
}

// writeLetter stores l and returns its sequence.
func (e *apiEnv) writeLetter(l dlq.Letter) uint64 {
	e.t.Helper()
	seq, err := dlq.Writer{JS: e.srv.JS}.Write(context.Background(), l)
	require.NoError(e.t, err)
	return seq
}

// letterSeqs are the seqs of a page of dead letters.
func letterSeqs(m map[string]any) []uint64 {
	var out []uint64
	for _, l := range m["dead_letters"].([]any) {
		out = append(out, uint64(l.(map[string]any)["seq"].(float64)))
	}
	return out
}

func TestDeadLettersListAndShow(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	a1 := e.writeLetter(letterFor("a", "a1", 1, t0))
	b1 := letterFor("b", "b1", 2, t0.Add(10*time.Minute))
	b1.Reason, b1.LastStatus, b1.LastError = "permanent_status", 404, "not found"
	b1s := e.writeLetter(b1)
	a2 := letterFor("a", "a2", 3, t0.Add(20*time.Minute))
	a2.LastStatus, a2.LastError, a2.Key = 0, "dial tcp: refused", "k1"
	a2.Body = []byte{0xff, 0x00, 0x01}
	a2s := e.writeLetter(a2)
	text := letterFor("a", "a3", 4, t0.Add(30*time.Minute))
	text.Body = []byte("plain text")
	a3 := e.writeLetter(text)

	list := func(q string) []uint64 {
		t.Helper()
		code, m := e.do("GET", "/v1/dead-letters"+q, e.read, "", nil)
		require.Equal(t, http.StatusOK, code, "%s: %v", q, m)
		for _, l := range m["dead_letters"].([]any) {
			require.NotContains(t, l, "history", "a list leaves out history, headers and body")
			require.NotContains(t, l, "headers")
		}
		return letterSeqs(m)
	}
	require.Equal(t, []uint64{a1, b1s, a2s, a3}, list(""), "oldest first")
	require.Equal(t, []uint64{a1, a2s, a3}, list("?dest=a"))
	require.Equal(t, []uint64{b1s}, list("?reason=permanent_status"))
	require.Equal(t, []uint64{b1s}, list("?status=404"))
	require.Equal(t, []uint64{a2s}, list("?status=none"))
	since := url.QueryEscape(t0.Add(5 * time.Minute).Format(time.RFC3339))
	until := url.QueryEscape(t0.Add(25 * time.Minute).Format(time.RFC3339))
	require.Equal(t, []uint64{b1s, a2s}, list("?since="+since+"&until="+until))

	// Pages: limit, and after the last of the page before.
	var got []uint64
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		code, m := e.do("GET", "/v1/dead-letters?dest=a&limit=2"+after, e.admin, "", nil)
		require.Equal(t, http.StatusOK, code, m)
		got = append(got, letterSeqs(m)...)
		next, ok := m["next_after"]
		if !ok {
			break
		}
		after = fmt.Sprintf("&after=%d", uint64(next.(float64)))
	}
	require.Equal(t, []uint64{a1, a2s, a3}, got)

	// One, with its history, headers and body.
	code, m := e.do("GET", fmt.Sprintf("/v1/dead-letters/%d", a1), e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "a1", m["event_id"])
	require.Equal(t, map[string]any{"id": "a1"}, m["body"], "a JSON body as JSON")
	require.NotContains(t, m, "body_base64")
	require.Len(t, m["history"], 3)
	require.Equal(t, map[string]any{"X-Tenant": []any{"t-a1"}, "X-Api-Key": []any{"xxxxx"}}, m["headers"], "a credential is not shown")
	code, m = e.do("GET", fmt.Sprintf("/v1/dead-letters/%d", a2s), e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0x01}), m["body_base64"], "bytes in base64")
	require.NotContains(t, m, "body")
	require.Equal(t, "k1", m["key"])
	code, m = e.do("GET", fmt.Sprintf("/v1/dead-letters/%d", a3), e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, "plain text", m["body"], "text as a string")
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte("plain text")), m["body_base64"], "and its exact bytes")

	for _, tc := range []struct {
		name, path, key string
		status          int
		field, detail   string
	}{
		{"no key", "/v1/dead-letters", "", 401, "", "an API key is required"},
		{"publish key lists", "/v1/dead-letters", e.publish, 403, "", "this needs read or admin"},
		{"publish key reads", fmt.Sprintf("/v1/dead-letters/%d", a1), e.publish, 403, "", "this needs read or admin"},
		{"bad reason", "/v1/dead-letters?reason=tired", e.read, 422, "reason", `reason "tired": use one of max_attempts`},
		{"bad status", "/v1/dead-letters?status=5xx", e.read, 422, "status", "an HTTP status (100-599) or none"},
		{"bad dest", "/v1/dead-letters?dest=A!", e.read, 422, "dest", ""},
		{"bad since", "/v1/dead-letters?since=yesterday", e.read, 422, "since", "RFC 3339"},
		{"until before since", "/v1/dead-letters?since=" + until + "&until=" + since, e.read, 422, "until", "until must be after since"},
		{"bad limit", "/v1/dead-letters?limit=0", e.read, 422, "limit", "give 1 to 1000"},
		{"limit too high", "/v1/dead-letters?limit=1001", e.read, 422, "limit", "give 1 to 1000"},
		{"bad after", "/v1/dead-letters?after=-1", e.read, 422, "after", "next_after"},
		{"unknown parameter", "/v1/dead-letters?destination=a", e.read, 400, "destination", "unknown query parameter"},
		{"no such letter", "/v1/dead-letters/999", e.read, 404, "", "no dead letter with sequence 999"},
		{"not a seq", "/v1/dead-letters/abc", e.read, 400, "seq", "give a dead-letter sequence"},
		{"seq 0", "/v1/dead-letters/0", e.read, 400, "seq", "give a dead-letter sequence"},
	} {
		code, m := e.do("GET", tc.path, tc.key, "", nil)
		require.Equal(t, tc.status, code, "%s: %v", tc.name, m)
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], "%s: %v", tc.name, m)
		} else {
			require.NotContains(t, m, "field", tc.name)
		}
		require.Contains(t, m["detail"], tc.detail, tc.name)
	}
}

func TestDeadLettersReplay(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	ctx := context.Background()
	_, err := mustStore(t, e).Add(ctx, destFor("other"))
	require.NoError(t, err)
	now := time.Now().UTC()
	a1 := e.writeLetter(letterFor("a", "a1", 1, now))
	a2 := e.writeLetter(letterFor("a", "a2", 2, now))
	b1 := e.writeLetter(letterFor("b", "b1", 3, now))
	// A message on a dead-letter subject that is no dead letter.
	ack, err := e.srv.JS.Publish(ctx, stream.DLQSubject("a"), []byte("junk"))
	require.NoError(t, err)
	junk := ack.Sequence

	// Refused whole, nothing changed.
	before := e.lastSeq()
	for _, tc := range []struct {
		name, key, ct, body string
		status              int
		field, detail       string
	}{
		{"read key", e.read, "application/json", `{"all":true}`, 403, "", `the key "reader" has scope read; this needs admin`},
		{"publish key", e.publish, "application/json", `{"all":true}`, 403, "", "this needs admin"},
		{"not JSON", e.admin, "text/plain", `all`, 415, "", "application/json"},
		{"unknown field", e.admin, "application/json", `{"everything":true}`, 400, "everything", "unknown field"},
		{"wrong type", e.admin, "application/json", `{"seqs":"1"}`, 400, "seqs", "seqs must be an array, not a JSON string"},
		{"nothing said", e.admin, "application/json", `{}`, 422, "seqs", "say what to replay: seqs, filters such as dest, or all: true"},
		{"seqs and all", e.admin, "application/json", fmt.Sprintf(`{"seqs":[%d],"all":true}`, a1), 422, "all", "exclude each other"},
		{"seq 0", e.admin, "application/json", `{"seqs":[0]}`, 422, "seqs", "start at 1"},
		{"bad status", e.admin, "application/json", `{"status":true}`, 422, "status", "or \"none\""},
		{"bad reason", e.admin, "application/json", `{"reason":"tired"}`, 422, "reason", "use one of"},
		{"bad until", e.admin, "application/json", `{"until":"soon"}`, 422, "until", "RFC 3339"},
		{"unknown to_dest", e.admin, "application/json", `{"all":true,"to_dest":"nobody"}`, 404, "to_dest", "destination not found: nobody"},
		{"bad to_dest", e.admin, "application/json", `{"all":true,"to_dest":"No!"}`, 422, "to_dest", ""},
		{"no such seq", e.admin, "application/json", fmt.Sprintf(`{"seqs":[%d,999]}`, a1), 404, "", "no dead letter with sequence 999"},
	} {
		code, m := e.do("POST", "/v1/dead-letters/replay", tc.key, tc.ct, []byte(tc.body))
		require.Equal(t, tc.status, code, "%s: %v", tc.name, m)
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], "%s: %v", tc.name, m)
		}
		require.Contains(t, m["detail"], tc.detail, tc.name)
	}

	// A dry run counts, changes nothing.
	code, m := e.send("POST", "/v1/dead-letters/replay", e.admin, `{"dest":"a","dry_run":true}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, true, m["dry_run"])
	require.Equal(t, float64(3), m["matched"])
	require.Equal(t, float64(2), m["replayed"], "would be")
	require.Equal(t, []any{map[string]any{"seq": float64(junk), "detail": m["skipped"].([]any)[0].(map[string]any)["detail"]}}, m["skipped"])
	require.Contains(t, m["skipped"].([]any)[0].(map[string]any)["detail"], "malformed")
	require.Equal(t, before, e.lastSeq(), "nothing published")

	// By seqs, to another destination.
	code, m = e.send("POST", "/v1/dead-letters/replay", e.admin, fmt.Sprintf(`{"seqs":[%d],"to_dest":"other"}`, b1))
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, float64(1), m["replayed"])
	require.Equal(t, []any{}, m["failed"])
	s, err := e.srv.JS.Stream(ctx, stream.EventsStream)
	require.NoError(t, err)
	// The replay, and after it relay.replay.finished.
	raw, err := s.GetMsg(ctx, e.lastSeq()-1)
	require.NoError(t, err)
	require.Equal(t, "b1", raw.Header.Get(stream.HdrEventID))
	require.Equal(t, stream.InSubject("other", ""), raw.Subject)
	done, err := s.GetMsg(ctx, e.lastSeq())
	require.NoError(t, err)
	require.Equal(t, stream.TypeSubject(opevent.ReplayFinished), done.Subject)
	require.JSONEq(t, `"api"`, mustField(t, done.Data, "by"))

	// By filter: the malformed one is skipped and stays.
	code, m = e.send("POST", "/v1/dead-letters/replay", e.admin, `{"dest":"a","status":503}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, float64(2), m["matched"], "the malformed letter has no status")
	require.Equal(t, float64(2), m["replayed"])
	code, m = e.do("GET", "/v1/dead-letters", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, []uint64{junk}, letterSeqs(m), "replayed letters are removed")
	for _, seq := range []uint64{a1, a2} {
		code, _ := e.do("GET", fmt.Sprintf("/v1/dead-letters/%d", seq), e.read, "", nil)
		require.Equal(t, http.StatusNotFound, code)
	}
	code, m = e.send("POST", "/v1/dead-letters/replay", e.admin, `{"all":true}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, float64(0), m["replayed"])
	require.Len(t, m["skipped"], 1)
}

func TestDeadLettersPurge(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	now := time.Now().UTC()
	a1 := e.writeLetter(letterFor("a", "a1", 1, now))
	a2 := e.writeLetter(letterFor("a", "a2", 2, now))
	b1 := e.writeLetter(letterFor("b", "b1", 3, now))
	for _, tc := range []struct {
		name, key, ct, body string
		status              int
		field, detail       string
	}{
		{"read key", e.read, "application/json", `{"all":true}`, 403, "", "this needs admin"},
		{"publish key", e.publish, "application/json", `{"all":true}`, 403, "", "this needs admin"},
		{"not JSON", e.admin, "text/plain", `all`, 415, "", "application/json"},
		{"unknown field", e.admin, "application/json", `{"yes":true}`, 400, "yes", "unknown field"},
		{"to_dest", e.admin, "application/json", `{"all":true,"to_dest":"a"}`, 400, "to_dest", "replay's"},
		{"nothing said", e.admin, "application/json", `{"dry_run":true}`, 422, "seqs", "say what to purge"},
		{"bad status", e.admin, "application/json", `{"status":"5xx"}`, 422, "status", "HTTP status"},
		{"no such seq", e.admin, "application/json", `{"seqs":[999]}`, 404, "", "no dead letter with sequence 999"},
	} {
		code, m := e.do("POST", "/v1/dead-letters/purge", tc.key, tc.ct, []byte(tc.body))
		require.Equal(t, tc.status, code, "%s: %v", tc.name, m)
		if tc.field != "" {
			require.Equal(t, tc.field, m["field"], "%s: %v", tc.name, m)
		}
		require.Contains(t, m["detail"], tc.detail, tc.name)
	}
	code, m := e.send("POST", "/v1/dead-letters/purge", e.admin, `{"dest":"a","dry_run":true}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, map[string]any{"dry_run": true, "matched": float64(2), "purged": float64(2)}, m)
	code, m = e.send("POST", "/v1/dead-letters/purge", e.admin, fmt.Sprintf(`{"seqs":[%d]}`, a2))
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, float64(1), m["purged"])
	code, m = e.do("GET", "/v1/dead-letters", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, []uint64{a1, b1}, letterSeqs(m))
	code, m = e.send("POST", "/v1/dead-letters/purge", e.admin, `{"all":true}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, float64(2), m["purged"])
	code, m = e.do("GET", "/v1/dead-letters", e.read, "", nil)
	require.Equal(t, http.StatusOK, code, m)
	require.Empty(t, m["dead_letters"])
}

// mustField is the JSON of field name of the object in b.
func mustField(t *testing.T, b []byte, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	return string(m[name])
}

// Every reason relay dead-letters for is in the document's reason enums,
// and nothing else is: a client generated from it takes every letter.
func TestDocumentListsEveryReason(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	require.NoError(t, err)
	want := slices.Sorted(slices.Values(relay.Reasons()))
	var enums [][]string
	walk := func(s *openapi3.Schema) {
		for name, p := range s.Properties {
			if name == "reason" && len(p.Value.Enum) > 0 {
				var got []string
				for _, v := range p.Value.Enum {
					got = append(got, v.(string))
				}
				enums = append(enums, got)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s.Value)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, p := range op.Parameters {
				if p.Value.Name == "reason" && len(p.Value.Schema.Value.Enum) > 0 {
					var got []string
					for _, v := range p.Value.Schema.Value.Enum {
						got = append(got, v.(string))
					}
					enums = append(enums, got)
				}
			}
		}
	}
	require.NotEmpty(t, enums)
	for _, got := range enums {
		slices.Sort(got)
		require.Equal(t, want, got)
	}
}
