package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress reports a long operation: a redrawn bar on a terminal, plain lines
// otherwise (so logs and scripts get one line per item).
type progress struct {
	w     io.Writer
	tty   bool
	total int
	done  int
	last  time.Time
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// step records one item; line describes it.
func (p *progress) step(line string) {
	p.done++
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	if time.Since(p.last) < 100*time.Millisecond && p.done != p.total {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := width
	if p.total > 0 {
		filled = min(width, width*p.done/p.total)
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d", strings.Repeat("=", filled), strings.Repeat(" ", width-filled), p.done, p.total)
}

// end finishes the bar's line.
func (p *progress) end() {
	if p.tty && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}
