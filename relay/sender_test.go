package relay

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/internal/version"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/webhook"

	"github.com/stretchr/testify/require"
)

// senderTestSender delivers through the real client, with loopback allowed so
// that it can reach httptest servers.
func senderTestSender(t *testing.T) *Sender {
	t.Helper()
	c := egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	t.Cleanup(c.CloseIdleConnections)
	return &Sender{Client: c, Now: time.Now}
}

// senderTestServer starts a loopback server. Every handler invocation sends
// on the returned channel when it returns, so a test can check that a hostile
// handler was released.
func senderTestServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	done := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			select {
			case done <- struct{}{}:
			default: // nobody is counting past the buffer
			}
		}()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, done
}

// senderTestHandlerReleased fails t unless a handler of the server returned
// within a generous bound: relay must not keep a hostile peer's connection
// open after the attempt.
func senderTestHandlerReleased(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's handler was never released: relay kept reading or kept the connection open")
	}
}

func senderTestDest(u string, timeout time.Duration) destination.Destination {
	return destination.Destination{Name: "d", URL: u, Timeout: destination.Duration(timeout)}.WithDefaults()
}

func TestSenderSlowDripBodyTimesOut(t *testing.T) {
	t.Parallel()
	srv, done := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				if _, err := w.Write([]byte{'.'}); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	})
	s := senderTestSender(t)
	start := time.Now()
	res := s.Send(t.Context(), senderTestDest(srv.URL, 500*time.Millisecond), Delivery{ID: "evt_1", Body: []byte(`{}`)})
	elapsed := time.Since(start)
	require.Less(t, elapsed, 2*time.Second, "the destination timeout bounds the whole attempt, body included")
	require.Less(t, res.Duration, 2*time.Second)
	require.GreaterOrEqual(t, res.Duration, 400*time.Millisecond, "the attempt lasted until the timeout")
	require.Error(t, res.Err, "a body that never ends within the timeout is a failed attempt, not a delivery: %+v", res)
	require.Contains(t, res.Err.Error(), "timeout")
	require.NotEqual(t, Ack, classify(res, 1, destination.RetryPolicy{}.WithDefaults(), nil).Action, "an attempt that timed out must not be acknowledged")
	senderTestHandlerReleased(t, done)
}

func TestSenderSlowHeadersTimesOut(t *testing.T) {
	t.Parallel()
	srv, done := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	})
	s := senderTestSender(t)
	start := time.Now()
	res := s.Send(t.Context(), senderTestDest(srv.URL, 300*time.Millisecond), Delivery{ID: "evt_1"})
	require.Less(t, time.Since(start), 2*time.Second)
	require.Equal(t, 0, res.Status)
	require.False(t, res.Blocked)
	require.ErrorContains(t, res.Err, "timeout after 300ms")
	dec := classify(res, 1, destination.RetryPolicy{NoJitter: true}.WithDefaults(), nil)
	require.Equal(t, Decision{Action: Retry, Delay: 2 * time.Second}, dec, "a timeout is retried")
	senderTestHandlerReleased(t, done)
}

func TestSenderEndless500Body(t *testing.T) {
	t.Parallel()
	chunk := bytes.Repeat([]byte{'x'}, 4096)
	srv, done := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	s := senderTestSender(t)
	start := time.Now()
	res := s.Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), Delivery{ID: "evt_1"})
	require.Less(t, time.Since(start), 2*time.Second, "relay must stop reading an endless body long before the timeout")
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusInternalServerError, res.Status)
	require.LessOrEqual(t, len(res.Snippet), 256)
	require.Equal(t, strings.Repeat("x", 256), res.Snippet)
	require.Equal(t, Retry, classify(res, 1, destination.RetryPolicy{}.WithDefaults(), nil).Action)
	senderTestHandlerReleased(t, done)
}

// senderTestGzipBomb is the gzip of 50 MB of zeros (about 50 KB).
var senderTestGzipBomb = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range 50 {
		_, _ = zw.Write(zeros)
	}
	_ = zw.Close()
	return buf.Bytes()
})

func TestSenderGzipBomb(t *testing.T) {
	t.Parallel()
	bomb := senderTestGzipBomb()
	require.Less(t, len(bomb), 1<<20, "the bomb is small on the wire")
	srv, done := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(len(bomb)))
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write(bomb)
	})
	s := senderTestSender(t)
	start := time.Now()
	res := s.Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), Delivery{ID: "evt_1"})
	require.Less(t, time.Since(start), 2*time.Second, "relay must not inflate the whole body")
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusInternalServerError, res.Status)
	require.LessOrEqual(t, len(res.Snippet), 256)
	require.True(t, utf8.ValidString(res.Snippet))
	senderTestHandlerReleased(t, done)
}

func TestSenderBinaryErrorBodySnippet(t *testing.T) {
	t.Parallel()
	// Invalid UTF-8 and a multi-byte rune cut at the limit.
	body := append(bytes.Repeat([]byte{0xff, 'a'}, 100), []byte(strings.Repeat("é", 200))...)
	srv, _ := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write(body)
	})
	res := senderTestSender(t).Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), Delivery{ID: "evt_1"})
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusBadGateway, res.Status)
	require.True(t, utf8.ValidString(res.Snippet), "the snippet goes into headers and JSON: it must be valid UTF-8")
	require.LessOrEqual(t, utf8.RuneCountInString(res.Snippet), 256, "at most 256 bytes of body are kept")
	require.True(t, strings.HasPrefix(res.Snippet, "\uFFFDa\uFFFDa"), "snippet %q", res.Snippet)
}

func TestSenderSuccessBodyIsNotKept(t *testing.T) {
	t.Parallel()
	srv, _ := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok, thanks")
	})
	res := senderTestSender(t).Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), Delivery{ID: "evt_1"})
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusOK, res.Status)
	require.Empty(t, res.Snippet, "only failed responses keep a snippet")
	require.Equal(t, Ack, classify(res, 1, destination.RetryPolicy{}.WithDefaults(), nil).Action)
}

func TestSenderRetryAfterHostileValues(t *testing.T) {
	t.Parallel()
	// A fixed clock on whole seconds, so that an HTTP date (second
	// resolution) gives an exact delay.
	now := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	srv, _ := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		for _, v := range r.URL.Query()["ra"] {
			w.Header().Add("Retry-After", v)
		}
		w.WriteHeader(http.StatusTooManyRequests)
	})
	c := egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	t.Cleanup(c.CloseIdleConnections)
	s := &Sender{Client: c, Now: func() time.Time { return now }}

	policy := destination.RetryPolicy{Max: destination.Duration(10 * time.Second)}.WithDefaults()
	require.NoError(t, policy.Validate())
	const month = 30 * 24 * time.Hour
	tests := []struct {
		name  string
		ra    []string
		has   bool
		after time.Duration
		delay time.Duration // -1: the jittered backoff of attempt 1
	}{
		{"negative", []string{"-5"}, false, 0, -1},
		{"letters", []string{"abc"}, false, 0, -1},
		{"fraction", []string{"1.5"}, false, 0, -1},
		{"unit", []string{"5s"}, false, 0, -1},
		{"plus sign", []string{"+5"}, false, 0, -1},
		{"out of range", []string{"99999999999999999999"}, true, month, 10 * time.Second},
		{"max uint64", []string{"18446744073709551615"}, true, month, 10 * time.Second},
		{"an hour", []string{"3600"}, true, time.Hour, 10 * time.Second},
		{"three seconds", []string{"3"}, true, 3 * time.Second, 3 * time.Second},
		{"zero", []string{"0"}, true, 0, 0},
		{"http date 2s ahead", []string{now.Add(2 * time.Second).Format(http.TimeFormat)}, true, 2 * time.Second, 2 * time.Second},
		{"http date in the past", []string{now.Add(-time.Hour).Format(http.TimeFormat)}, true, 0, 0},
		{"http date far ahead", []string{now.AddDate(5, 0, 0).Format(http.TimeFormat)}, true, month, 10 * time.Second},
		{"http date year 1", []string{"Mon, 01 Jan 0001 00:00:00 GMT"}, true, 0, 0},
		{"http date year 9999", []string{"Fri, 31 Dec 9999 23:59:59 GMT"}, true, month, 10 * time.Second},
		{"garbage date", []string{"Fri, 99 Foo 2024 99:99:99 GMT"}, false, 0, -1},
		{"first of two wins", []string{"4", "100"}, true, 4 * time.Second, 4 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := srv.URL + "/?" + url.Values{"ra": tc.ra}.Encode()
			res := s.Send(t.Context(), senderTestDest(u, 5*time.Second), Delivery{ID: "evt_1"})
			require.NoError(t, res.Err)
			require.Equal(t, http.StatusTooManyRequests, res.Status)
			require.Equal(t, tc.has, res.HasRetryAfter, "HasRetryAfter for %q", tc.ra)
			require.Equal(t, tc.after, res.RetryAfter, "RetryAfter for %q", tc.ra)
			wantRA, wantOK := ParseRetryAfter(tc.ra[0], now)
			require.Equal(t, wantOK, res.HasRetryAfter, "Send must agree with ParseRetryAfter")
			require.Equal(t, wantRA, res.RetryAfter, "Send must agree with ParseRetryAfter")

			for range 20 { // the backoff is jittered: try a few draws
				dec := classify(res, 1, policy, nil)
				require.Equal(t, Retry, dec.Action)
				require.GreaterOrEqual(t, dec.Delay, time.Duration(0), "a delay is never negative")
				require.LessOrEqual(t, dec.Delay, 10*time.Second, "a delay never exceeds the policy's Max")
				if tc.delay >= 0 {
					require.Equal(t, tc.delay, dec.Delay)
				} else {
					// 2s base, jitter 0.2.
					require.GreaterOrEqual(t, dec.Delay, 1600*time.Millisecond)
					require.LessOrEqual(t, dec.Delay, 2400*time.Millisecond)
				}
			}
			// Every later attempt too: a Retry-After is capped at Max, a
			// backoff at Max before a jitter of at most +20%.
			rnd := rand.New(rand.NewPCG(1, 2))
			for attempt := 1; attempt < policy.MaxAttempts; attempt++ {
				dec := classify(res, attempt, policy, rnd)
				require.Equal(t, Retry, dec.Action)
				require.GreaterOrEqual(t, dec.Delay, time.Duration(0))
				if res.HasRetryAfter {
					require.LessOrEqual(t, dec.Delay, 10*time.Second)
				} else {
					require.LessOrEqual(t, dec.Delay, 12*time.Second)
				}
			}
			require.Equal(t, Decision{Action: DeadLetter, Reason: ReasonMaxAttempts}, classify(res, policy.MaxAttempts, policy, rnd))
		})
	}
}

// senderTestCapture records the requests a server receives.
type senderTestCapture struct {
	Host   string
	Header http.Header
	Body   []byte
	Method string
	Path   string
}

func senderTestCapturingServer(t *testing.T) (*httptest.Server, <-chan senderTestCapture) {
	t.Helper()
	got := make(chan senderTestCapture, 16)
	srv, _ := senderTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- senderTestCapture{Host: r.Host, Header: r.Header.Clone(), Body: b, Method: r.Method, Path: r.URL.RequestURI()}
		w.WriteHeader(http.StatusNoContent)
	})
	return srv, got
}

func senderTestReceive(t *testing.T, got <-chan senderTestCapture) senderTestCapture {
	t.Helper()
	select {
	case c := <-got:
		return c
	default:
		t.Fatal("Send returned but the server recorded no request")
		return senderTestCapture{}
	}
}

func TestSenderHeaders(t *testing.T) {
	t.Parallel()
	srv, got := senderTestCapturingServer(t)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	now := time.Unix(1_900_000_000, 0)
	c := egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	t.Cleanup(c.CloseIdleConnections)
	s := &Sender{Client: c, Now: func() time.Time { return now }}
	secret := webhook.GenerateSecret()
	body := []byte(`{"hello":"world"}`)

	t.Run("signed, with forwarded and refused event headers", func(t *testing.T) {
		d := senderTestDest(srv.URL+"/hook?x=1", 5*time.Second)
		d.Secret = secret
		d.Headers = map[string]string{"Authorization": "Bearer dest-token", "X-Shared": "from-destination"}
		ev := Delivery{ID: "evt_42", Body: body, Headers: http.Header{
			"X-Event":           {"a", "b"},
			"X-Shared":          {"from-event"},
			"Host":              {"evil.example"},
			"Webhook-Id":        {"forged-id"},
			"webhook-id":        {"forged-id-lower"},
			"Webhook-Signature": {"v1,forged"},
			"webhook-timestamp": {"1"},
			"Relay-X":           {"1"},
			"relay-event-id":    {"forged"},
			"Nats-Msg-Id":       {"forged"},
			"User-Agent":        {"evil/1.0"},
			"Content-Length":    {"1"},
			"Transfer-Encoding": {"chunked"},
			"Connection":        {"close"},
			"Webhook-X":         {"a\x01b"},
		}}
		res := s.Send(t.Context(), d, ev)
		require.NoError(t, res.Err)
		require.Equal(t, http.StatusNoContent, res.Status)
		r := senderTestReceive(t, got)

		require.Equal(t, http.MethodPost, r.Method)
		require.Equal(t, "/hook?x=1", r.Path)
		require.Equal(t, body, r.Body)
		require.Equal(t, u.Host, r.Host, "an event cannot change the Host")
		require.Equal(t, []string{"evt_42"}, r.Header.Values("Webhook-Id"), "webhook-id is relay's, exactly once")
		require.Equal(t, []string{"1900000000"}, r.Header.Values("Webhook-Timestamp"))
		sigs := r.Header.Values("Webhook-Signature")
		require.Len(t, sigs, 1)
		require.True(t, strings.HasPrefix(sigs[0], "v1,"), sigs[0])
		require.NoError(t, webhook.Verify(secret, "evt_42", 1_900_000_000, body, sigs[0]), "the signature verifies")
		require.Error(t, webhook.Verify(secret, "evt_43", 1_900_000_000, body, sigs[0]), "the signature covers the id")
		require.Equal(t, []string{"relay/" + version.Version}, r.Header.Values("User-Agent"))
		require.True(t, strings.HasPrefix(r.Header.Get("User-Agent"), "relay/"))
		require.Equal(t, []string{"application/json"}, r.Header.Values("Content-Type"))
		require.Equal(t, strconv.Itoa(len(body)), r.Header.Get("Content-Length"))
		require.Empty(t, r.Header.Values("Transfer-Encoding"))
		require.Equal(t, []string{"a", "b"}, r.Header.Values("X-Event"), "event headers are forwarded, all values")
		require.Equal(t, []string{"Bearer dest-token"}, r.Header.Values("Authorization"))
		require.Equal(t, []string{"from-destination"}, r.Header.Values("X-Shared"), "the destination's headers win over the event's")
		for _, h := range []string{"Relay-X", "Relay-Event-Id", "Nats-Msg-Id", "Webhook-X"} {
			require.Empty(t, r.Header.Values(h), "%s must not be forwarded", h)
		}
		for k := range r.Header {
			require.False(t, strings.HasPrefix(strings.ToLower(k), "relay-"), "header %s forwarded", k)
			require.False(t, strings.HasPrefix(strings.ToLower(k), "nats-"), "header %s forwarded", k)
		}
	})

	t.Run("unsigned without a secret", func(t *testing.T) {
		res := s.Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), Delivery{ID: "evt_7", Body: body})
		require.NoError(t, res.Err)
		r := senderTestReceive(t, got)
		require.Empty(t, r.Header.Values("Webhook-Signature"))
		require.Equal(t, []string{"evt_7"}, r.Header.Values("Webhook-Id"))
		require.Equal(t, []string{"1900000000"}, r.Header.Values("Webhook-Timestamp"))
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	})

	t.Run("event content type is kept", func(t *testing.T) {
		ev := Delivery{ID: "evt_8", Body: []byte("plain"), Headers: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}}
		res := s.Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), ev)
		require.NoError(t, res.Err)
		r := senderTestReceive(t, got)
		require.Equal(t, []string{"text/plain; charset=utf-8"}, r.Header.Values("Content-Type"))
	})

	t.Run("event content type under a lower-case key is kept", func(t *testing.T) {
		// Event headers come from NATS, which keeps the producer's
		// spelling of header names.
		ev := Delivery{ID: "evt_9", Body: []byte("<a/>"), Headers: http.Header{"content-type": {"application/xml"}}}
		res := s.Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), ev)
		require.NoError(t, res.Err)
		r := senderTestReceive(t, got)
		require.Equal(t, []string{"application/xml"}, r.Header.Values("Content-Type"))
	})

	t.Run("ed25519 and both, across a rotation", func(t *testing.T) {
		key, old := webhook.GenerateSigningKey(), webhook.GenerateSigningKey()
		verify := func(sk, sig string) bool {
			pk, err := webhook.PublicKey(sk)
			require.NoError(t, err)
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(pk, webhook.PublicKeyPrefix))
			require.NoError(t, err)
			s, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1a,"))
			require.NoError(t, err)
			return strings.HasPrefix(sig, "v1a,") && ed25519.Verify(raw, []byte("evt_11.1900000000."+string(body)), s)
		}
		for _, tc := range []struct {
			signature string
			kinds     []string
		}{
			{destination.SignatureEd25519, []string{"v1a", "v1a"}},
			{destination.SignatureBoth, []string{"v1", "v1a", "v1a"}},
			{destination.SignatureHMAC, []string{"v1"}},
		} {
			d := senderTestDest(srv.URL, 5*time.Second)
			d.Signature, d.Secret, d.SigningKey, d.PrevSigningKey, d.PrevSigningKeyUntil = tc.signature, secret, key, old, now.Add(time.Hour)
			res := s.Send(t.Context(), d, Delivery{ID: "evt_11", Body: body})
			require.NoError(t, res.Err)
			sigs := strings.Fields(senderTestReceive(t, got).Header.Get("Webhook-Signature"))
			var kinds []string
			for _, s := range sigs {
				kind, _, _ := strings.Cut(s, ",")
				kinds = append(kinds, kind)
			}
			require.Equal(t, tc.kinds, kinds, tc.signature)
			if tc.signature != destination.SignatureHMAC {
				n := len(sigs)
				require.True(t, verify(key, sigs[n-2]), "the current key signs first")
				require.True(t, verify(old, sigs[n-1]), "the previous key signs during the overlap")
				require.False(t, verify(old, sigs[n-2]))
			}
			if tc.signature != destination.SignatureEd25519 {
				require.NoError(t, webhook.Verify(secret, "evt_11", 1_900_000_000, body, sigs[0]))
			}
		}
		// The overlap over, the previous key signs no more.
		d := senderTestDest(srv.URL, 5*time.Second)
		d.Signature, d.SigningKey, d.PrevSigningKey, d.PrevSigningKeyUntil = destination.SignatureEd25519, key, old, now
		require.NoError(t, s.Send(t.Context(), d, Delivery{ID: "evt_11", Body: body}).Err)
		sigs := strings.Fields(senderTestReceive(t, got).Header.Get("Webhook-Signature"))
		require.Len(t, sigs, 1)
		require.True(t, verify(key, sigs[0]))
	})

	t.Run("a bad signing secret fails before sending", func(t *testing.T) {
		d := senderTestDest(srv.URL, 5*time.Second)
		d.Secret = "whsec_!!!"
		res := s.Send(t.Context(), d, Delivery{ID: "evt_10"})
		require.Error(t, res.Err)
		require.Equal(t, 0, res.Status)
		select {
		case r := <-got:
			t.Fatalf("a request was sent: %+v", r)
		default:
		}
	})
}

func TestDeliveryValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", publish.MaxIDLen)
	tests := []struct {
		name   string
		ev     Delivery
		header string // the header the error names; "" for a valid event
	}{
		{"plain", Delivery{ID: "evt_1", Headers: http.Header{"X-Good": {"fine", "also fine"}}}, ""},
		{"no headers", Delivery{ID: "evt_1"}, ""},
		{"tab in a value", Delivery{ID: "evt_1", Headers: http.Header{"X-Tab": {"a\tb"}}}, ""},
		{"non-ASCII value", Delivery{ID: "evt_1", Headers: http.Header{"X-Name": {"Zoë"}}}, ""},
		{"id of the maximum length", Delivery{ID: long}, ""},
		{"content type", Delivery{ID: "evt_1", Headers: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}}, ""},
		{"relay's own headers are not passed on, whatever their value", Delivery{ID: "evt_1", Headers: http.Header{
			"User-Agent": {"a\x01"}, "Webhook-Id": {"b\x7f"}, "Host": {"c\x00"}, "Relay-X": {"\x02"}, "Nats-Y": {"\x03"},
		}}, ""},
		{"content type with a control character", Delivery{ID: "evt_1", Headers: http.Header{"Content-Type": {"application/json\x01"}}}, "Content-Type"},
		{"lower-case content type with a control character", Delivery{ID: "evt_1", Headers: http.Header{"content-type": {"text/plain\x7f"}}}, "content-type"},
		{"control character in a header", Delivery{ID: "evt_1", Headers: http.Header{"X-Bad": {"a\x01b"}}}, "X-Bad"},
		{"DEL in a header", Delivery{ID: "evt_1", Headers: http.Header{"X-Del": {"a\x7fb"}}}, "X-Del"},
		{"NUL in the second value", Delivery{ID: "evt_1", Headers: http.Header{"X-Two": {"ok", "a\x00"}}}, "X-Two"},
		{"invalid header name", Delivery{ID: "evt_1", Headers: http.Header{"Bad Name": {"x"}}}, "Bad Name"},
		{"header name with a colon", Delivery{ID: "evt_1", Headers: http.Header{"X:Y": {"x"}}}, "X:Y"},
		{"id with a control character", Delivery{ID: "evt\x01"}, "webhook-id"},
		{"id with DEL", Delivery{ID: "evt\x7f"}, "webhook-id"},
		{"id too long", Delivery{ID: long + "a"}, "webhook-id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.ev.Validate()
			if tc.header == "" {
				require.NoError(t, err)
				return
			}
			var ie *InvalidEventError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.header, ie.Header)
			require.Contains(t, err.Error(), "invalid event: header ")
			require.Contains(t, err.Error(), tc.header)
			for _, vs := range tc.ev.Headers {
				for _, v := range vs {
					require.NotContains(t, err.Error(), v, "the error does not repeat the value")
				}
			}
		})
	}
}

func TestSenderDoesNotSendAnInvalidEvent(t *testing.T) {
	t.Parallel()
	// Go's client would refuse the request before connecting, and relay
	// took that for a network failure of the destination: retried, and
	// counted toward its circuit breaker.
	srv, got := senderTestCapturingServer(t)
	s := senderTestSender(t)
	for _, ev := range []Delivery{
		{ID: "evt_1", Body: []byte(`{}`), Headers: http.Header{"Content-Type": {"application/json\x01"}}},
		{ID: "evt_2", Body: []byte(`{}`), Headers: http.Header{"X-Good": {"fine"}, "X-Bad": {"a\x01b"}}},
		{ID: "evt\x01", Body: []byte(`{}`)},
	} {
		res := s.Send(t.Context(), senderTestDest(srv.URL, 5*time.Second), ev)
		var ie *InvalidEventError
		require.ErrorAs(t, res.Err, &ie)
		require.Zero(t, res.Status)
		require.False(t, res.Retryable())
		require.False(t, res.Attempted())
		d := classify(res, 1, destination.RetryPolicy{}.WithDefaults(), nil)
		require.Equal(t, ReasonInvalidEvent, d.Reason)
		require.Contains(t, d.Note, ie.Header)
	}
	select {
	case r := <-got:
		t.Fatalf("a request was sent: %+v", r)
	default:
	}
}

func TestSenderErrorsRedactTheURL(t *testing.T) {
	t.Parallel()
	// The error is logged and kept in the attempt history and the dead
	// letter: a credential in the URL's query must not be.
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	u := srv.URL + "/hook?token=q-secret-123"
	srv.Close() // connection refused from now on
	res := senderTestSender(t).Send(t.Context(), senderTestDest(u, 5*time.Second), Delivery{ID: "evt_1"})
	require.Error(t, res.Err)
	require.NotContains(t, res.Err.Error(), "q-secret-123")
	require.Contains(t, res.Err.Error(), "token=xxxxx")
	require.NotContains(t, attemptOf(1, time.Now(), res).Error, "q-secret-123")
}

// A failed DNS lookup is told as "DNS lookup failed" with the host and what
// failed, never with the resolver's address (attempt errors are shown to
// read keys); the relay's log keeps the lookup's own error.
func TestSenderDNSFailureHidesTheResolver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  *net.DNSError
		want string
	}{
		{"not found", &net.DNSError{Err: "no such host", Name: "hooks.example.test", Server: "10.43.0.10:53", IsNotFound: true}, "DNS lookup failed: host hooks.example.test not found"},
		{"timeout", &net.DNSError{Err: "i/o timeout", Name: "hooks.example.test", Server: "10.43.0.10:53", IsTimeout: true}, "DNS lookup failed: timeout looking up hooks.example.test"},
		{"other", &net.DNSError{Err: "server misbehaving", Name: "hooks.example.test", Server: "10.43.0.10:53", IsTemporary: true}, "DNS lookup failed for hooks.example.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := egress.NewClient(egress.Options{Guard: egress.Guard{Lookup: func(context.Context, string) ([]netip.Addr, error) { return nil, tc.err }}})
			s := &Sender{Client: c, Now: time.Now}
			res := s.Send(t.Context(), senderTestDest("https://hooks.example.test/h", 5*time.Second), Delivery{ID: "evt_1"})
			require.Error(t, res.Err)
			require.Contains(t, res.Err.Error(), tc.want)
			require.NotContains(t, res.Err.Error(), "10.43.0.10", "the resolver's address is not shown")
			require.NotContains(t, attemptOf(1, time.Now(), res).Error, "10.43.0.10", "nor kept in the history")
			if tc.err.IsTimeout {
				var ne net.Error
				require.True(t, errors.As(res.Err, &ne) && ne.Timeout(), "still a timeout to whoever asks")
			}

			var buf bytes.Buffer
			r := &Relay{log: slog.New(slog.NewTextHandler(&buf, nil)), cfg: Config{Now: time.Now}}
			r.logOutcome(Outcome{Dest: "d", EventID: "evt_1", Attempt: 1, Result: res, Decision: Decision{Action: Retry}})
			require.Contains(t, buf.String(), "lookup hooks.example.test on 10.43.0.10:53", "the relay's log has the detail")
		})
	}
}

// A proxy whose own name does not resolve fails as the proxy: the DNS
// error is the proxy's, not the destination's.
func TestSenderProxyFailureIsNotTheDestinations(t *testing.T) {
	t.Parallel()
	c := egress.NewClient(egress.Options{Guard: egress.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Proxy: &egress.Proxy{Addr: "proxy.invalid:3128"}})
	s := &Sender{Client: c, Now: time.Now}
	res := s.Send(t.Context(), senderTestDest("http://127.0.0.1:9/hook", 5*time.Second), Delivery{ID: "evt_1", Body: []byte(`{}`)})
	require.True(t, res.ProxyFailed, "%v", res.Err)
	require.False(t, res.Attempted(), "no request reached the destination")
	require.ErrorContains(t, res.Err, "egress proxy proxy.invalid:3128")
}
