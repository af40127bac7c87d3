package ui

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// What an event's or a dead letter's page shows of its body: a preview,
// bounded whatever the body holds (the whole body is a download). Without
// the bounds, indenting JSON nested thousands of levels deep wrote an
// indentation per line that grew with the depth: 200 MB of page for a
// 20 KB body of 9,990 nested arrays.
const (
	// previewBytes bounds the text shown: indented JSON, or text.
	previewBytes = 64 << 10
	// previewBinary bounds the bytes of a binary body shown as a hex
	// dump (about 5 characters each).
	previewBinary = 12 << 10
	// previewDepth is how many levels of JSON nesting are shown; a
	// container deeper than that is shown as [...] or {...}.
	previewDepth = 32
)

// bodyView is a body as the page shows it: JSON indented, text as it is,
// anything else as a hex dump, each cut to a preview.
type bodyView struct {
	Kind string // json, text, binary, none
	Text string
	Size int
	// Cut says what of the body the preview leaves out; empty when it
	// shows all of it.
	Cut []string
	// Download is where the page offers the whole body, as it was
	// published.
	Download string
}

// viewBody shows a body the API answered: JSON as itself (raw), text as a
// JSON string (raw, with its bytes in b64) or as text, anything else in
// b64 only.
func viewBody(raw json.RawMessage, b64 []byte, text string) bodyView {
	if text != "" {
		return textView(text)
	}
	if len(raw) > 0 {
		var s string
		if raw[0] == '"' && json.Unmarshal(raw, &s) == nil && utf8.ValidString(s) {
			return textView(s)
		}
		if json.Valid(raw) {
			out, deep, long := indentJSON(raw, previewDepth, previewBytes)
			v := bodyView{Kind: "json", Text: out, Size: len(raw)}
			if deep {
				v.Cut = append(v.Cut, fmt.Sprintf("Nested deeper than %d levels: what is deeper is shown as [...] or {...}.", previewDepth))
			}
			if long {
				v.Cut = append(v.Cut, fmt.Sprintf("Only the first %d KiB of the indented body are shown.", previewBytes>>10))
			}
			return v
		}
	}
	if len(b64) > 0 {
		v := bodyView{Kind: "binary", Size: len(b64)}
		show := b64
		if len(show) > previewBinary {
			show = show[:previewBinary]
			v.Cut = []string{fmt.Sprintf("Only the first %d KiB of %d bytes are shown.", previewBinary>>10, len(b64))}
		}
		v.Text = hex.Dump(show)
		return v
	}
	return bodyView{Kind: "none"}
}

// textView is text cut to previewBytes, at a character's boundary.
func textView(s string) bodyView {
	v := bodyView{Kind: "text", Text: s, Size: len(s)}
	if len(s) > previewBytes {
		n := previewBytes
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		v.Text = s[:n]
		v.Cut = []string{fmt.Sprintf("Only the first %d KiB of %d bytes are shown.", previewBytes>>10, len(s))}
	}
	return v
}

// indentJSON indents raw, valid JSON as json.Indent(dst, raw, "", "  ")
// does, in one pass, with two bounds: a container nested deeper than
// maxDepth is written as [...] or {...} (deep), and the output stops at
// maxBytes (long). Its cost is linear in len(raw) and its output at most
// maxBytes plus one line.
func indentJSON(raw []byte, maxDepth, maxBytes int) (out string, deep, long bool) {
	var b strings.Builder
	depth := 0
	newline := func() {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat("  ", depth))
	}
	// next is the index of the first byte at or after i that is not
	// white space.
	next := func(i int) int {
		for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
			i++
		}
		return i
	}
	// skip returns the index after the container that opens at i.
	skip := func(i int) int {
		level, inString := 0, false
		for ; i < len(raw); i++ {
			c := raw[i]
			switch {
			case inString && c == '\\':
				i++
			case c == '"':
				inString = !inString
			case inString:
			case c == '[' || c == '{':
				level++
			case c == ']' || c == '}':
				level--
				if level == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i := 0; i < len(raw); {
		if b.Len() >= maxBytes {
			return b.String(), deep, true
		}
		c := raw[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j := i + 1
			for j < len(raw) && raw[j] != '"' {
				if raw[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(raw))
			if b.Len()+end-i > maxBytes {
				n := i + maxBytes - b.Len()
				for n > i && !utf8.RuneStart(raw[n]) {
					n-- // not within a character
				}
				b.Write(raw[i:n])
				return b.String(), deep, true
			}
			b.Write(raw[i:end])
			i = end
		case '[', '{':
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			if depth >= maxDepth {
				b.WriteByte(c)
				b.WriteString("...")
				b.WriteByte(closer)
				deep = true
				i = skip(i)
				continue
			}
			b.WriteByte(c)
			if j := next(i + 1); j < len(raw) && raw[j] == closer {
				b.WriteByte(closer)
				i = j + 1
				continue
			}
			depth++
			newline()
			i++
		case ']', '}':
			depth--
			newline()
			b.WriteByte(c)
			i++
		case ',':
			b.WriteByte(',')
			newline()
			i++
		case ':':
			b.WriteString(": ")
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), deep, false
}
