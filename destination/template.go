package destination

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"sync"
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
	// MaxTemplateBuilt bounds the bytes of the strings one rendering's
	// functions build (print, printf, json, join...) together. Each is
	// refused before it is built past MaxRenderedBody or this.
	MaxTemplateBuilt = 4 * MaxRenderedBody
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
	// renderers holds *renderer: clones of t whose functions are bound
	// to a rendering's budget.
	renderers sync.Pool
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

// errRenderTooLarge, errRenderTimeout and errRenderBuilt end a rendering
// past its limits; errRenderStopped one cut short by a shutdown.
var (
	errRenderTooLarge = fmt.Errorf("the rendered body is over the limit of %d bytes", MaxRenderedBody)
	errRenderTimeout  = fmt.Errorf("rendering took longer than the limit of %s", RenderTimeout)
	errRenderBuilt    = fmt.Errorf("the template built more than %d bytes of strings", MaxTemplateBuilt)
	errBuiltTooLarge  = fmt.Errorf("a string the template builds is over the limit of %d bytes", MaxRenderedBody)
	ErrRenderStopped  = errors.New("rendering cut short by a shutdown")
)

// CompileBodyTemplate compiles src, a body template. A template is one
// template: {{define}}, {{block}} and {{template}} are refused (they would
// allow recursion). Its functions are text/template's builtins (print,
// printf, println, html, js and urlquery bounded by MaxRenderedBody) and
// bodyFuncs; map keys that are missing are errors (missingkey=error). A
// template that passes its bounds on a small sample event would pass them
// on every event: it is refused.
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
	t, err := template.New("body").Option("missingkey=error").Funcs(bodyFuncs(nil)).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("body template does not compile: %s", err.Error())
	}
	if len(t.Templates()) > 1 || t.Tree == nil {
		return nil, errors.New("body template does not compile: {{define}} and {{block}} are not allowed (a body template is one template)")
	}
	if err := guardLoops(t.Tree.Root); err != nil {
		return nil, fmt.Errorf("body template does not compile: %w", err)
	}
	b := &BodyTemplate{t: t}
	b.renderers.New = func() any {
		r := &renderer{st: &renderState{}}
		// Clone fails only once t was executed; t never is.
		r.t = template.Must(t.Clone()).Funcs(bodyFuncs(r.st))
		return r
	}
	sample := NewTemplateEvent("sample", "sample.type", "key", "dest", time.Unix(0, 0), sampleFilterEvent.Body, sampleFilterEvent.Headers)
	// The sample gets sampleRenderTimeout: a busy replica must not find a
	// template that it accepted before invalid when it loads it
	// (Watch.Apply validates every record), and one that needs that long
	// on 1 KiB is hopeless on real events.
	if _, err := b.render(context.Background(), sample, MaxRenderedBody, sampleRenderTimeout); errors.Is(err, errRenderBounds) {
		return nil, fmt.Errorf("body template is refused: on a sample event of %d bytes, %w", len(sampleFilterEvent.Body), err)
	}
	return b, nil
}

// sampleRenderTimeout bounds the rendering of the sample event when a
// template is compiled: RenderTimeout's ten times.
const sampleRenderTimeout = 10 * RenderTimeout

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

// renderer is a clone of a BodyTemplate whose functions charge st.
type renderer struct {
	t  *template.Template
	st *renderState
}

// renderState is what one rendering may still do: its output, the bytes
// its functions build (each refused before it builds past the limits),
// its time, and whether relay is stopping. Every function call and every
// write looks at the clock and for a shutdown.
type renderState struct {
	limit, built int
	checks       int
	deadline     time.Time
	timeout      time.Duration
	done         <-chan struct{}
}

// errRenderBounds is what the error of a rendering past its limits is.
var errRenderBounds = errors.New("rendering passed its bounds")

// renderBoundsError is such an error: its text says which bound.
type renderBoundsError struct{ err error }

func (e renderBoundsError) Error() string        { return e.err.Error() }
func (e renderBoundsError) Unwrap() error        { return e.err }
func (e renderBoundsError) Is(target error) bool { return target == errRenderBounds }

// check ends the rendering when it is past its time or relay is stopping.
func (s *renderState) check() error {
	if s == nil {
		return nil
	}
	select {
	case <-s.done:
		return ErrRenderStopped
	default:
	}
	// The clock every 16 checks: an empty loop's iteration costs about a
	// tenth of a microsecond.
	if s.checks++; s.checks%16 == 0 && time.Now().After(s.deadline) {
		return errRenderTimeout
	}
	return nil
}

// reserve is asked before a function builds a string of about n bytes:
// an error if that is over the largest body, or the rendering's budget.
func (s *renderState) reserve(n int) error {
	if n > MaxRenderedBody {
		return errBuiltTooLarge
	}
	if s == nil {
		return nil
	}
	if err := s.check(); err != nil {
		return err
	}
	if s.built += n; s.built > MaxTemplateBuilt {
		return errRenderBuilt
	}
	return nil
}

// reserveArgs reserves what printing args takes.
func (s *renderState) reserveArgs(args ...any) error {
	n, _ := valueSize(args, MaxRenderedBody)
	return s.reserve(n)
}

// Render renders the template for ev. Its error says what failed: the
// template's own (a missing key, a function's error), or a limit. When ctx
// ends (a shutdown), the rendering stops within moments, with an error
// that errors.Is errRenderStopped.
func (b *BodyTemplate) Render(ctx context.Context, ev TemplateEvent) ([]byte, error) {
	return b.render(ctx, ev, MaxRenderedBody, RenderTimeout)
}

func (b *BodyTemplate) render(ctx context.Context, ev TemplateEvent, limit int, timeout time.Duration) ([]byte, error) {
	r := b.renderers.Get().(*renderer)
	defer b.renderers.Put(r)
	// The real clock, not relay's: this bounds CPU time, not a decision.
	*r.st = renderState{limit: limit, deadline: time.Now().Add(timeout), timeout: timeout, done: ctx.Done()}
	w := &renderWriter{st: r.st}
	if err := r.t.Execute(w, ev); err != nil {
		switch {
		case errors.Is(err, ErrRenderStopped):
			return nil, ErrRenderStopped
		case errors.Is(err, errRenderTooLarge):
			return nil, renderBoundsError{fmt.Errorf("the rendered body is over the limit of %d bytes", limit)}
		case errors.Is(err, errBuiltTooLarge):
			return nil, renderBoundsError{errBuiltTooLarge}
		case errors.Is(err, errRenderTimeout):
			return nil, renderBoundsError{fmt.Errorf("rendering took longer than the limit of %s", timeout)}
		case errors.Is(err, errRenderBuilt):
			return nil, renderBoundsError{errRenderBuilt}
		}
		return nil, withoutAction(err)
	}
	return w.buf.Bytes(), nil
}

// withoutAction is err, a template's execution error, without the action
// that failed ("executing "body" at <join "key" .Data.items>: "): the
// action quotes the template's text, its literals too, and the error is
// logged and kept in the dead letter, which read keys see, while the
// template may hold a credential and is shown to admin keys only. The
// position (body:1:37) says where it is.
func withoutAction(err error) error {
	msg := err.Error()
	const at = `executing "body" at <`
	i := strings.Index(msg, at)
	if i < 0 {
		return err
	}
	j := strings.LastIndex(msg[i:], ">: ")
	if j < 0 {
		return errors.New(msg[:i] + "executing the template failed")
	}
	return errors.New(msg[:i] + msg[i+j+len(">: "):])
}

// renderWriter collects a rendering, and ends it past its limits.
type renderWriter struct {
	buf bytes.Buffer
	st  *renderState
}

func (w *renderWriter) Write(p []byte) (int, error) {
	if err := w.st.check(); err != nil {
		return 0, err
	}
	if w.buf.Len()+len(p) > w.st.limit {
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
	return ValidHeaderValue("Content-Type", ct)
}

// bodyFuncs are the functions a body template has besides text/template's
// builtins (docs/templates.md lists them), bound to st, a rendering's
// state: pure, and each refuses to build a string past MaxRenderedBody,
// or past the rendering's budget, before it builds it. (With st nil, they
// are only the names a template is parsed with.)
func bodyFuncs(st *renderState) template.FuncMap {
	// Each function's output is at most a small multiple of its input's
	// printed size (escaping): the input is reserved before, the output
	// capped after.
	onText := func(f func(string) string) func(any) (string, error) {
		return func(v any) (string, error) {
			if err := st.reserveArgs(v); err != nil {
				return "", err
			}
			return capped(f(text(v)))
		}
	}
	onArgs := func(f func(...any) string) func(...any) (string, error) {
		return func(args ...any) (string, error) {
			if err := st.reserveArgs(args...); err != nil {
				return "", err
			}
			return capped(f(args...))
		}
	}
	return template.FuncMap{
		"json":  func(v any) (string, error) { return jsonFunc(st, v) },
		"upper": onText(strings.ToUpper),
		"lower": onText(strings.ToLower),
		"trunc": func(n int, v any) (string, error) {
			if err := st.reserveArgs(v); err != nil {
				return "", err
			}
			return truncFunc(n, v), nil
		},
		"default":  defaultFunc,
		"join":     func(sep string, list any) (string, error) { return joinFunc(st, sep, list) },
		"replace":  func(old, repl string, v any) (string, error) { return replaceFunc(st, old, repl, v) },
		"kind":     kindFunc,
		"print":    onArgs(fmt.Sprint),
		"println":  onArgs(fmt.Sprintln),
		"printf":   func(format string, args ...any) (string, error) { return printfFunc(st, format, args...) },
		"html":     onArgs(template.HTMLEscaper),
		"js":       onArgs(template.JSEscaper),
		"urlquery": onArgs(template.URLQueryEscaper),
	}
}

// capped is s, or an error if it is longer than a rendered body may be.
func capped(s string) (string, error) {
	if len(s) > MaxRenderedBody {
		return "", errBuiltTooLarge
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
func jsonFunc(st *renderState, v any) (string, error) {
	if err := st.reserveArgs(v); err != nil {
		return "", err
	}
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
func joinFunc(st *renderState, sep string, list any) (string, error) {
	var parts []string
	switch l := list.(type) {
	case nil:
		return "", nil
	case []string:
		parts = l
	case []any:
		// The elements' text is built first: reserved before.
		if err := st.reserveArgs(l); err != nil {
			return "", err
		}
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
	if err := st.reserve(n); err != nil {
		return "", err
	}
	return strings.Join(parts, sep), nil
}

// replaceFunc is s with every old replaced by repl.
func replaceFunc(st *renderState, old, repl string, s any) (string, error) {
	if err := st.reserveArgs(s); err != nil {
		return "", err
	}
	t := text(s)
	count := strings.Count(t, old) // runes + 1 for ""
	n := len(t)
	if len(repl) > len(old) {
		if (len(repl)-len(old))*count > MaxRenderedBody-n {
			return "", errBuiltTooLarge
		}
		n += (len(repl) - len(old)) * count
	}
	if err := st.reserve(n); err != nil {
		return "", err
	}
	return strings.ReplaceAll(t, old, repl), nil
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
func printfFunc(st *renderState, format string, args ...any) (string, error) {
	verbs, widths, err := checkFormat(format)
	if err != nil {
		return "", err
	}
	// A verb prints one argument, perhaps the same many times (%[1]s).
	largest := 0
	for _, a := range args {
		n, _ := valueSize(a, MaxRenderedBody)
		largest = max(largest, n)
	}
	if largest > 0 && verbs > MaxRenderedBody/largest {
		return "", errBuiltTooLarge
	}
	// fmt pads every element of a list or map to a width: a width counts
	// once per value printed.
	if widths > 0 {
		leaves := 0
		for _, a := range args {
			leaves += valueLeaves(a, MaxRenderedBody)
		}
		if leaves > MaxRenderedBody/widths {
			return "", errBuiltTooLarge
		}
		widths *= max(leaves, 1)
	}
	if err := st.reserve(len(format) + widths + verbs*largest); err != nil {
		return "", err
	}
	return capped(fmt.Sprintf(format, args...))
}

// checkFormat refuses a width or precision over maxFormatWidth, or given
// as an argument (*). It returns how many verbs the format has, and its
// widths and precisions added up.
func checkFormat(f string) (verbs, widths int, err error) {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		verbs++
		for i++; i < len(f); i++ {
			c := f[i]
			if c == '*' {
				return 0, 0, errors.New("printf: a width or precision given as * is not allowed")
			}
			if c >= '0' && c <= '9' {
				n := 0
				for ; i < len(f) && f[i] >= '0' && f[i] <= '9'; i++ {
					n = min(n*10+int(f[i]-'0'), maxFormatWidth+1)
				}
				i--
				if i+1 < len(f) && f[i+1] == ']' {
					continue // an argument index
				}
				if n > maxFormatWidth {
					return 0, 0, fmt.Errorf("printf: a width or precision over %d is not allowed", maxFormatWidth)
				}
				widths += n
				continue
			}
			if !strings.ContainsRune("+-# .[]", rune(c)) {
				break // the verb (or %%)
			}
		}
	}
	return verbs, widths, nil
}
