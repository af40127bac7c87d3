package relay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/stretchr/testify/require"
)

func TestDecideTable(t *testing.T) {
	t.Parallel()
	// 2s base, 1h cap, no jitter, 5 attempts.
	p := destination.RetryPolicy{NoJitter: true, MaxAttempts: 5}.WithDefaults()
	require.Equal(t, destination.Duration(2*time.Second), p.Base)
	require.Equal(t, destination.Duration(time.Hour), p.Max)

	connRefused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	ack := Decision{Action: Ack}
	redirect := Decision{Action: DeadLetter, Reason: ReasonRedirect}
	permanent := Decision{Action: DeadLetter, Reason: ReasonPermanentStatus}
	exhausted := Decision{Action: DeadLetter, Reason: ReasonMaxAttempts}
	retry := func(d time.Duration) Decision { return Decision{Action: Retry, Delay: d} }

	type tcase struct {
		name    string
		res     Result
		attempt int
		want    Decision
	}
	tests := []tcase{
		{"200 ack", Result{Status: 200}, 1, ack},
		{"204 ack", Result{Status: 204}, 1, ack},
		{"200 ack at the last attempt", Result{Status: 200}, 5, ack},
		{"204 ack beyond the last attempt", Result{Status: 204}, 9, ack},
		{"301 redirect", Result{Status: 301}, 1, redirect},
		{"302 redirect", Result{Status: 302}, 1, redirect},
		{"307 redirect", Result{Status: 307}, 2, redirect},
		{"302 redirect at the last attempt", Result{Status: 302}, 5, redirect},
		{"400 permanent", Result{Status: 400}, 1, permanent},
		{"401 permanent", Result{Status: 401}, 1, permanent},
		{"403 permanent", Result{Status: 403}, 1, permanent},
		{"404 permanent", Result{Status: 404}, 1, permanent},
		{"410 permanent", Result{Status: 410}, 1, permanent},
		{"422 permanent", Result{Status: 422}, 3, permanent},
		{"404 permanent at the last attempt", Result{Status: 404}, 5, permanent},
		{"404 with Retry-After still permanent", Result{Status: 404, RetryAfter: time.Second, HasRetryAfter: true}, 1, permanent},
		{"429 with Retry-After 30s", Result{Status: 429, RetryAfter: 30 * time.Second, HasRetryAfter: true}, 1, retry(30 * time.Second)},
		{"503 with Retry-After 30s", Result{Status: 503, RetryAfter: 30 * time.Second, HasRetryAfter: true}, 4, retry(30 * time.Second)},
		{"429 with Retry-After 0", Result{Status: 429, RetryAfter: 0, HasRetryAfter: true}, 2, retry(0)},
		{"429 with Retry-After capped at Max", Result{Status: 429, RetryAfter: 5 * time.Hour, HasRetryAfter: true}, 1, retry(time.Hour)},
		{"503 with Retry-After capped at Max", Result{Status: 503, RetryAfter: 30 * 24 * time.Hour, HasRetryAfter: true}, 1, retry(time.Hour)},
		{"429 without a valid Retry-After backs off", Result{Status: 429, RetryAfter: 30 * time.Second}, 3, retry(8 * time.Second)},
		{"500 ignores Retry-After", Result{Status: 500, RetryAfter: 30 * time.Second, HasRetryAfter: true}, 3, retry(8 * time.Second)},
		{"502 ignores Retry-After", Result{Status: 502, RetryAfter: 30 * time.Second, HasRetryAfter: true}, 1, retry(2 * time.Second)},
		{"429 with Retry-After at the last attempt", Result{Status: 429, RetryAfter: time.Second, HasRetryAfter: true}, 5, exhausted},
		{"503 with Retry-After beyond the last attempt", Result{Status: 503, RetryAfter: time.Second, HasRetryAfter: true}, 6, exhausted},
	}
	for _, status := range []int{408, 425, 429, 500, 502, 503, 504} {
		for attempt := 1; attempt < p.MaxAttempts; attempt++ {
			tests = append(tests, tcase{
				name:    fmt.Sprintf("%d retry attempt %d", status, attempt),
				res:     Result{Status: status, Snippet: "busy"},
				attempt: attempt,
				want:    retry(p.Backoff(attempt)),
			})
		}
		tests = append(tests,
			tcase{fmt.Sprintf("%d at the last attempt", status), Result{Status: status}, p.MaxAttempts, exhausted},
			tcase{fmt.Sprintf("%d beyond the last attempt", status), Result{Status: status}, p.MaxAttempts + 1, exhausted},
		)
	}
	for attempt := 1; attempt < p.MaxAttempts; attempt++ {
		tests = append(tests, tcase{fmt.Sprintf("transport error retry attempt %d", attempt), Result{Err: connRefused}, attempt, retry(p.Backoff(attempt))})
	}
	tests = append(tests,
		tcase{"transport error first attempt", Result{Err: connRefused}, 1, retry(2 * time.Second)},
		tcase{"transport error fourth attempt", Result{Err: connRefused}, 4, retry(16 * time.Second)},
		tcase{"transport error at the last attempt", Result{Err: connRefused}, 5, exhausted},
	)
	// An event that cannot become a request is dead-lettered at once, at
	// any attempt, whatever the policy allows.
	invalid := &InvalidEventError{Header: "Content-Type", Err: errors.New(`header "Content-Type": value contains control characters (CR, LF, ...)`)}
	for _, attempt := range []int{1, 3, 5, 9} {
		tests = append(tests, tcase{fmt.Sprintf("invalid event attempt %d", attempt), Result{Err: invalid}, attempt,
			Decision{Action: DeadLetter, Reason: ReasonInvalidEvent, Note: invalid.Error()}})
	}
	tests = append(tests, tcase{"invalid event, wrapped", Result{Err: fmt.Errorf("build: %w", invalid)}, 2,
		Decision{Action: DeadLetter, Reason: ReasonInvalidEvent, Note: invalid.Error()}})

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rnd := rand.New(rand.NewPCG(1, 2))
			got := classify(tc.res, tc.attempt, p, rnd)
			require.Equal(t, tc.want, got, "status %d attempt %d", tc.res.Status, tc.attempt)
		})
	}
}

func TestDecideJitteredRetryStaysInWindow(t *testing.T) {
	t.Parallel()
	p := destination.RetryPolicy{}.WithDefaults()
	rnd := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for range 500 {
		for attempt := 1; attempt < p.MaxAttempts; attempt++ {
			d := classify(Result{Status: 503}, attempt, p, rnd)
			require.Equal(t, Retry, d.Action)
			b := float64(p.Backoff(attempt))
			require.GreaterOrEqual(t, d.Delay, time.Duration(b*(1-p.Jitter)))
			require.LessOrEqual(t, d.Delay, time.Duration(b*(1+p.Jitter)))
			if attempt == 1 {
				seen[d.Delay] = true
			}
		}
	}
	require.Greater(t, len(seen), 100, "the default policy must jitter retries")
}

func TestResultRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		res  Result
		want bool
	}{
		{Result{Err: errors.New("timeout")}, true},
		{Result{}, true},
		{Result{Status: 200}, false},
		{Result{Status: 302}, false},
		{Result{Status: 400}, false},
		{Result{Status: 404}, false},
		{Result{Status: 407}, false},
		{Result{Status: 408}, true},
		{Result{Status: 409}, false},
		{Result{Status: 425}, true},
		{Result{Status: 429}, true},
		{Result{Status: 499}, false},
		{Result{Status: 500}, true},
		{Result{Status: 501}, true},
		{Result{Status: 599}, true},
		{Result{Status: 600}, false},
		{Result{Err: &InvalidEventError{Header: "X", Err: errors.New("bad")}}, false},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.res.Retryable(), "status %d err %v", tc.res.Status, tc.res.Err)
	}
}

func TestResultAttempted(t *testing.T) {
	t.Parallel()
	require.False(t, Result{}.Attempted())
	require.False(t, Result{Err: &InvalidEventError{Header: "X", Err: errors.New("bad")}}.Attempted(), "no request was made")
	require.True(t, Result{Err: errors.New("connection refused")}.Attempted())
	require.True(t, Result{Status: 500}.Attempted())
}

func TestActionString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "delivered", Ack.String())
	require.Equal(t, "retry", Retry.String())
	require.Equal(t, "dead_letter", DeadLetter.String())
	require.Equal(t, "unknown", Action(42).String())
}

func TestParseRetryAfterTable(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	const month = 30 * 24 * time.Hour
	tests := []struct {
		name   string
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"zero", "0", 0, true},
		{"five", "5", 5 * time.Second, true},
		{"spaces trimmed", " 7 ", 7 * time.Second, true},
		{"tab and newline trimmed", "\t12\n", 12 * time.Second, true},
		{"leading zeros", "007", 7 * time.Second, true},
		{"30 days exactly", "2592000", month, true},
		{"just over 30 days clamped", "2592001", month, true},
		{"max uint64 clamped", "18446744073709551615", month, true},
		{"huge out of range clamped", "99999999999999999999", month, true},
		{"negative", "-1", 0, false},
		{"plus sign", "+5", 0, false},
		{"fraction", "1.5", 0, false},
		{"unit suffix", "5s", 0, false},
		{"hex", "0x10", 0, false},
		{"letters", "abc", 0, false},
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"http date 10s ahead", now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{"http date 10s ahead with spaces", "  " + now.Add(10*time.Second).Format(http.TimeFormat) + " ", 10 * time.Second, true},
		{"rfc850 date 10s ahead", "Friday, 01-Mar-24 12:00:10 GMT", 10 * time.Second, true},
		{"asctime date 10s ahead", "Fri Mar  1 12:00:10 2024", 10 * time.Second, true},
		{"http date now", now.Format(http.TimeFormat), 0, true},
		{"http date in the past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"http date a year ahead clamped", now.AddDate(1, 0, 0).Format(http.TimeFormat), month, true},
		{"garbage date", "Fri, 99 Foo 2024 99:99:99 GMT", 0, false},
		{"garbage words", "tomorrow", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRetryAfter(tc.in, now)
			require.Equal(t, tc.wantOK, ok, "ok for %q", tc.in)
			require.Equal(t, tc.want, got, "duration for %q", tc.in)
		})
	}
}
