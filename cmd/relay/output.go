package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// What the commands' output shares.

// destinations is "1 destination" or "n destinations".
func destinations(n int) string { return plural(n, "destination") }

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jsonLines writes one JSON object per line: each item as out makes it.
func jsonLines[T any](w io.Writer, items []T, out func(T) any) error {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(out(it)); err != nil {
			return err
		}
	}
	return nil
}

// printable escapes what a terminal would act on rather than show: control
// characters (C0 but, with multiline, newline and tab; DEL; C1) and the
// bidirectional overrides, as \xNN or \uNNNN. The --json output is exact
// instead.
func printable(s string, multiline bool) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case multiline && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		case r >= 0x80 && r <= 0x9f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// oneLine is s made printable on one line.
func oneLine(s string) string { return printable(s, false) }
