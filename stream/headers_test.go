package stream

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyThisPackageNamesRelaysHeaders: no code outside package stream
// (its tests aside) names relay's headers (stream.Hdr*). The others write
// and read them through Envelope and LetterEnvelope, so that which header
// carries what, and which are sealed, is said in one place.
func TestOnlyThisPackageNamesRelaysHeaders(t *testing.T) {
	t.Parallel()
	require.Empty(t, headerNames(t, ".."), "write and read relay's headers through stream.Envelope or stream.LetterEnvelope")
	// The check finds them: under an import of another name, and only
	// relay's headers.
	found := headerNames(t, filepath.Join("testdata", "hdrnames"))
	require.Len(t, found, 2, "%v", found)
	require.True(t, strings.HasSuffix(found[0], ": st.HdrMsgID"), "%v", found)
	require.True(t, strings.HasSuffix(found[1], ": st.HdrReason"), "%v", found)
}

// headerNames lists, as file:line: name, where the Go files under root
// that are not tests name a Hdr* of package stream, leaving out package
// stream's own directory tree and testdata.
func headerNames(t *testing.T, root string) []string {
	t.Helper()
	own, err := filepath.Abs(".")
	require.NoError(t, err)
	var found []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			abs, err := filepath.Abs(path)
			if err != nil {
				return err
			}
			if path != root && (abs == own || d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		name := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/relaydev/relay/stream" {
				name = "stream"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && strings.HasPrefix(sel.Sel.Name, "Hdr") {
				found = append(found, fmt.Sprintf("%s: %s.%s", fset.Position(sel.Pos()), name, sel.Sel.Name))
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return found
}
