package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaydev/relay/webhook"

	"github.com/stretchr/testify/require"
)

func TestSinkFailsFirstAndVerifiesSignatures(t *testing.T) {
	secret := webhook.GenerateSecret()
	var out bytes.Buffer
	s := &sink{out: &out, secret: secret, status: 200, failFirst: 2, failStatus: 503, retryAfter: "7", asJSON: true, seen: map[string]int{}}
	srv := httptest.NewServer(s)
	defer srv.Close()

	post := func(id, body string, sign bool) *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		require.NoError(t, err)
		ts := time.Now().Unix()
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("X-Tenant", "acme")
		req.Header.Add("X-Tag", "a")
		req.Header.Add("X-Tag", "b")
		if sign {
			sig, err := webhook.Sign(secret, id, ts, []byte(body))
			require.NoError(t, err)
			req.Header.Set("webhook-signature", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	r := post("a", `{}`, true)
	require.Equal(t, 503, r.StatusCode)
	require.Equal(t, "7", r.Header.Get("Retry-After"))
	require.Equal(t, 503, post("a", `{}`, true).StatusCode)
	require.Equal(t, 200, post("a", `{}`, true).StatusCode, "third request of an id succeeds")
	require.Equal(t, 503, post("b", `{}`, true).StatusCode, "counted per webhook-id")
	require.Equal(t, 401, post("c", `{}`, false).StatusCode, "unsigned request refused")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 5)
	var rec sinkRecord
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &rec))
	require.Equal(t, "a", rec.ID)
	require.Equal(t, 3, rec.Attempt)
	require.Equal(t, "valid", rec.Signature)
	require.Equal(t, 200, rec.Status)
	require.Equal(t, "acme", rec.Headers["X-Tenant"], "--json carries the request's headers")
	require.Equal(t, "a, b", rec.Headers["X-Tag"])
	require.Equal(t, "a", rec.Headers["Webhook-Id"])
	require.NotEmpty(t, rec.Headers["Webhook-Signature"])
	require.NoError(t, json.Unmarshal([]byte(lines[4]), &rec))
	require.Equal(t, "invalid", rec.Signature)
}

// With --public-key the sink verifies v1a signatures.
func TestSinkVerifiesEd25519(t *testing.T) {
	key := webhook.GenerateSigningKey()
	pk, err := webhook.PublicKey(key)
	require.NoError(t, err)
	var out bytes.Buffer
	s := &sink{out: &out, secret: pk, status: 200, seen: map[string]int{}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	post := func(sign func(id string, ts int64, body []byte) (string, error)) int {
		ts := time.Now().Unix()
		sig, err := sign("evt_1", ts, []byte(`{}`))
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("webhook-id", "evt_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, post(func(id string, ts int64, b []byte) (string, error) { return webhook.SignEd25519(key, id, ts, b) }))
	other := webhook.GenerateSigningKey()
	require.Equal(t, 401, post(func(id string, ts int64, b []byte) (string, error) { return webhook.SignEd25519(other, id, ts, b) }))
	require.Equal(t, 401, post(func(id string, ts int64, b []byte) (string, error) {
		return webhook.Sign(webhook.GenerateSecret(), id, ts, b)
	}), "a v1 signature does not pass for a public key")
}
