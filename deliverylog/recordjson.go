package deliverylog

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSON appends rec as JSON, as encoding/json would write it (the
// same fields, omitted when empty as their tags say), without reflection:
// the delivery log's writer encodes one record per attempt, and
// encoding/json cost it a third of its time (measured).
func (rec *AttemptRecord) appendJSON(b []byte) []byte {
	b = append(b, '{')
	if rec.Seq != 0 {
		b = append(b, `"seq":`...)
		b = strconv.AppendUint(b, rec.Seq, 10)
		b = append(b, ',')
	}
	b = appendField(b, "event_id", rec.EventID, false)
	b = appendField(b, "type", rec.Type, true)
	b = appendField(b, "key", rec.Key, true)
	b = appendField(b, "dest", rec.Dest, true)
	b = append(b, `"attempt":`...)
	b = strconv.AppendInt(b, int64(rec.Attempt), 10)
	b = append(b, ',')
	b = appendField(b, "outcome", rec.Outcome, false)
	b = appendField(b, "reason", rec.Reason, true)
	if rec.RetryInMS != 0 {
		b = append(b, `"retry_in_ms":`...)
		b = strconv.AppendInt(b, rec.RetryInMS, 10)
		b = append(b, ',')
	}
	if rec.Parked {
		b = append(b, `"parked":true,`...)
	}
	b = append(b, `"at":"`...)
	b = rec.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","duration_ms":`...)
	b = strconv.AppendFloat(b, rec.DurationMS, 'f', -1, 64)
	b = append(b, ',')
	b = appendField(b, "url", rec.URL, true)
	b = appendField(b, "class", rec.Class, false)
	if rec.Status != 0 {
		b = append(b, `"status":`...)
		b = strconv.AppendInt(b, int64(rec.Status), 10)
		b = append(b, ',')
	}
	b = appendField(b, "error", rec.Error, true)
	if len(rec.ResponseHeaders) > 0 {
		b = append(b, `"response_headers":{`...)
		// In LoggedResponseHeaders' order, then any others: a map's
		// order is random, and records are easier to read alike.
		n := 0
		for _, k := range LoggedResponseHeaders {
			if v, ok := rec.ResponseHeaders[k]; ok {
				b = appendPair(b, k, v, n > 0)
				n++
			}
		}
		if n < len(rec.ResponseHeaders) {
			for k, v := range rec.ResponseHeaders {
				if !isLogged(k) {
					b = appendPair(b, k, v, n > 0)
					n++
				}
			}
		}
		b = append(b, "},"...)
	}
	b = appendField(b, "response_body", rec.ResponseBody, true)
	if rec.EventSeq != 0 {
		b = append(b, `"event_seq":`...)
		b = strconv.AppendUint(b, rec.EventSeq, 10)
		b = append(b, ',')
	}
	if len(rec.Dests) > 0 {
		b = append(b, `"dests":[`...)
		for i, d := range rec.Dests {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d)
		}
		b = append(b, "],"...)
	}
	if rec.DestsMore != 0 {
		b = append(b, `"dests_more":`...)
		b = strconv.AppendInt(b, int64(rec.DestsMore), 10)
		b = append(b, ',')
	}
	b[len(b)-1] = '}' // the last field's comma
	return b
}

func isLogged(k string) bool {
	for _, l := range LoggedResponseHeaders {
		if l == k {
			return true
		}
	}
	return false
}

func appendPair(b []byte, k, v string, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = appendString(b, k)
	b = append(b, ':')
	return appendString(b, v)
}

// appendField appends "name":"v", (nothing when omitEmpty and v is empty).
func appendField(b []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":`...)
	b = appendString(b, v)
	return append(b, ',')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, as encoding/json writes it
// without HTML escaping: invalid UTF-8 becomes U+FFFD, control characters
// and U+2028/U+2029 are escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
