package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A body template is read from its file and compiled when the destination
// is saved: one that does not compile, or cannot be read, is refused with
// why (exit 2); --body-template ” on update removes it and its content
// type.
func TestDestBodyTemplateCompiledWhenSaved(t *testing.T) {
	// Not parallel: urfave/cli v2 mutates package-level help flags on each run.
	b := setup(t)
	dir := t.TempDir()
	file := func(name, src string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(src), 0o600))
		return p
	}
	bad := file("bad.tmpl", `{"text": {{json .Data.reason}`)
	define := file("define.tmpl", `{{define "x"}}{{end}}{}`)
	empty := file("empty.tmpl", "\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--body-template", bad}, `--body-template: body template does not compile: template: body:1: bad character U+007D '}'`},
		{[]string{"--body-template", define}, "{{define}} and {{block}} are not allowed"},
		{[]string{"--body-template", filepath.Join(dir, "none.tmpl")}, "--body-template: open " + filepath.Join(dir, "none.tmpl") + ": no such file or directory"},
		{[]string{"--body-template", empty}, "is empty (--body-template '' removes a template)"},
		{[]string{"--body-template", define, "--body-content-type", "text/plain"}, "not allowed"},
		{[]string{"--body-content-type", "text/plain"}, "a body content type is that of a rendered body: it applies with a body template only"},
		{[]string{"--body-template", file("ok.tmpl", "{}"), "--body-content-type", "json"}, `--body-content-type: content type "json" is not type/subtype`},
	} {
		args := append([]string{"dest", "add", "d", "--url", "https://example.test"}, tc.args...)
		code, _, errs := b.cli(t, "", args...)
		require.Equal(t, exitUsage, code, "%q: %s", tc.args, errs)
		require.Contains(t, errs, tc.want, "%q", tc.args)
	}
	code, out, _ := b.cli(t, "", "dest", "list", "--json")
	require.Equal(t, 0, code)
	require.Empty(t, out, "nothing was added")

	slack, err := os.ReadFile("../../docs/templates/slack.tmpl")
	require.NoError(t, err)
	// dest list shows a template's size and digest, not its text (it may
	// hold a credential): the digest sha256sum prints for the file.
	shown := fmt.Sprintf("(set: %d bytes, sha256 %x)", len(slack), sha256.Sum256(slack))
	code, _, errs := b.cli(t, "", "dest", "add", "d", "--url", "https://example.test", "--body-template", "../../docs/templates/slack.tmpl")
	require.Equal(t, 0, code, errs)
	d := listed(t, b)
	require.Equal(t, shown, d.BodyTemplate)
	require.Equal(t, "application/json", d.BodyContentType)

	code, _, errs = b.cli(t, "", "dest", "update", "d", "--body-template", bad)
	require.Equal(t, exitUsage, code, errs)
	require.Contains(t, errs, "body template does not compile")
	require.Equal(t, shown, listed(t, b).BodyTemplate, "a refused update changes nothing")

	code, _, errs = b.cli(t, "", "dest", "update", "d", "--body-content-type", "text/plain; charset=utf-8")
	require.Equal(t, 0, code, errs)
	d = listed(t, b)
	require.Equal(t, shown, d.BodyTemplate, "an update without --body-template keeps it")
	require.Equal(t, "text/plain; charset=utf-8", d.BodyContentType)

	code, _, errs = b.cli(t, "", "dest", "update", "d", "--body-template", "")
	require.Equal(t, 0, code, errs)
	d = listed(t, b)
	require.Empty(t, d.BodyTemplate, "--body-template '' removes the template")
	require.Empty(t, d.BodyContentType, "and its content type")

	code, _, errs = b.cli(t, "", "dest", "update", "d", "--body-content-type", "text/plain")
	require.Equal(t, exitUsage, code, errs)
	require.Contains(t, errs, "applies with a body template only")
}
