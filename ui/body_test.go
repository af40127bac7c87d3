package ui

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// Within the bounds, the preview is json.Indent's output exactly.
func TestIndentJSONIsJSONIndentWithinTheBounds(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`1`, `"x"`, `null`, `[]`, `{}`, `[ ]`, `{ }`, `[[]]`, `[{}, []]`,
		`{"a":1,"b":[1,2,{"c":"d"}],"e":{}}`,
		"{\n  \"a\" : [ 1 ,\t2 ] ,\r\n \"b\": { \"c\" : [ ] } }",
		`{"s":"a \"quoted\" ] } [ { , : string\\","t":"\u00e9\\\\"}`,
		`[-1.5e+10, true, false, null, "x"]`,
		`[[[[[[[[[[1]]]]]]]]]]`,
	} {
		var want bytes.Buffer
		require.NoError(t, json.Indent(&want, []byte(doc), "", "  "), doc)
		got, deep, long := indentJSON([]byte(doc), previewDepth, previewBytes)
		require.Equal(t, want.String(), got, doc)
		require.False(t, deep, doc)
		require.False(t, long, doc)
	}
}

// A body nested deeper than the bound, or longer than it, gives a preview
// of bounded size that says it was cut.
func TestBodyPreviewIsBounded(t *testing.T) {
	t.Parallel()
	deep := []byte(strings.Repeat("[", 9990) + strings.Repeat("]", 9990))
	v := viewBody(deep, nil, "")
	require.Equal(t, "json", v.Kind)
	require.Less(t, len(v.Text), 2*previewDepth*previewDepth+200, "indentation of at most previewDepth levels")
	require.Contains(t, v.Text, "[...]")
	require.Len(t, v.Cut, 1)
	require.Contains(t, v.Cut[0], "Nested deeper than 32 levels")

	deepObj := []byte(strings.Repeat(`{"a":`, 100) + `{"s":"}]"}` + strings.Repeat("}", 100))
	v = viewBody(deepObj, nil, "")
	require.Contains(t, v.Text, `"a": {...}`)
	require.True(t, json.Valid([]byte(strings.ReplaceAll(v.Text, "...", ""))), "the rest of the document is whole:\n%s", v.Text)

	long := []byte("[" + strings.Repeat(`"abcdefghé",`, 100000) + "1]")
	v = viewBody(long, nil, "")
	require.LessOrEqual(t, len(v.Text), previewBytes)
	require.Greater(t, len(v.Text), previewBytes-100)
	require.True(t, utf8.ValidString(v.Text))
	require.Equal(t, []string{"Only the first 64 KiB of the indented body are shown."}, v.Cut)

	oneString := []byte(`"` + strings.Repeat("é", previewBytes) + `"`)
	v = viewBody(oneString, nil, "")
	require.Equal(t, "text", v.Kind)
	require.LessOrEqual(t, len(v.Text), previewBytes)
	require.True(t, utf8.ValidString(v.Text))
	require.Len(t, v.Cut, 1)
	require.Contains(t, v.Cut[0], "of 131072 bytes")

	bin := bytes.Repeat([]byte{0xff, 0}, 1<<20)
	v = viewBody(nil, bin, "")
	require.Equal(t, "binary", v.Kind)
	require.Equal(t, 2<<20, v.Size)
	require.Less(t, len(v.Text), 5*previewBinary)
	require.Contains(t, v.Cut[0], "of 2097152 bytes")

	v = viewBody([]byte(`{"a":1}`), nil, "")
	require.Empty(t, v.Cut, "a small body is shown whole")
}
