package streamtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// PullRequest is a JetStream pull request as the server receives it.
type PullRequest struct {
	Batch     int           `json:"batch"`
	MaxBytes  int64         `json:"max_bytes"`
	Heartbeat time.Duration `json:"idle_heartbeat"`
	Expires   time.Duration `json:"expires"`
}

// WatchPullRequests returns the pull requests sent on subject (wildcards
// allowed) from now until the test ends, as nc receives them.
func WatchPullRequests(t testing.TB, nc *nats.Conn, subject string) <-chan PullRequest {
	t.Helper()
	reqs := make(chan PullRequest, 100)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var r PullRequest
		if json.Unmarshal(m.Data, &r) != nil {
			return
		}
		select {
		case reqs <- r:
		default:
		}
	})
	if err != nil {
		t.Fatalf("subscribe to %s: %v", subject, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatalf("subscribe to %s: %v", subject, err)
	}
	return reqs
}

// RequireShortHeartbeats waits up to 20s for the first of reqs, from the
// consumer what names, and fails t unless it asks for idle heartbeats at
// most every 2s, two of which fit in the request's life: a pull the server
// never got is then noticed within 4s.
func RequireShortHeartbeats(t testing.TB, reqs <-chan PullRequest, what string) {
	t.Helper()
	select {
	case r := <-reqs:
		if r.Heartbeat <= 0 || r.Heartbeat > 2*time.Second || 2*r.Heartbeat > r.Expires {
			t.Fatalf("%s: pull request with heartbeat %v and expiry %v; want a heartbeat of at most 2s, at most half the expiry", what, r.Heartbeat, r.Expires)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no pull request sent", what)
	}
}
