package destination

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
	"github.com/expr-lang/expr/vm/runtime"
)

// Limits of a filter.
const (
	// MaxFilterLen bounds a filter's source, in bytes.
	MaxFilterLen = 4096
	// maxFilterNodes bounds a filter's syntax tree.
	maxFilterNodes = 500
	// filterMemoryBudget bounds the elements of the lists, maps and ranges
	// that one evaluation writes as literals (expr's memory budget).
	filterMemoryBudget = 100_000
	// MaxFilterSteps bounds the iterations of the predicates ({...} of
	// all, any, filter, map...) of one evaluation, nested ones included:
	// with the time limit, it bounds the work a filter does per event.
	MaxFilterSteps = 1_000_000
	// MaxFilterBuilt bounds the bytes of the values one evaluation builds
	// (strings, lists and maps returned by functions and +, as printed).
	// A function whose result would be larger is refused before it runs.
	MaxFilterBuilt = 4 << 20
	// FilterTimeout bounds one evaluation's time.
	FilterTimeout = time.Second
)

// errFilterStopped ends an evaluation cut short by a shutdown: the event
// is not at fault.
var ErrFilterStopped = errors.New("filter evaluation cut short by a shutdown")

// Filter is a destination's compiled filter: a boolean expression over an
// event (github.com/expr-lang/expr). It is safe for concurrent use.
type Filter struct {
	prog *vm.Program
	// uses says which of the costlier variables the expression reads: the
	// others are not prepared for it.
	usesData, usesBody, usesHeaders bool
}

// filterEnv is what a filter sees of an event.
type filterEnv struct {
	// Data is the body parsed as JSON (objects map[string]any, numbers
	// float64); nil when the body is not JSON.
	Data any `expr:"data"`
	// Body is the raw body.
	Body string `expr:"body"`
	// Headers are the event's own headers passed on to the destination,
	// the first value of each, under canonical names (X-Region).
	Headers map[string]string `expr:"headers"`
	// ID is the event id, Key its order key ("" if none), Dest the
	// destination's name.
	ID   string `expr:"id"`
	Key  string `expr:"key"`
	Dest string `expr:"dest"`
	// Type is the event's type ("" for an event published for one
	// destination).
	Type string `expr:"type"`
	// Budget is the evaluation's bounds, passed by the calls that
	// CompileFilter adds (boundsVisitor).
	Budget *filterBudget `expr:"__relay_budget"`
}

// filterEvent is an event as a filter is evaluated on it.
type FilterEvent struct {
	ID, Key, Dest, Type string
	Body                []byte
	Headers             http.Header // the event's own, as passed on
}

// The functions the comparisons of values of unknown type (the event's
// data) become: a missing value (nil) compares false.
var nilSafeCompare = map[string]string{
	"<":  "__relay_lt",
	">":  "__relay_gt",
	"<=": "__relay_le",
	">=": "__relay_ge",
}

// CompileFilter compiles src, a filter. The error says what is wrong and
// where (line:column), with the line and a caret under the spot.
func CompileFilter(src string) (*Filter, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("filter is empty")
	}
	if len(src) > MaxFilterLen {
		return nil, fmt.Errorf("filter is %d bytes long; the limit is %d", len(src), MaxFilterLen)
	}
	f := &Filter{}
	uses := &usesVisitor{f: f}
	bounds := &boundsVisitor{}
	opts := []expr.Option{
		expr.Env(filterEnv{}),
		expr.AsBool(),
		expr.MaxNodes(maxFilterNodes),
		expr.Patch(nilSafe{}),
		expr.Patch(uses),
		expr.Patch(bounds),
	}
	for op, name := range nilSafeCompare {
		opts = append(opts, expr.Function(name, compareFunc(op), new(func(any, any) bool)))
	}
	opts = append(opts, boundedFunctions()...)
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		// Not wrapped: expr's error type stays out of relay's API.
		return nil, fmt.Errorf("filter does not compile: %s", err.Error())
	}
	f.prog = prog
	for _, p := range bounds.patterns {
		if len(p) > maxFilterPattern {
			return nil, fmt.Errorf("filter does not compile: a matches pattern is %d bytes; the limit is %d", len(p), maxFilterPattern)
		}
		if _, err := regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("filter does not compile: matches %q: %v", p, err)
		}
	}
	// A filter past its bounds on a small event would be past them on
	// every event: refused now, not when events come. Only the bounds that
	// do not depend on the machine's load (steps, bytes built) count here:
	// a busy replica must not find a filter that it accepted before
	// invalid when it loads it (Watch.Apply validates every record).
	if _, err := f.match(context.Background(), sampleFilterEvent, time.Time{}); errors.Is(err, errFilterBounds) {
		return nil, fmt.Errorf("filter is refused: on a sample event of %d bytes, %w", len(sampleFilterEvent.Body), err)
	}
	return f, nil
}

// sampleFilterEvent is the small event a filter is tried on when saved.
var sampleFilterEvent = FilterEvent{
	ID: "sample", Key: "key", Dest: "dest", Type: "sample.type",
	Body:    []byte(`{"id":"sample","amount":100,"text":"` + strings.Repeat("x", 1000) + `","items":[{"sku":"a","n":1},{"sku":"b","n":2}]}`),
	Headers: http.Header{"Content-Type": {"application/json"}},
}

// compareFunc is the comparison op for values of unknown type: false when
// either is nil, else op itself (an error for types it cannot compare).
func compareFunc(op string) func(args ...any) (any, error) {
	return func(args ...any) (out any, err error) {
		a, b := args[0], args[1]
		if a == nil || b == nil {
			return false, nil
		}
		defer func() {
			if r := recover(); r != nil {
				out, err = nil, fmt.Errorf("%v", r)
			}
		}()
		switch op {
		case "<":
			return runtime.Less(a, b), nil
		case ">":
			return runtime.More(a, b), nil
		case "<=":
			return runtime.LessOrEqual(a, b), nil
		}
		return runtime.MoreOrEqual(a, b), nil
	}
}

// nilSafe makes a missing value nil rather than an error: every member
// access is optional (data.a.b is nil when a is missing, as data?.a?.b),
// and an ordering comparison of a value of unknown type compares false
// with nil. It also writes the literal header names of headers["x-region"]
// in canonical form, as the headers are kept.
type nilSafe struct{}

func (nilSafe) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.MemberNode:
		if id, ok := n.Node.(*ast.IdentifierNode); ok && id.Value == "headers" {
			if s, ok := n.Property.(*ast.StringNode); ok {
				s.Value = http.CanonicalHeaderKey(s.Value)
			}
		}
		if !n.Optional && !n.Method {
			n.Optional = true
			ast.Patch(node, &ast.ChainNode{Node: n})
		}
	case *ast.BinaryNode:
		if fn, ok := nilSafeCompare[n.Operator]; ok && (unknownType(n.Left) || unknownType(n.Right)) {
			ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: fn}, Arguments: []ast.Node{n.Left, n.Right}})
		}
	}
}

// unknownType reports a node whose type is known only when it runs.
func unknownType(n ast.Node) bool {
	t := n.Type()
	return t == nil || t.Kind() == reflect.Interface
}

// usesVisitor notes which of the costlier variables an expression reads.
type usesVisitor struct{ f *Filter }

func (u *usesVisitor) Visit(node *ast.Node) {
	if id, ok := (*node).(*ast.IdentifierNode); ok {
		switch id.Value {
		case "data":
			u.f.usesData = true
		case "body":
			u.f.usesBody = true
		case "headers":
			u.f.usesHeaders = true
		}
	}
}

// Match evaluates f on ev. An error is a failed evaluation: a type error
// (a string compared with a number), a result that is not a boolean, or a
// bound passed (MaxFilterSteps, MaxFilterBuilt, FilterTimeout; the error
// is then errFilterBounds); its text is the first line of expr's, with the
// position. When ctx ends (a shutdown), the evaluation stops within
// moments and the error is errFilterStopped.
func (f *Filter) Match(ctx context.Context, ev FilterEvent) (bool, error) {
	// The real clock, not relay's: this bounds CPU time, not a decision.
	return f.match(ctx, ev, cpuClock().Add(FilterTimeout))
}

// match is Match with the evaluation's deadline (zero: none).
func (f *Filter) match(ctx context.Context, ev FilterEvent, deadline time.Time) (bool, error) {
	b := &filterBudget{deadline: deadline, done: ctx.Done()}
	env := filterEnv{ID: ev.ID, Key: ev.Key, Dest: ev.Dest, Type: ev.Type, Budget: b}
	if f.usesData {
		// Not JSON: data stays nil, and the filter can still read body.
		if json.Unmarshal(ev.Body, &env.Data) != nil {
			env.Data = nil
		}
	}
	if f.usesBody {
		env.Body = string(ev.Body)
	}
	if f.usesHeaders {
		env.Headers = make(map[string]string, len(ev.Headers))
		for k, vs := range ev.Headers {
			if len(vs) > 0 {
				env.Headers[k] = vs[0]
			}
		}
	}
	m := vm.VM{MemoryBudget: filterMemoryBudget}
	out, err := m.Run(f.prog, env)
	if err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		switch {
		case b.stopped:
			return false, ErrFilterStopped
		case b.over, errors.Is(err, errFilterBounds),
			// expr's own bound (filterMemoryBudget) is a panic's text.
			strings.Contains(msg, "memory budget exceeded"):
			return false, filterBoundsError(msg)
		}
		return false, errors.New(msg)
	}
	match, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("the filter's result is %T, not a boolean", out)
	}
	return match, nil
}
