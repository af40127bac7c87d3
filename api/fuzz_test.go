package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream/streamtest"
)

// fuzzServer is the API over a real NATS server, with a destination
// "orders" and an admin key, for the fuzz targets.
func fuzzServer(f *testing.F) (http.Handler, string) {
	srv := streamtest.Start(f)
	ctx := context.Background()
	keys, err := OpenKeys(ctx, srv.JS)
	if err != nil {
		f.Fatal(err)
	}
	prod, err := publish.NewProducer(ctx, srv.JS)
	if err != nil {
		f.Fatal(err)
	}
	st, err := destination.NewStore(ctx, srv.JS)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := st.Add(ctx, destination.Destination{Name: "orders", URL: "https://example.com/hooks"}); err != nil {
		f.Fatal(err)
	}
	key, _, err := keys.Create(ctx, "fuzz", ScopeAdmin)
	if err != nil {
		f.Fatal(err)
	}
	return NewServer(Config{JS: srv.JS, Keys: keys, Producer: prod, MaxBody: 64 << 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), key
}

// checkAnswer fails on a 5xx other than 503 (NATS not answering), and on
// an error that is not a problem document saying what was wrong.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with content type %q", rec.Code, ct)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != rec.Code || p.Detail == "" {
		t.Fatalf("status %d with a problem that does not say what was wrong: %s", rec.Code, rec.Body)
	}
}

// FuzzPublishRequest: any body and Idempotency-Key sent to POST /v1/events
// is stored (202) or refused with a problem that says why, never a 500.
func FuzzPublishRequest(f *testing.F) {
	h, key := fuzzServer(f)
	for _, seed := range []string{
		`{"dest":"orders","data":{"a":1}}`, `{"type":"order.created","key":"k","data":"x"}`,
		`{"dest":"orders","id":"evt_1","headers":{"X-A":"b"},"data":[1,2]}`, `{"dest":"nobody","data":1}`,
		`{"dest":"orders"}`, `{"data":1}`, `{"dest":7,"data":1}`, `{"dest":"orders","data":1,"x":1}`, `{`, ``, `null`,
		`{"dest":"orders","headers":{"Bad Name":"v"},"data":1}`, `{"dest":"orders","id":"a\u0000b","data":1}`,
	} {
		f.Add(seed, "")
	}
	f.Add(`{"dest":"orders","data":1}`, "evt_idem")
	f.Add(`{"dest":"orders","id":"a","data":1}`, "b")
	f.Fuzz(func(t *testing.T, body, idem string) {
		req := httptest.NewRequest("POST", "/v1/events", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if idem != "" {
			req.Header["Idempotency-Key"] = []string{idem}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, rec)
		if rec.Code != http.StatusAccepted && rec.Code != http.StatusServiceUnavailable && rec.Code < 400 {
			t.Fatalf("status %d", rec.Code)
		}
	})
}

// FuzzAttemptsQuery: any query string of GET /v1/attempts is answered or
// refused with a problem that says why, never a 500.
func FuzzAttemptsQuery(f *testing.F) {
	h, key := fuzzServer(f)
	for _, seed := range []string{
		"dest=orders&status=5xx&limit=10", "status=503", "since=2026-01-02T15:04:05Z&until=2026-01-03T00:00:00Z",
		"cursor=12", "limit=0", "status=6xx", "dest=Bad!", "x=1", "dest=a&dest=b", "%zz", "event=evt_1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest("GET", "/v1/attempts", nil)
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
}
