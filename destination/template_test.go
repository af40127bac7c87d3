package destination

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var tmplTime = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// operatorEvent is an event like relay's operator events, with a reason
// that has everything JSON and Slack must escape.
func operatorEvent(body string) TemplateEvent {
	return NewTemplateEvent("evt-1", "relay.destination.breaker_opened", "", "slack", tmplTime, []byte(body), http.Header{"X-Region": {"eu"}})
}

func mustCompile(t *testing.T, src string) *BodyTemplate {
	t.Helper()
	b, err := CompileBodyTemplate(src)
	require.NoError(t, err)
	return b
}

func render(t *testing.T, src string, ev TemplateEvent) (string, error) {
	t.Helper()
	out, err := mustCompile(t, src).Render(context.Background(), ev)
	return string(out), err
}

func shipped(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/templates/" + name)
	require.NoError(t, err)
	return string(b)
}

// Bodies with quotes, backslashes, newlines, tabs, control characters, <,
// & and > in keys and values, non-JSON and JSON that is not an object.
var awkwardBodies = []string{
	`{"dest":"orders","reason":"5xx \"Bad Gateway\"\nfrom <https://x.example.com/a?b=1&c=2>\t\u0001 \\ end","at":"2026-03-04T05:06:07Z","attempts":20,"big":12345678901234567890,"nested":{"a":[1,"<b>"]},"ok":false,"none":null,"k\"ey<>":"v"}`,
	"not json: \"quoted\"\nline two <b> & \x00 \xff",
	`["a","<b>"]`,
	`"just a string with \"quotes\""`,
	`42`,
	``,
	`{}`,
}

func TestShippedSlackTemplateRendersValidJSON(t *testing.T) {
	t.Parallel()
	tmpl := mustCompile(t, shipped(t, "slack.tmpl"))
	for _, body := range awkwardBodies {
		out, err := tmpl.Render(context.Background(), operatorEvent(body))
		require.NoError(t, err, body)
		var msg map[string]string
		require.NoError(t, json.Unmarshal(out, &msg), "valid JSON for %q:\n%s", body, out)
		require.Len(t, msg, 1, "a Slack message of text only")
		text := msg["text"]
		require.True(t, strings.HasPrefix(text, "*relay.destination.breaker_opened*"), text)
		require.Contains(t, text, "_evt-1 · 2026-03-04 05:06:07 UTC_")
		require.NotContains(t, text, "<", "Slack markup escaped")
		require.NotContains(t, text, ">")
	}
	out, err := tmpl.Render(context.Background(), operatorEvent(awkwardBodies[0]))
	require.NoError(t, err)
	var msg map[string]string
	require.NoError(t, json.Unmarshal(out, &msg))
	require.Equal(t, "*relay.destination.breaker_opened*\n"+
		"• at: 2026-03-04T05:06:07Z\n"+
		"• attempts: 20\n"+
		"• big: 12345678901234567890\n"+
		"• dest: orders\n"+
		"• k\"ey&lt;&gt;: v\n"+
		"• nested: {\"a\":[1,\"&lt;b&gt;\"]}\n"+
		"• none: null\n"+
		"• ok: false\n"+
		"• reason: 5xx \"Bad Gateway\"\nfrom &lt;https://x.example.com/a?b=1&amp;c=2&gt;\t\x01 \\ end\n"+
		"_evt-1 · 2026-03-04 05:06:07 UTC_", msg["text"])

	out, err = tmpl.Render(context.Background(), NewTemplateEvent("e2", "", "", "d", tmplTime, []byte("plain <text>"), nil))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &msg))
	require.Equal(t, "*event*\n```plain &lt;text&gt;```\n_e2 · 2026-03-04 05:06:07 UTC_", msg["text"])
}

func TestShippedTeamsTemplateRendersValidJSON(t *testing.T) {
	t.Parallel()
	tmpl := mustCompile(t, shipped(t, "teams.tmpl"))
	type card struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string `json:"contentType"`
			Content     struct {
				Type string `json:"type"`
				Body []struct {
					Type  string `json:"type"`
					Text  string `json:"text"`
					Facts []struct{ Title, Value string }
				} `json:"body"`
			} `json:"content"`
		} `json:"attachments"`
	}
	for _, body := range awkwardBodies {
		out, err := tmpl.Render(context.Background(), operatorEvent(body))
		require.NoError(t, err, body)
		var c card
		require.NoError(t, json.Unmarshal(out, &c), "valid JSON for %q:\n%s", body, out)
		require.Equal(t, "message", c.Type)
		require.Len(t, c.Attachments, 1)
		require.Equal(t, "application/vnd.microsoft.card.adaptive", c.Attachments[0].ContentType)
		require.Equal(t, "AdaptiveCard", c.Attachments[0].Content.Type)
		require.Equal(t, "relay.destination.breaker_opened", c.Attachments[0].Content.Body[0].Text)
	}
	out, err := tmpl.Render(context.Background(), operatorEvent(awkwardBodies[0]))
	require.NoError(t, err)
	var c card
	require.NoError(t, json.Unmarshal(out, &c))
	body := c.Attachments[0].Content.Body
	require.Len(t, body, 3)
	require.Equal(t, "evt-1 · 2026-03-04 05:06:07 UTC", body[1].Text)
	require.Equal(t, "FactSet", body[2].Type)
	facts := map[string]string{}
	for _, f := range body[2].Facts {
		facts[f.Title] = f.Value
	}
	require.Equal(t, map[string]string{
		"at": "2026-03-04T05:06:07Z", "attempts": "20", "big": "12345678901234567890", "dest": "orders",
		`k"ey<>`: "v", "nested": `{"a":[1,"<b>"]}`, "none": "null", "ok": "false",
		"reason": "5xx \"Bad Gateway\"\nfrom <https://x.example.com/a?b=1&c=2>\t\x01 \\ end",
	}, facts)

	out, err = tmpl.Render(context.Background(), operatorEvent("not json\n<b>"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &c))
	require.Equal(t, "not json\n<b>", c.Attachments[0].Content.Body[2].Text)
}

// What a template sees of an event, and its functions.
func TestBodyTemplateRenders(t *testing.T) {
	t.Parallel()
	ev := NewTemplateEvent("evt-9", "order.paid", "cust-1", "crm", tmplTime.In(time.FixedZone("X", 3600)),
		[]byte(`{"amount":150,"id":1234567890,"tags":["a","b"],"name":"Ann \"A\"","empty":"","note":null}`), http.Header{"X-Region": {"eu", "us"}})
	for _, tc := range []struct{ src, want string }{
		{`{{.Type}} {{.ID}} {{.Key}} {{.Dest}} {{.Time.Format "2006-01-02T15:04:05Z07:00"}}`, "order.paid evt-9 cust-1 crm 2026-03-04T05:06:07Z"},
		{`{{.Data.amount}} {{.Data.id}}`, "150 1234567890"},
		// The shape of docs/templates.md's example.
		{`{"text": {{printf "%s on %s: %s" .Type (index .Data "dest" | default "?") .Data.name | json}}}`, `{"text": "order.paid on ?: Ann \"A\""}`},
		{`{{json .Data.name}} {{json .Data.tags}} {{json .Data.amount}}`, `"Ann \"A\"" ["a","b"] 150`},
		{`{{index .Headers "X-Region"}}`, "eu"},
		{`{{upper .Data.name}} {{lower "AbC"}} {{upper .Data.amount}}`, `ANN "A" abc 150`},
		{`{{trunc 3 .Data.name}}|{{trunc 10 "héllo wörld"}}|{{trunc 0 "x"}}`, "Ann|héllo wörl|"},
		{`{{default "none" .Data.empty}} {{default "none" .Data.note}} {{default "none" (index .Data "missing")}} {{default "none" .Data.amount}}`, "none none none 150"},
		{`{{join ", " .Data.tags}}|{{.Data.tags | join "+"}}`, "a, b|a+b"},
		{`{{replace "&" "&amp;" "a&b<c"}}`, "a&amp;b<c"},
		{`{{kind .Data}} {{kind .Data.tags}} {{kind .Data.name}} {{kind .Data.amount}} {{kind .Data.note}} {{kind .Time}}`, "map list string number null other"},
		{`{{range $i, $t := .Data.tags}}{{if $i}},{{end}}{{$t}}{{end}}`, "a,b"},
		{`{{printf "%05.1f|%-4s|%q" 3.14159 "ab" "c"}}`, `003.1|ab  |"c"`},
		{`{{len .Body}} {{slice .Data.name 0 3}} {{html "<a>"}} {{js "'"}} {{urlquery "a b"}}`, `89 Ann &lt;a&gt; \' a+b`},
	} {
		out, err := render(t, tc.src, ev)
		require.NoError(t, err, tc.src)
		require.Equal(t, tc.want, out, tc.src)
	}
}

// A body that is not JSON: .Data is nil and .Body the text; a template that
// reads a field of .Data fails, as one that reads a missing key does.
func TestBodyTemplateFailures(t *testing.T) {
	t.Parallel()
	notJSON := operatorEvent("plain text")
	require.Nil(t, notJSON.Data)
	require.Equal(t, "plain text", notJSON.Body)
	out, err := render(t, `{{if .Data}}json{{else}}{{.Body}}{{end}}`, notJSON)
	require.NoError(t, err)
	require.Equal(t, "plain text", out)
	require.Nil(t, operatorEvent(`{"a":1} trailing`).Data, "JSON followed by more is not JSON")

	for _, tc := range []struct {
		src  string
		ev   TemplateEvent
		want string
	}{
		{`{{.Data.dest}}`, notJSON, `nil pointer evaluating interface {}.dest`},
		{`{{.Data.missing}}`, operatorEvent(`{"dest":"orders"}`), `map has no entry for key "missing"`},
		{`{{.Data.dest.name}}`, operatorEvent(`{"dest":"orders"}`), `can't evaluate field name in type interface {}`},
		{`{{.Headers.Missing}}`, operatorEvent(`{}`), `map has no entry for key "Missing"`},
		{`{{join "," .Data.dest}}`, operatorEvent(`{"dest":"orders"}`), `join: string is not a list`},
		{`{{printf "%2000d" 1}}`, operatorEvent(`{}`), `a width or precision over 1000 is not allowed`},
		{`{{printf "%.*d" 3000 1}}`, operatorEvent(`{}`), `given as * is not allowed`},
		{`{{index .Data.list 5}}`, operatorEvent(`{"list":[1]}`), `index out of range: 5`},
	} {
		_, err := render(t, tc.src, tc.ev)
		require.ErrorContains(t, err, tc.want, tc.src)
	}
}

// A rendering past its limits fails: its output, the strings it builds,
// and its time.
func TestBodyTemplateLimits(t *testing.T) {
	t.Parallel()
	big := operatorEvent(`{"s":"` + strings.Repeat("x", 100_000) + `","list":[` + strings.Repeat("1,", 2000) + `1]}`)

	_, err := render(t, `{{range .Data.list}}{{$.Data.s}}{{end}}`, big)
	require.ErrorContains(t, err, "the rendered body is over the limit of 1048576 bytes")

	// Strings built but not written are bounded too: doubling a string
	// stops at the limit rather than at the machine's memory.
	_, err = render(t, `{{$x := .Data.s}}{{range .Data.list}}{{$x = printf "%s%s" $x $x}}{{end}}`, big)
	require.ErrorContains(t, err, "over the limit")
	_, err = render(t, `{{$x := .Data.s}}{{range .Data.list}}{{$x = replace "x" "xx" $x}}{{end}}`, big)
	require.ErrorContains(t, err, "over the limit")
	_, err = render(t, `{{$x := .Data.s}}{{range .Data.list}}{{$x = js (print $x $x)}}{{end}}`, big)
	require.ErrorContains(t, err, "over the limit")
	_, err = render(t, `{{join .Data.s .Data.list}}`, big)
	require.ErrorContains(t, err, "over the limit")

	// A loop that writes nothing still stops at the time limit: 2001^3
	// iterations would take minutes.
	b := mustCompile(t, `{{range .Data.list}}{{range $.Data.list}}{{range $.Data.list}}{{end}}{{end}}{{end}}`)
	_, err = b.render(context.Background(), big, MaxRenderedBody, 50*time.Millisecond)
	require.ErrorContains(t, err, "rendering took longer than the limit of 50ms")
	// One that would on any event is refused when saved.
	_, err = CompileBodyTemplate(`{{range 1000000000000}}{{end}}`)
	require.ErrorContains(t, err, "body template is refused: on a sample event of 1084 bytes, rendering took longer than the limit of 10s")

	// Exactly at the limit is within it.
	out, err := mustCompile(t, `{{.Data.s}}{{.Data.s}}{{.Data.s}}`).render(context.Background(), big, 300_000, time.Minute)
	require.NoError(t, err)
	require.Len(t, out, 300_000)
}

func TestCompileBodyTemplateErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"", "body template is empty"},
		{"  \n", "body template is empty"},
		{strings.Repeat("x", MaxBodyTemplateLen+1), "body template is 32769 bytes long; the limit is 32768"},
		{"{{.Data", "body template does not compile: template: body:1: unclosed action"},
		{`{{env "HOME"}}`, `function "env" not defined`},
		{`{{readFile "/etc/passwd"}}`, `function "readFile" not defined`},
		{`{{define "x"}}a{{end}}{{template "x"}}`, "{{define}} and {{block}} are not allowed"},
		{`{{block "x" .}}a{{end}}`, "{{define}} and {{block}} are not allowed"},
		{`{{if .Data}}{{template "x" .}}{{end}}`, `{{template "x"}} is not allowed`},
		{"\xff", "not valid UTF-8"},
	} {
		_, err := CompileBodyTemplate(tc.src)
		require.ErrorContains(t, err, tc.want, tc.src)
	}
}

// A destination's template and content type are checked where it is
// validated: a template that does not compile, a content type without a
// template or not a media type.
func TestDestinationValidatesBodyTemplate(t *testing.T) {
	t.Parallel()
	base := Destination{Name: "d", URL: "https://x.example.com/h"}
	d := base
	d.BodyTemplate = `{"text": {{json .Type}}}`
	d = d.WithDefaults()
	require.NoError(t, d.Validate())
	require.Equal(t, "application/json", d.BodyContentType)

	for _, tc := range []struct {
		tmpl, ct, setting, want string
	}{
		{"{{.Data", "", "body-template", "does not compile"},
		{"", "text/plain", "body-content-type", "applies with a body template only"},
		{"x", "not a type", "body-content-type", `content type "not a type"`},
		{"x", "text/plain\r\nX: y", "body-content-type", `content type`},
	} {
		d := base
		d.BodyTemplate, d.BodyContentType = tc.tmpl, tc.ct
		err := d.WithDefaults().Validate()
		var se *SettingError
		require.ErrorAs(t, err, &se, tc)
		require.Equal(t, tc.setting, se.Setting)
		require.ErrorContains(t, err, tc.want)
	}

	// Settings: '' removes the template, and its content type with it.
	with := Destination{Name: "d", URL: "https://x.example.com/h", BodyTemplate: "x", BodyContentType: "text/plain"}
	s := Settings{BodyTemplate: new(" ")}
	require.NoError(t, s.Validate())
	s.Apply(&with)
	require.Empty(t, with.BodyTemplate)
	require.Empty(t, with.BodyContentType)
	require.NoError(t, with.WithDefaults().Validate())

	s = Settings{BodyTemplate: new("{{.Nope")}
	var se *SettingError
	require.ErrorAs(t, s.Validate(), &se)
	require.Equal(t, "--body-template: body template does not compile: template: body:1: unclosed action", se.Text(func(s string) string { return "--" + s }))
}

// The shipped templates render valid JSON for any body, JSON or not, and
// any type and header value: whatever an event holds is escaped.
func FuzzShippedTemplatesRenderValidJSON(f *testing.F) {
	slack, err := os.ReadFile("../docs/templates/slack.tmpl")
	require.NoError(f, err)
	teams, err := os.ReadFile("../docs/templates/teams.tmpl")
	require.NoError(f, err)
	tmpls := []*BodyTemplate{}
	for _, src := range [][]byte{slack, teams} {
		b, err := CompileBodyTemplate(string(src))
		require.NoError(f, err)
		tmpls = append(tmpls, b)
	}
	for _, b := range awkwardBodies {
		f.Add(b, "relay.destination.breaker_opened")
	}
	f.Add(`{"a":{"b":[{"c":"\u2028\ud800"}]},"":""}`, "")
	f.Fuzz(func(t *testing.T, body, typ string) {
		ev := NewTemplateEvent("evt-1", typ, "", "d", tmplTime, []byte(body), http.Header{"X-A": {body}})
		for _, b := range tmpls {
			out, err := b.Render(context.Background(), ev)
			if err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if !json.Valid(out) {
				t.Fatalf("body %q rendered invalid JSON:\n%s", body, out)
			}
		}
	})
}

// The red team's template: 400 copies of a 1 MiB body in one print. It is
// refused before the string is built (it built 1.6 GB before), and so are
// the other ways of building a large string from a few arguments.
func TestBodyTemplateRefusesBeforeBuilding(t *testing.T) {
	mib := NewTemplateEvent("e1", "", "", "d", tmplTime, []byte(`{"s":"`+strings.Repeat("x", 1<<20)+`","list":[1,2,3,4,5,6,7,8]}`), nil)
	for _, src := range []string{
		`{{print` + strings.Repeat(" .Body", 400) + `}}`,
		`{{printf "` + strings.Repeat("%[1]s", 400) + `" .Body}}`,
		`{{println` + strings.Repeat(" .Data", 400) + `}}`,
		`{{js` + strings.Repeat(" .Body", 400) + `}}`,
		`{{html` + strings.Repeat(" .Body", 400) + `}}`,
		`{{urlquery` + strings.Repeat(" .Body", 400) + `}}`,
		`{{upper (print` + strings.Repeat(" .Body", 400) + `)}}`,
		`{{json (print` + strings.Repeat(" .Body", 400) + `)}}`,
		`{{replace "x" "xxxxxxxxxx" .Body}}`,
		// Each string within the limits, but together over the budget.
		`{{range .Data.list}}{{$x := print $.Body}}{{end}}`,
	} {
		b := mustCompile(t, src)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := b.Render(context.Background(), mib)
		runtime.ReadMemStats(&after)
		require.Error(t, err, src[:min(len(src), 40)])
		require.True(t, errors.Is(err, errRenderBounds), "%.40s: %.200s", src, err)
		// The event's parsing and one body's copy, not 400 of them.
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(48<<20), src[:min(len(src), 40)])
	}
}

// A shutdown stops a rendering within moments, as not the event's fault.
func TestBodyTemplateStopsOnShutdown(t *testing.T) {
	t.Parallel()
	b := mustCompile(t, `{{range .Data.list}}{{range $.Data.list}}{{end}}{{end}}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Render(ctx, operatorEvent(`{"list":[`+strings.Repeat("1,", 10_000)+`1]}`))
	require.ErrorIs(t, err, ErrRenderStopped)
	require.NotErrorIs(t, err, errRenderBounds)
}

// The templates of docs/templates.md (its fenced blocks that hold an
// action) compile and render valid JSON for an operator event.
func TestTemplatesDocExamplesRender(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/templates.md")
	require.NoError(t, err)
	var n int
	for _, m := range regexp.MustCompile("(?ms)^```(\\w*)\n(.*?)^```$").FindAllStringSubmatch(string(doc), -1) {
		src := m[2]
		if m[1] != "" || !strings.Contains(src, "{{") {
			continue
		}
		n++
		out, err := render(t, src, operatorEvent(awkwardBodies[0]))
		require.NoError(t, err, src)
		require.True(t, json.Valid([]byte(out)), "%s rendered %s", src, out)
	}
	require.GreaterOrEqual(t, n, 2, "the doc's examples were found")
}

// The envelope of docs/templates.md wraps any body: a JSON one as data,
// numbers as sent; any other as its text.
func TestEnvelopeTemplateOfTheDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/templates.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "## An envelope: type, id and time in the body")
	require.True(t, ok)
	_, src, _ := strings.Cut(section, "```\n")
	src, _, _ = strings.Cut(src, "```")
	for _, tc := range []struct{ body, data string }{
		{`{"amount": 150, "big": 12345678901234567890, "note": "a \"b\"\n"}`, `{"amount":150,"big":12345678901234567890,"note":"a \"b\"\n"}`},
		{`[1, {"b": 2}]`, `[1,{"b":2}]`},
		{`false`, `false`},
		{`0`, `0`},
		{`"text"`, `"text"`},
		{"not json <b> \"q\"", `"not json <b> \"q\""`},
		{``, `""`},
	} {
		ev := NewTemplateEvent("evt-1", "order.paid", "k", "crm", tmplTime, []byte(tc.body), nil)
		out, err := render(t, src, ev)
		require.NoError(t, err, tc.body)
		var env struct {
			Type, ID, Timestamp string
			Data                json.RawMessage
		}
		require.NoError(t, json.Unmarshal([]byte(out), &env), out)
		require.Equal(t, "order.paid", env.Type)
		require.Equal(t, "evt-1", env.ID)
		require.Equal(t, "2026-03-04T05:06:07Z", env.Timestamp)
		require.Equal(t, tc.data, string(env.Data), tc.body)
	}
	out, err := render(t, src, NewTemplateEvent("evt-1", "order.paid", "", "crm", tmplTime, []byte(`{"amount": 150}`), nil))
	require.NoError(t, err)
	require.Equal(t, `{"type": "order.paid", "id": "evt-1", "timestamp": "2026-03-04T05:06:07Z", "data": {"amount":150}}`, strings.TrimSuffix(out, "\n"), "as the doc shows it (a file's last newline is sent too)")
}

// A printf width pads every element of a list or map: %1000v of a list of
// 110,000 numbers is 110 MB, refused before it is built (a reviewer saw
// 360 MB built before the check).
func TestBodyTemplatePrintfWidthCountsEachElement(t *testing.T) {
	t.Parallel()
	list := NewTemplateEvent("e1", "", "", "d", tmplTime, []byte("["+strings.Repeat("0,", 110_000)+"0]"), nil)
	_, err := mustCompile(t, `{{printf "%1000v" .Data}}`).Render(context.Background(), list)
	require.ErrorIs(t, err, errRenderBounds)
	require.ErrorContains(t, err, "a string the template builds is over the limit")
	out, err := mustCompile(t, `{{printf "%5v|" .Data}}`).Render(context.Background(), operatorEvent(`[1,2]`))
	require.NoError(t, err)
	require.Equal(t, "[    1     2]|", string(out))
}

// A template's error names where it failed, never the action's text: the
// action quotes the template, which may hold a credential and is shown to
// admin keys only, while the error goes to the log and the dead letter.
func TestBodyTemplateErrorDoesNotQuoteTheTemplate(t *testing.T) {
	t.Parallel()
	b := mustCompile(t, `{"auth":"{{"sk_live_9f8e7d"}}","v":{{join "sk_live_9f8e7d" .Data.items}}}`)
	_, err := b.Render(context.Background(), operatorEvent(`{"items":{"a":1}}`))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "sk_live")
	require.Equal(t, "template: body:1:37: error calling join: join: map is not a list", err.Error())
	_, err = mustCompile(t, `{{.Data.reason}}`).Render(context.Background(), operatorEvent(`{}`))
	require.EqualError(t, err, `template: body:1:7: map has no entry for key "reason"`)
}
