package destination

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"
)

// errFilterBounds is what the error of an evaluation that passed one of a
// filter's bounds (MaxFilterSteps, MaxFilterBuilt, FilterTimeout) is.
var errFilterBounds = errors.New("filter passed its bounds")

// filterBoundsError is such an error: its text says which bound.
type filterBoundsError string

func (e filterBoundsError) Error() string      { return string(e) }
func (filterBoundsError) Is(target error) bool { return target == errFilterBounds }

// filterBudget is what one evaluation of a filter may still do. Every
// iteration of a predicate takes a step; every string, list or map a
// function (or +) returns is charged by its printed size. It is used by
// one evaluation, on one goroutine.
type filterBudget struct {
	steps, built int
	// regexps are the patterns of matches compiled so far in this
	// evaluation (at most maxFilterRegexps).
	regexps  map[string]*regexp.Regexp
	deadline time.Time
	done     <-chan struct{} // a shutdown
	// over: a bound was passed; stopped: done was closed.
	over, stopped bool
}

// step takes one step, and every 1,024 steps looks at the clock and for a
// shutdown.
func (b *filterBudget) step() error {
	b.steps++
	if b.steps > MaxFilterSteps {
		b.over = true
		return fmt.Errorf("the filter took more than %d steps (iterations of its predicates) on this event", MaxFilterSteps)
	}
	if b.steps%1024 == 0 {
		return b.check()
	}
	return nil
}

// cpuClock is the real clock that bounds an evaluation's CPU time (a test
// makes it run fast).
var cpuClock = time.Now

func (b *filterBudget) check() error {
	select {
	case <-b.done:
		b.stopped = true
		return ErrFilterStopped
	default:
	}
	if !b.deadline.IsZero() && cpuClock().After(b.deadline) {
		b.over = true
		return fmt.Errorf("the filter took longer than %s on this event", FilterTimeout)
	}
	return nil
}

// charge counts v, a value the evaluation built.
func (b *filterBudget) charge(v any) error {
	switch v.(type) {
	case nil, bool, int, float64:
		return nil
	}
	n, ok := valueSize(v, MaxFilterBuilt-b.built)
	b.built += n
	if !ok {
		b.over = true
		return fmt.Errorf("the filter built more than %d bytes of values on this event", MaxFilterBuilt)
	}
	return b.check()
}

// The functions boundsVisitor calls. Their first argument is the
// evaluation's budget (filterEnv.Budget).
const (
	fnMatches   = "__relay_matches"
	fnStep      = "__relay_step"
	fnCharge    = "__relay_charge"
	fnChargeStr = "__relay_charge_str"
	budgetVar   = "__relay_budget"
)

// boundsVisitor puts a filter under its bounds: the body of every
// predicate first takes a step, and every call and + whose result can be
// large is charged. It notes the constant patterns of matches, which
// CompileFilter checks.
type boundsVisitor struct {
	patterns []string
}

func (v *boundsVisitor) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.PredicateNode:
		n.Node = &ast.SequenceNode{Nodes: []ast.Node{budgetCall(fnStep), n.Node}}
	case *ast.CallNode:
		if id, ok := n.Callee.(*ast.IdentifierNode); ok && strings.HasPrefix(id.Value, "__relay_") {
			return
		}
		chargeNode(node)
	case *ast.BuiltinNode:
		chargeNode(node)
	case *ast.BinaryNode:
		switch n.Operator {
		case "+":
			chargeNode(node)
		case "matches":
			// A regular expression's match runs over the whole string,
			// and one not constant is compiled at each evaluation: each
			// looks at the clock, and a pattern's size is bounded.
			if p, ok := n.Right.(*ast.StringNode); ok {
				v.patterns = append(v.patterns, p.Value)
			}
			ast.Patch(node, budgetCall(fnMatches, n.Left, n.Right))
		}
	}
}

// Bounds of matches.
const (
	// maxFilterPattern bounds a regular expression's source, in bytes.
	maxFilterPattern = 4096
	// maxFilterRegexps bounds the patterns one evaluation compiles.
	maxFilterRegexps = 16
)

// matches is s matches pattern, under b: the clock and a shutdown looked
// at first, the pattern bounded in size and compiled once per evaluation.
func (b *filterBudget) matches(s, pattern any) (bool, error) {
	str, ok1 := s.(string)
	pat, ok2 := pattern.(string)
	if !ok1 || !ok2 {
		return false, fmt.Errorf("matches needs two strings, not %T and %T", s, pattern)
	}
	if err := b.check(); err != nil {
		return false, err
	}
	re := b.regexps[pat]
	if re == nil {
		if len(pat) > maxFilterPattern {
			b.over = true
			return false, filterBoundsError(fmt.Sprintf("a matches pattern is %d bytes; the limit is %d", len(pat), maxFilterPattern))
		}
		if len(b.regexps) >= maxFilterRegexps {
			b.over = true
			return false, filterBoundsError(fmt.Sprintf("the filter compiled more than %d patterns of matches on this event", maxFilterRegexps))
		}
		var err error
		if re, err = regexp.Compile(pat); err != nil {
			return false, err
		}
		if b.regexps == nil {
			b.regexps = map[string]*regexp.Regexp{}
		}
		b.regexps[pat] = re
	}
	return re.MatchString(str), nil
}

// chargeNode wraps the call at node in a charge of its result, unless the
// result is a number, a bool or a time: their size is fixed.
func chargeNode(node *ast.Node) {
	fn := fnCharge
	if t := (*node).Type(); t != nil {
		switch t.Kind() {
		case reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64, reflect.Struct:
			return
		case reflect.String:
			fn = fnChargeStr
		}
	}
	ast.Patch(node, budgetCall(fn, *node))
}

func budgetCall(fn string, args ...ast.Node) *ast.CallNode {
	return &ast.CallNode{
		Callee:    &ast.IdentifierNode{Value: fn},
		Arguments: append([]ast.Node{&ast.IdentifierNode{Value: budgetVar}}, args...),
	}
}

// boundedFunctions are the functions boundsVisitor calls, and expr's
// builtins that can build a value much larger than their arguments,
// replaced by ones that refuse to before they do (the rest are charged
// after they return, which bounds them: their results are at most a
// small multiple of their arguments).
func boundedFunctions() []expr.Option {
	budget := func(v any) *filterBudget { return v.(*filterBudget) }
	opts := []expr.Option{
		expr.Function(fnMatches, func(args ...any) (any, error) {
			return budget(args[0]).matches(args[1], args[2])
		}, new(func(*filterBudget, any, any) bool)),
		expr.Function(fnStep, func(args ...any) (any, error) {
			return true, budget(args[0]).step()
		}, new(func(*filterBudget) bool)),
		expr.Function(fnCharge, func(args ...any) (any, error) {
			return args[1], budget(args[0]).charge(args[1])
		}, new(func(*filterBudget, any) any)),
		expr.Function(fnChargeStr, func(args ...any) (any, error) {
			return args[1], budget(args[0]).charge(args[1])
		}, new(func(*filterBudget, string) string)),
	}
	// Each: the size of the result, from the arguments, before it is built.
	sized := map[string]func(args []any) int{
		"repeat": func(a []any) int {
			n := runtime.ToInt(a[1])
			if n <= 0 {
				return 0
			}
			if s := len(a[0].(string)); s > 0 && n > MaxFilterBuilt/s {
				return MaxFilterBuilt + 1
			}
			return len(a[0].(string)) * n
		},
		"join": func(a []any) int {
			sep := ""
			if len(a) > 1 {
				sep, _ = a[1].(string)
			}
			n, _ := valueSize(a[0], MaxFilterBuilt)
			if l := reflect.ValueOf(a[0]); l.Kind() == reflect.Slice {
				n += l.Len() * len(sep)
			}
			return n
		},
		"replace": func(a []any) int {
			s, old, repl := a[0].(string), a[1].(string), a[2].(string)
			count := strings.Count(s, old)
			if old == "" {
				count = utf8.RuneCountInString(s) + 1
			}
			if len(a) > 3 {
				if m := runtime.ToInt(a[3]); m >= 0 && m < count {
					count = m
				}
			}
			if len(repl) <= len(old) {
				return len(s)
			}
			if count > 0 && len(repl)-len(old) > MaxFilterBuilt/count {
				return MaxFilterBuilt + 1
			}
			return len(s) + count*(len(repl)-len(old))
		},
		"split":      splitSize,
		"splitAfter": splitSize,
		"toJSON":     sizeOfArgs,
		"string":     sizeOfArgs,
		"concat":     sizeOfArgs,
		"flatten":    sizeOfArgs,
		"fromJSON": func(a []any) int {
			// What JSON decodes into takes more room than its text.
			return 8 * len(a[0].(string))
		},
	}
	for name, size := range sized {
		b := builtin.Builtins[builtin.Index[name]]
		types := make([]any, len(b.Types))
		for i, t := range b.Types {
			types[i] = reflect.New(t).Interface()
		}
		opts = append(opts, expr.Function(name, func(args ...any) (any, error) {
			if n := size(args); n > MaxFilterBuilt {
				return nil, filterBoundsError(fmt.Sprintf("%s would build more than %d bytes", name, MaxFilterBuilt))
			}
			return callBuiltin(b, args)
		}, types...))
	}
	return opts
}

// splitSize is the size of split's or splitAfter's result: a string
// header for each piece, and the pieces.
func splitSize(a []any) int {
	s, sep := a[0].(string), a[1].(string)
	pieces := strings.Count(s, sep) + 1
	if sep == "" {
		pieces = utf8.RuneCountInString(s)
	}
	return len(s) + 16*pieces
}

// sizeOfArgs is the printed size of the arguments together.
func sizeOfArgs(a []any) int {
	n, _ := valueSize(a, MaxFilterBuilt)
	return n
}

// callBuiltin calls expr's builtin b, as expr would.
func callBuiltin(b *builtin.Function, args []any) (any, error) {
	switch {
	case b.Fast != nil && len(args) == 1:
		return b.Fast(args[0]), nil
	case b.Func != nil:
		return b.Func(args...)
	case b.Safe != nil:
		v, _, err := b.Safe(args...)
		return v, err
	}
	return nil, fmt.Errorf("%s cannot be called", b.Name)
}
