package deliverylog

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// marshalled is rec as encoding/json writes it, without HTML escaping.
func marshalled(t testing.TB, rec AttemptRecord) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(rec))
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func TestRecordJSONIsEncodingJSONs(t *testing.T) {
	full := AttemptRecord{Seq: 9, EventID: "evt_1", Type: "order.created", Key: "k\"1", Dest: "orders", Attempt: 3,
		Outcome: "retry", Reason: "x", RetryInMS: 1500, Parked: true, At: time.Date(2026, 12, 2, 1, 2, 3, 4000, time.UTC),
		DurationMS: 12.345, URL: "https://example.com/x?token=xxxxx", Class: "5xx", Status: 503, Error: "bad\nthing\x01\u2028",
		ResponseHeaders: map[string]string{"Content-Type": "text/plain", "X-Request-Id": "r1"}, ResponseBody: "<b>\xff</b>",
		EventSeq: 42, Dests: []string{"a", "b"}, DestsMore: 3}
	for _, rec := range []AttemptRecord{
		full,
		{EventID: "evt_2", Outcome: "delivered", At: time.Unix(0, 0).UTC(), Class: "2xx", Status: 200},
		{EventID: "", Outcome: "filtered", Class: "none"},
	} {
		got := rec.appendJSON(nil)
		require.JSONEq(t, string(marshalled(t, rec)), string(got))
		if len(rec.ResponseHeaders) < 2 {
			require.Equal(t, string(marshalled(t, rec)), string(got), "byte for byte")
		}
	}
}

func FuzzRecordJSON(f *testing.F) {
	f.Add("evt_1", "body <b>", "err\n", 503, 1.5)
	f.Add("\xff\xfe", "\u2028\u2029", "\x00", 0, 0.0)
	f.Fuzz(func(t *testing.T, id, body, errText string, status int, ms float64) {
		rec := AttemptRecord{EventID: id, Outcome: "retry", Class: "5xx", Status: status, DurationMS: ms, Error: errText, ResponseBody: body,
			At: time.Unix(1_800_000_000, 123).UTC(), ResponseHeaders: map[string]string{"Content-Type": body}}
		got := rec.appendJSON(nil)
		var back, want AttemptRecord
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("not JSON: %v: %s", err, got)
		}
		require.NoError(t, json.Unmarshal(marshalled(t, rec), &want))
		require.Equal(t, want, back)
	})
}

func BenchmarkRecordJSON(b *testing.B) {
	rec := AttemptRecord{EventID: "evt_06h38behkxtcxkswg9jbwvpmx8", Dest: "orders", Attempt: 1, Outcome: "delivered",
		At: time.Now().UTC(), DurationMS: 0.734, URL: "http://127.0.0.1:8080/hook", Class: "2xx", Status: 204, EventSeq: 123456}
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = rec.appendJSON(buf[:0])
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(rec)
		}
	})
}
