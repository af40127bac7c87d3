package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"
)

// Limits of a body template.
const (
	// MaxBodyTemplateLen bounds a body template's source, in bytes.
	MaxBodyTemplateLen = 32 << 10
	// MaxRenderedBody bounds what a body template renders for one event,
	// and every string it builds on the way (printf, join, json...).
	MaxRenderedBody = 1 << 20
	// RenderTimeout bounds one rendering.
	RenderTimeout = time.Second
	// maxFormatWidth bounds a width or precision in a printf format
	// ("%5000d" would build 5000 bytes from one).
	maxFormatWidth = 1000
	// DefaultBodyContentType is the Content-Type of a rendered body when
	// the destination does not say.
	DefaultBodyContentType = "application/json"
)

// BodyTemplate is a destination's compiled body template: a Go
// text/template over the event (TemplateEvent) that renders the body sent.
// It is safe for concurrent use.
type BodyTemplate struct {
	t *template.Template
}

// TemplateEvent is what a body template sees of an event, as "." (.Type,
// .Data.reason...).
type TemplateEvent struct {
	// Type is the event's type ("" for an event published for one
	// destination), ID its id (its webhook-id), Key its order key ("" if
	// none), Dest the destination's name.
	Type, ID, Key, Dest string
	// Time is when the producer published the event, in UTC.
	Time time.Time
	// Data is the body parsed as JSON: objects map[string]any, arrays
	// []any, numbers json.Number (printed exactly as sent). nil when the
	// body is not JSON.
	Data any
	// Body is the raw body.
	Body string
	// Headers are the event's own headers passed on to the destination,
	// the first value of each, under canonical names (X-Region).
	Headers map[string]string
}

// errRenderTooLarge and errRenderTimeout end a rendering past its limits.
var (
	errRenderTooLarge = fmt.Errorf("the rendered body is over the limit of %d bytes", MaxRenderedBody)
	errRenderTimeout  = fmt.Errorf("rendering took longer than the limit of %s", RenderTimeout)
)

// CompileBodyTemplate compiles src, a body template. A template is one
// template: {{define}}, {{block}} and {{template}} are refused (they would
// allow recursion). Its functions are text/template's builtins (print,
// printf, println, html, js and urlquery bounded by MaxRenderedBody) and
// bodyFuncs; map keys that are missing are errors (missingkey=error).
func CompileBodyTemplate(src string) (*BodyTemplate, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("body template is empty")
	}
	if len(src) > MaxBodyTemplateLen {
		return nil, fmt.Errorf("body template is %d bytes long; the limit is %d", len(src), MaxBodyTemplateLen)
	}
	if !utf8.ValidString(src) {
		return nil, errors.New("body template is not valid UTF-8")
	}
	t, err := template.New("body").Option("missingkey=error").Funcs(bodyFuncs).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("body template does not compile: %s", err.Error())
	}
	if len(t.Templates()) > 1 || t.Tree == nil {
		return nil, errors.New("body template does not compile: {{define}} and {{block}} are not allowed (a body template is one template)")
	}
	if err := guardLoops(t.Tree.Root); err != nil {
		return nil, fmt.Errorf("body template does not compile: %w", err)
	}
	return &BodyTemplate{t: t}, nil
}

// guardLoops refuses {{template}} and makes every iteration of every
// {{range}} write to the output, even when its body writes nothing: each
// write checks the time limit, so no loop outlasts it.
func guardLoops(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := guardLoops(c); err != nil {
				return err
			}
		}
	case *parse.TemplateNode:
		return fmt.Errorf("{{template %q}} is not allowed (a body template is one template)", n.Name)
	case *parse.IfNode:
		return guardBranch(&n.BranchNode)
	case *parse.WithNode:
		return guardBranch(&n.BranchNode)
	case *parse.RangeNode:
		if n.List != nil {
			tick := &parse.TextNode{NodeType: parse.NodeText, Pos: n.Pos, Text: []byte{}}
			n.List.Nodes = append([]parse.Node{tick}, n.List.Nodes...)
		}
		return guardBranch(&n.BranchNode)
	}
	return nil
}

func guardBranch(b *parse.BranchNode) error {
	if err := guardLoops(b.List); err != nil {
		return err
	}
	return guardLoops(b.ElseList)
}

// Render renders the template for ev. Its error says what failed: the
// template's own (a missing key, a function's error), or a limit.
func (b *BodyTemplate) Render(ev TemplateEvent) ([]byte, error) {
	return b.render(ev, MaxRenderedBody, RenderTimeout)
}

func (b *BodyTemplate) render(ev TemplateEvent, limit int, timeout time.Duration) ([]byte, error) {
	// The real clock, not relay's: this bounds CPU time, not a decision.
	w := &renderWriter{limit: limit, deadline: time.Now().Add(timeout)}
	if err := b.t.Execute(w, ev); err != nil {
		switch {
		case errors.Is(err, errRenderTooLarge):
			return nil, fmt.Errorf("the rendered body is over the limit of %d bytes", limit)
		case errors.Is(err, errRenderTimeout):
			return nil, fmt.Errorf("rendering took longer than the limit of %s", timeout)
		}
		return nil, err
	}
	return w.buf.Bytes(), nil
}

// renderWriter collects a rendering, and ends it past its limits.
type renderWriter struct {
	buf      bytes.Buffer
	limit    int
	deadline time.Time
	writes   int
}

func (w *renderWriter) Write(p []byte) (int, error) {
	// The clock every 16 writes: an empty loop's iteration costs about a
	// tenth of a microsecond.
	if w.writes++; w.writes%16 == 0 && time.Now().After(w.deadline) {
		return 0, errRenderTimeout
	}
	if w.buf.Len()+len(p) > w.limit {
		return 0, errRenderTooLarge
	}
	return w.buf.Write(p)
}

// NewTemplateEvent is what a body template sees of the event id of type
// typ (and order key key, for destination dest), published at published,
// with body and its own headers h.
func NewTemplateEvent(id, typ, key, dest string, published time.Time, body []byte, h http.Header) TemplateEvent {
	ev := TemplateEvent{Type: typ, ID: id, Key: key, Dest: dest, Time: published.UTC(), Body: string(body), Headers: make(map[string]string, len(h))}
	// Not JSON: .Data stays nil, and .Body has the text.
	if json.Valid(body) {
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if d.Decode(&ev.Data) != nil {
			ev.Data = nil
		}
	}
	for k, vs := range h {
		if len(vs) > 0 {
			ev.Headers[k] = vs[0]
		}
	}
	return ev
}

// ValidateContentType reports a body content type that is not a media type
// HTTP can carry.
func ValidateContentType(ct string) error {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("content type %q: %v (give a media type such as application/json)", ct, err)
	}
	if typ, sub, ok := strings.Cut(mt, "/"); !ok || typ == "" || sub == "" {
		return fmt.Errorf("content type %q is not type/subtype (give a media type such as application/json)", ct)
	}
	return validHeaderValue("Content-Type", ct)
}

// bodyFuncs are the functions a body template has besides text/template's
// builtins: pure, and bounded by MaxRenderedBody. docs/templates.md lists
// them.
var bodyFuncs = template.FuncMap{
	"json":     jsonFunc,
	"upper":    func(v any) (string, error) { return capped(strings.ToUpper(text(v))) },
	"lower":    func(v any) (string, error) { return capped(strings.ToLower(text(v))) },
	"trunc":    truncFunc,
	"default":  defaultFunc,
	"join":     joinFunc,
	"replace":  replaceFunc,
	"kind":     kindFunc,
	"print":    func(args ...any) (string, error) { return capped(fmt.Sprint(args...)) },
	"println":  func(args ...any) (string, error) { return capped(fmt.Sprintln(args...)) },
	"printf":   printfFunc,
	"html":     func(args ...any) (string, error) { return capped(template.HTMLEscaper(args...)) },
	"js":       func(args ...any) (string, error) { return capped(template.JSEscaper(args...)) },
	"urlquery": func(args ...any) (string, error) { return capped(template.URLQueryEscaper(args...)) },
}

// capped is s, or an error if it is longer than a rendered body may be.
func capped(s string) (string, error) {
	if len(s) > MaxRenderedBody {
		return "", errRenderTooLarge
	}
	return s, nil
}

// text is v as text: a string or number as it is, nil as "", anything else
// as fmt prints it.
func text(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return string(v)
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(v)
}

// jsonFunc is v JSON-encoded: a string quoted and escaped, fit to embed in
// a JSON document.
func jsonFunc(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("json: %w", err)
	}
	return capped(strings.TrimSuffix(b.String(), "\n"))
}

// truncFunc is s cut to at most n characters.
func truncFunc(n int, s any) string {
	t := text(s)
	if n < 0 {
		n = 0
	}
	i := 0
	for j := range t {
		if i == n {
			return t[:j]
		}
		i++
	}
	return t
}

// defaultFunc is v, or def when v is empty: nil, "", an empty list or map.
func defaultFunc(def, v any) any {
	switch x := v.(type) {
	case nil:
		return def
	case string:
		if x == "" {
			return def
		}
	default:
		rv := reflect.ValueOf(v)
		if (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map) && rv.Len() == 0 {
			return def
		}
	}
	return v
}

// joinFunc is the elements of list as text, separated by sep.
func joinFunc(sep string, list any) (string, error) {
	var parts []string
	switch l := list.(type) {
	case nil:
		return "", nil
	case []string:
		parts = l
	case []any:
		parts = make([]string, len(l))
		for i, v := range l {
			parts[i] = text(v)
		}
	default:
		return "", fmt.Errorf("join: %s is not a list", kindFunc(list))
	}
	n := len(sep) * max(len(parts)-1, 0)
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxRenderedBody {
		return "", errRenderTooLarge
	}
	return strings.Join(parts, sep), nil
}

// replaceFunc is s with every old replaced by new.
func replaceFunc(old, new string, s any) (string, error) {
	t := text(s)
	if old != "" && len(new) > len(old) && len(t)+strings.Count(t, old)*(len(new)-len(old)) > MaxRenderedBody {
		return "", errRenderTooLarge
	}
	if old == "" && len(t)+(utf8.RuneCountInString(t)+1)*len(new) > MaxRenderedBody {
		return "", errRenderTooLarge
	}
	return strings.ReplaceAll(t, old, new), nil
}

// kindFunc is what v is, as JSON says: map, list, string, number, bool or
// null ("other" for what JSON has no name for, such as .Time).
func kindFunc(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any, map[string]string:
		return "map"
	case []any, []string:
		return "list"
	case string:
		return "string"
	case json.Number, float64, int:
		return "number"
	case bool:
		return "bool"
	}
	return "other"
}

// printfFunc is fmt.Sprintf with widths and precisions of at most
// maxFormatWidth, given in the format ("*" is refused).
func printfFunc(format string, args ...any) (string, error) {
	if err := checkFormat(format); err != nil {
		return "", err
	}
	return capped(fmt.Sprintf(format, args...))
}

// checkFormat refuses a width or precision over maxFormatWidth, or given
// as an argument (*).
func checkFormat(f string) error {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		for i++; i < len(f); i++ {
			c := f[i]
			if c == '*' {
				return errors.New("printf: a width or precision given as * is not allowed")
			}
			if c >= '0' && c <= '9' {
				n := 0
				for ; i < len(f) && f[i] >= '0' && f[i] <= '9'; i++ {
					n = min(n*10+int(f[i]-'0'), maxFormatWidth+1)
				}
				i--
				if n > maxFormatWidth && (i+1 >= len(f) || f[i+1] != ']') {
					return fmt.Errorf("printf: a width or precision over %d is not allowed", maxFormatWidth)
				}
				continue
			}
			if !strings.ContainsRune("+-# .[]", rune(c)) {
				break // the verb (or %%)
			}
		}
	}
	return nil
}
