package api

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// This file reads the bodies of POST /v1/events and /v1/events:batch in one
// pass over the bytes with jsontext (the encoding/json/v2 prototype's
// tokenizer), where encoding/json scans them twice (once to validate, once
// to decode, and a third time over each event's data to copy it): in a
// profile of batches of 1 KiB events, decoding took about 40% of relay's
// CPU. An event's data is not decoded, only checked, and kept as a slice of
// the body. It reads the form encoding/json reads the same way: the exact
// field names, each once, no null, well-formed UTF-8 (jsontext refuses
// what is not, and duplicate names in data). Anything else makes it give
// up, and the body goes through encoding/json, which then gives the answer
// (and the error message) it always did. FuzzFastEventsMatchEncodingJSON
// holds it to the same results as encoding/json on every body it accepts.

// bodyDecoder reads one request body; they are pooled with their buffers.
type bodyDecoder struct {
	dec  *jsontext.Decoder
	r    bytes.Reader
	body []byte
}

var bodyDecoders = sync.Pool{New: func() any {
	d := &bodyDecoder{}
	d.dec = jsontext.NewDecoder(&d.r)
	return d
}}

func newBodyDecoder(body []byte) *bodyDecoder {
	d := bodyDecoders.Get().(*bodyDecoder)
	d.r.Reset(body)
	d.body = body
	d.dec.Reset(&d.r)
	return d
}

func (d *bodyDecoder) release() {
	d.r.Reset(nil)
	d.body = nil
	d.dec.Reset(&d.r)
	bodyDecoders.Put(d)
}

// fastBatch reads a batch body, {"events":[...]}, or reports false.
// The events' data are slices of body.
func fastBatch(body []byte) ([]newEvent, bool) {
	d := newBodyDecoder(body)
	defer d.release()
	if !d.open('{') {
		return nil, false
	}
	var evs []newEvent
	seen := false
	for {
		switch d.dec.PeekKind() {
		case '}':
			return evs, d.close() && d.end()
		case '"':
		default:
			return nil, false
		}
		name, err := d.dec.ReadToken()
		if err != nil || name.String() != "events" || seen || !d.open('[') {
			return nil, false // unknown, or null
		}
		seen = true
		evs = make([]newEvent, 0, 16)
		for d.dec.PeekKind() != ']' {
			var ev newEvent
			if !d.event(&ev) {
				return nil, false
			}
			evs = append(evs, ev)
		}
		if !d.close() {
			return nil, false
		}
	}
}

// fastEvent reads a single event's body, or reports false.
func fastEvent(body []byte) (newEvent, bool) {
	d := newBodyDecoder(body)
	defer d.release()
	var ev newEvent
	ok := d.event(&ev) && d.end()
	return ev, ok
}

// open reads the start of an object or an array, kind.
func (d *bodyDecoder) open(kind jsontext.Kind) bool {
	if d.dec.PeekKind() != kind {
		return false
	}
	_, err := d.dec.ReadToken()
	return err == nil
}

// close reads the end of an object or an array.
func (d *bodyDecoder) close() bool {
	_, err := d.dec.ReadToken()
	return err == nil
}

// end reports whether nothing but white space is left.
func (d *bodyDecoder) end() bool {
	_, err := d.dec.ReadToken()
	return err == io.EOF
}

// The fields of an event.
var eventFields = map[string]int{"dest": 0, "type": 1, "key": 2, "id": 3, "headers": 4, "data": 5, "tenant": 6}

// event reads an event object.
func (d *bodyDecoder) event(ev *newEvent) bool {
	if !d.open('{') {
		return false
	}
	var seen [7]bool
	for {
		switch d.dec.PeekKind() {
		case '}':
			return d.close()
		case '"':
		default:
			return false
		}
		name, err := d.dec.ReadToken()
		if err != nil {
			return false
		}
		f, ok := eventFields[name.String()]
		if !ok || seen[f] {
			return false // unknown, or twice
		}
		seen[f] = true
		switch f {
		case 4:
			if ev.Headers, ok = d.headers(); !ok {
				return false
			}
			continue
		case 5:
			if d.dec.PeekKind() == 'n' {
				return false // null data: encoding/json's own answer
			}
			v, err := d.dec.ReadValue()
			if err != nil {
				return false
			}
			end := int(d.dec.InputOffset())
			ev.Data = json.RawMessage(d.body[end-len(v) : end])
			continue
		}
		s, ok := d.str()
		if !ok {
			return false
		}
		switch f {
		case 0:
			ev.Dest = s
		case 1:
			ev.Type = s
		case 2:
			ev.Key = s
		case 3:
			ev.ID = s
		case 6:
			ev.Tenant = s
		}
	}
}

// str reads a string.
func (d *bodyDecoder) str() (string, bool) {
	if d.dec.PeekKind() != '"' {
		return "", false
	}
	t, err := d.dec.ReadToken()
	if err != nil {
		return "", false
	}
	return t.String(), true
}

// headers reads an object of strings.
func (d *bodyDecoder) headers() (map[string]string, bool) {
	if !d.open('{') {
		return nil, false
	}
	h := map[string]string{}
	for {
		switch d.dec.PeekKind() {
		case '}':
			return h, d.close()
		case '"':
		default:
			return nil, false
		}
		// A token is valid until the next read.
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		v, ok := d.str()
		if !ok {
			return nil, false
		}
		h[k] = v
	}
}
