package relay

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// jetStreamSettles are JetStream's methods that settle a delivered message.
var jetStreamSettles = map[string]bool{"Ack": true, "Nak": true, "NakWithDelay": true, "Term": true, "TermWithReason": true, "DoubleAck": true}

// settleCalls lists the calls of JetStream's settling methods in the Go
// files (tests aside) of dir, but for those in the files allowed, as
// "file:line: Method".
func settleCalls(t *testing.T, dir string, allowed ...string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var calls []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || slices.Contains(allowed, name) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var sel *ast.SelectorExpr
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				sel = fn
			case *ast.IndexExpr: // a generic method's instantiation
				sel, _ = fn.X.(*ast.SelectorExpr)
			}
			if sel != nil && jetStreamSettles[sel.Sel.Name] {
				calls = append(calls, fset.Position(sel.Sel.Pos()).String()+": "+sel.Sel.Name)
			}
			// A method value (msg.Ack passed as a func) settles too.
			for _, a := range call.Args {
				if sel, ok := a.(*ast.SelectorExpr); ok && jetStreamSettles[sel.Sel.Name] {
					calls = append(calls, fset.Position(sel.Sel.Pos()).String()+": "+sel.Sel.Name)
				}
			}
			return true
		})
	}
	return calls
}

// TestOnlyTheJetStreamSideSettles: the engine settles a delivered message
// only through settler, as Decide or DecideAdmit chose; JetStream's own ack
// methods are called in jsmsg.go alone (and in stream's puller, which
// implements them).
func TestOnlyTheJetStreamSideSettles(t *testing.T) {
	t.Parallel()
	require.Empty(t, settleCalls(t, ".", "jsmsg.go"), "settle through settler (jsmsg.go implements it for JetStream messages), not with JetStream's ack methods")
	// The check finds such calls: a call, and a method value.
	found := settleCalls(t, filepath.Join("testdata", "settles"))
	require.Len(t, found, 3, "%v", found)
	for i, m := range []string{"NakWithDelay", "TermWithReason", "Ack"} {
		require.True(t, strings.HasSuffix(found[i], ": "+m), "%v", found)
	}
}
