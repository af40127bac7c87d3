package api

import (
	"encoding/json"
	"unicode/utf8"
)

// This file reads the bodies of POST /v1/events and /v1/events:batch in one
// pass over the bytes, where encoding/json scans them twice (once to
// validate, once to decode, and a third time over each event's data to copy
// it): in a profile of batches of 1 KiB events, decoding took about 40% of
// relay's CPU. It reads only the plain form of a body: the exact field
// names, no duplicate field, no null, strings without escapes (but in
// data), well-formed UTF-8. Anything else makes it give up, and the body
// goes through encoding/json, which then gives the answer (and the error
// message) it always did. FuzzFastEventsMatchEncodingJSON holds it to the
// same results as encoding/json on every body it accepts.

// maxFastDepth is the deepest nesting of data the fast path reads
// (encoding/json's limit is 10000; deeper data takes the slow path).
const maxFastDepth = 1000

// fastBatch reads a batch body, {"events":[...]}, or reports false.
// The events' data are slices of body.
func fastBatch(body []byte) ([]newEvent, bool) {
	p := fastParser{b: body}
	var evs []newEvent
	seen := false
	p.ws()
	ok := p.list('{', '}', func() bool {
		k, ok := p.key()
		if !ok || string(k) != "events" || seen {
			return false // unknown, or twice
		}
		seen = true
		evs = make([]newEvent, 0, 16)
		return p.list('[', ']', func() bool {
			var ev newEvent
			if !p.event(&ev) {
				return false
			}
			evs = append(evs, ev)
			return true
		})
	})
	p.ws()
	return evs, ok && p.i == len(p.b)
}

// fastEvent reads a single event's body, or reports false.
func fastEvent(body []byte) (newEvent, bool) {
	p := fastParser{b: body}
	var ev newEvent
	p.ws()
	ok := p.event(&ev)
	p.ws()
	return ev, ok && p.i == len(p.b)
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// list reads an object or an array at p.i, from its open byte to its close
// byte, calling item at each member.
func (p *fastParser) list(open, close byte, item func() bool) bool {
	if !p.eat(open) {
		return false
	}
	p.ws()
	if p.eat(close) {
		return true
	}
	for {
		if !item() {
			return false
		}
		p.ws()
		if p.eat(close) {
			return true
		}
		if !p.eat(',') {
			return false
		}
		p.ws()
	}
}

// key reads a plain member name and its colon.
func (p *fastParser) key() ([]byte, bool) {
	k, ok := p.plainBytes()
	if !ok {
		return nil, false
	}
	p.ws()
	if !p.eat(':') {
		return nil, false
	}
	p.ws()
	return k, true
}

// event reads an event object at p.i.
func (p *fastParser) event(ev *newEvent) bool {
	var seen [6]bool
	return p.list('{', '}', func() bool {
		k, ok := p.key()
		if !ok {
			return false
		}
		f := -1
		switch string(k) {
		case "dest":
			f = 0
		case "type":
			f = 1
		case "key":
			f = 2
		case "id":
			f = 3
		case "headers":
			f = 4
		case "data":
			f = 5
		}
		if f < 0 || seen[f] {
			return false // unknown, or twice
		}
		seen[f] = true
		switch f {
		case 4:
			ev.Headers, ok = p.headers()
			return ok
		case 5:
			start := p.i
			if p.peek() == 'n' || !p.skipValue(0) {
				return false // null data: encoding/json's own answer
			}
			ev.Data = json.RawMessage(p.b[start:p.i])
			return true
		}
		s, ok := p.plainString()
		switch f {
		case 0:
			ev.Dest = s
		case 1:
			ev.Type = s
		case 2:
			ev.Key = s
		case 3:
			ev.ID = s
		}
		return ok
	})
}

// headers reads an object of plain strings.
func (p *fastParser) headers() (map[string]string, bool) {
	h := map[string]string{}
	ok := p.list('{', '}', func() bool {
		k, ok := p.key()
		if !ok {
			return false
		}
		if _, dup := h[string(k)]; dup {
			return false
		}
		v, ok := p.plainString()
		h[string(k)] = v
		return ok
	})
	return h, ok
}

// plainString reads a string without escapes, of well-formed UTF-8 (where
// encoding/json would replace what is not).
func (p *fastParser) plainString() (string, bool) {
	b, ok := p.plainBytes()
	return string(b), ok
}

// plainBytes is plainString's bytes, a slice of the body.
func (p *fastParser) plainBytes() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	ascii := true
	for ; p.i < len(p.b); p.i++ {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// skipValue moves past one JSON value, checking it as encoding/json's
// scanner does (strings may hold any byte from 0x20 up, and escapes).
func (p *fastParser) skipValue(depth int) bool {
	if depth > maxFastDepth || p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.list('{', '}', func() bool {
			if !p.skipString() {
				return false
			}
			p.ws()
			if !p.eat(':') {
				return false
			}
			p.ws()
			return p.skipValue(depth + 1)
		})
	case c == '[':
		return p.list('[', ']', func() bool { return p.skipValue(depth + 1) })
	case c == '"':
		return p.skipString()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return false
}

func (p *fastParser) literal(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// skipString moves past a string, checking its escapes.
func (p *fastParser) skipString() bool {
	if !p.eat('"') {
		return false
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				return false
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if len(p.b)-p.i < 5 {
					return false
				}
				for _, h := range p.b[p.i+1 : p.i+5] {
					if !isHex(h) {
						return false
					}
				}
				p.i += 5
			default:
				return false
			}
		default:
			p.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number moves past a number of JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastParser) number() bool {
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.i < len(p.b) && p.b[p.i] >= '1' && p.b[p.i] <= '9':
		p.digits()
	default:
		return false
	}
	if p.eat('.') {
		if !p.digits() {
			return false
		}
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if !p.digits() {
			return false
		}
	}
	return true
}

// digits moves past one digit or more, and reports whether there was one.
func (p *fastParser) digits() bool {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}
