package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// slowDecode decodes body as readJSONUpTo does without the fast path.
func slowDecode(body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(v) == nil && len(bytes.TrimLeft(body[dec.InputOffset():], jsonSpace)) == 0
}

// checkFastMatchesSlow: whatever body the fast path accepts, encoding/json
// accepts too, with the same result.
func checkFastMatchesSlow(t *testing.T, body []byte) (batchOK, eventOK bool) {
	t.Helper()
	if got, ok := fastBatch(body); ok {
		var want batchBody
		require.True(t, slowDecode(body, &want), "the fast path took a batch encoding/json refuses: %q", body)
		require.Equal(t, want.Events, got, "%q", body)
		batchOK = true
	}
	if got, ok := fastEvent(body); ok {
		var want newEvent
		require.True(t, slowDecode(body, &want), "the fast path took an event encoding/json refuses: %q", body)
		require.Equal(t, want, got, "%q", body)
		eventOK = true
	}
	return batchOK, eventOK
}

var fastSeeds = []string{
	`{"events":[{"dest":"orders","key":"k1","id":"evt_1","headers":{"X-A":"b"},"data":{"n":1,"s":"a\"b\\c\u00e9","f":-1.5e+3,"t":true,"z":null,"a":[1,[2],{}]}}]}`,
	` {"events" : [ {"type":"order.created","data":"text"} , {"dest":"d","data":[]} ] } ` + "\n",
	`{"dest":"orders","data":{"x":"ünïcode"}}`,
	`{"dest":"orders","data":1}}`,
	`{"events":[{"dest":"orders","data":1}]}]`,
	`{"events":[]}`,
	`{}`,
	`{"events":[{}]}`,
	`{"events":null}`,
	`{"events":[{"data":null}]}`,
	`{"Events":[{"dest":"a","data":1}]}`,
	`{"events":[{"Dest":"a","data":1}]}`,
	`{"events":[{"dest":"a","dest":"b","data":1}]}`,
	`{"events":[{"dest":"a\u0041","data":1}]}`,
	`{"events":[{"dest":"a","data":01}]}`,
	`{"events":[{"dest":"a","data":1.}]}`,
	`{"events":[{"dest":"a","data":-}]}`,
	`{"events":[{"dest":"a","data":"\x"}]}`,
	`{"events":[{"dest":"a","data":"\u12"}]}`,
	`{"events":[{"dest":"a","data":{"a":1,}}]}`,
	`{"events":[{"dest":"a","data":[1,]}]}`,
	`{"events":[{"dest":"a","data":tru}]}`,
	`{"events":[{"dest":"a","data":1}]} {}`,
	`{"events":[{"dest":"a","data":1}],"more":1}`,
	`{"events":[{"dest":"a","headers":{"a":"1","a":"2"},"data":1}]}`,
	`{"events":[{"dest":"a","headers":{"a":1},"data":1}]}`,
	`{"events":[{"dest":5,"data":1}]}`,
	"{\"events\":[{\"dest\":\"a\xff\",\"data\":1}]}",
	"{\"events\":[{\"dest\":\"a\",\"data\":\"\xff\"}]}",
	"{\"events\":[{\"dest\":\"a\",\"data\":\"\x01\"}]}",
	`[]`,
	``,
	`{"dest":"a","data":1,"extra":2}`,
}

// TestFastPathMatchesEncodingJSON: on the seeds, the fast path takes the
// plain bodies (with the same result as encoding/json) and leaves the
// others to encoding/json.
func TestFastPathMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range fastSeeds {
		checkFastMatchesSlow(t, []byte(s))
	}
	// The plain forms do take the fast path.
	for i, s := range fastSeeds[:3] {
		b, e := checkFastMatchesSlow(t, []byte(s))
		require.True(t, b || e, "seed %d takes the fast path", i)
	}
	// Deep data is read as encoding/json reads it, up to the same limit
	// (10,000 levels), past which both refuse it.
	deep := `{"dest":"a","data":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`
	_, e := checkFastMatchesSlow(t, []byte(deep))
	require.True(t, e, "data nested 2,000 deep")
	tooDeep := []byte(`{"dest":"a","data":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`)
	_, e = checkFastMatchesSlow(t, tooDeep)
	require.False(t, e, "data nested past 10,000")
	require.False(t, slowDecode(tooDeep, &newEvent{}))
}

func FuzzFastEventsMatchEncodingJSON(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastMatchesSlow(t, body)
	})
}

// BenchmarkBatchDecode: a batch of 100 1 KiB events, by the fast path and
// by encoding/json.
func BenchmarkBatchDecode(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"events":[`)
	for i := range 100 {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"dest":"orders","id":"evt_` + strings.Repeat("x", 20) + `","data":{"pad":"` + strings.Repeat("a", 1000) + `"}}`)
	}
	buf.WriteString(`]}`)
	body := buf.Bytes()
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, ok := fastBatch(body); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var v batchBody
			if !slowDecode(body, &v) {
				b.Fatal("refused")
			}
		}
	})
}
