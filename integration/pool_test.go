package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/history"
	"github.com/relaydev/relay/webhook"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/relay"
)

// closedURL is a URL on a loopback port nothing listens on, and its
// address, to listen on later.
func closedURL(t *testing.T) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr + "/hook", addr
}

// requireSigned fails t unless every hit carries a valid signature of
// secret and the destination's header.
func requireSigned(t *testing.T, hits []hit, secret string) {
	t.Helper()
	for _, h := range hits {
		ts, err := strconv.ParseInt(h.Header.Get("Webhook-Timestamp"), 10, 64)
		require.NoError(t, err)
		require.NoError(t, webhook.Verify(secret, h.ID, ts, []byte(h.Body), h.Header.Get("Webhook-Signature")), "event %s", h.ID)
		require.Equal(t, "t1", h.Header.Get("X-Tenant"))
	}
}

// ackedAt is the pool index of the URL that delivered event id, or -1.
func ackedAt(rec *outcomes, id string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, o := range rec.all {
		if o.EventID == id && o.Decision.Action == relay.Ack {
			return o.Result.URL
		}
	}
	return -1
}

// A failover pool whose first URL is down delivers every event to the
// second, signed and with the destination's headers as the first would
// have had them; once the first URL is up again and its cool-down is over,
// the attempts go back to it.
func TestURLPoolFailsOverAndComesBack(t *testing.T) {
	t.Parallel()
	down, addr := closedURL(t)
	second := newSink(t, nil)
	e := setup(t)
	secret := webhook.GenerateSecret()
	e.addDest(destination.Destination{Name: "pool", URL: down, URLs: []string{down, second.URL + "/hook"},
		Secret: secret, Headers: map[string]string{"X-Tenant": "t1"}, Retry: fast(20)})
	rec, _ := e.startRelay(func(c *relay.Config) { c.URLCooldown = 500 * time.Millisecond })

	const n = 40
	var ids []string
	for i := range n {
		ids = append(ids, e.publish("pool", "", fmt.Sprintf(`{"i":%d}`, i)).ID)
	}
	eventually(t, time.Minute, func() bool { return len(second.delivered()) == n && e.settled("pool") }, "every event delivered to the second URL")
	// The outcome is reported after the ack: wait for the last of them.
	eventually(t, time.Minute, func() bool {
		for _, id := range ids {
			if ackedAt(rec, id) < 0 {
				return false
			}
		}
		return true
	}, "every delivery's outcome reported")
	for _, id := range ids {
		require.Equal(t, 1, ackedAt(rec, id), "event %s delivered by the second URL", id)
	}
	require.Empty(t, e.deadLetters("pool"))
	failed := rec.count(func(o relay.Outcome) bool { return o.Result.URL == 0 && o.Result.Err != nil })
	require.Positive(t, failed, "attempts tried the first URL")
	require.Less(t, failed, n, "the first URL cooled down: not every event tried it first")
	requireSigned(t, second.all(), secret)

	// The first URL comes up again.
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	first := newSinkOn(t, ln)
	var back string
	eventually(t, time.Minute, func() bool {
		id := e.publish("pool", "", `{"again":1}`).ID
		eventually(t, time.Minute, func() bool { return ackedAt(rec, id) >= 0 }, "event %s delivered", id)
		if ackedAt(rec, id) == 0 {
			back = id
			return true
		}
		return false
	}, "an event delivered by the first URL once it is up")
	require.Equal(t, 1, first.delivered()[back])
	// A success made it healthy: the next events go to it.
	for range 10 {
		id := e.publish("pool", "", `{"after":1}`).ID
		eventually(t, time.Minute, func() bool { return ackedAt(rec, id) >= 0 }, "event %s delivered", id)
		require.Equal(t, 0, ackedAt(rec, id), "event %s", id)
	}
	requireSigned(t, first.all(), secret)
}

// newSinkOn is newSink listening on ln.
func newSinkOn(t *testing.T, ln net.Listener) *sink {
	t.Helper()
	s := newSink(t, nil)
	s.Close()
	srv := httptest.NewUnstartedServer(s.Config.Handler)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	s.Server = srv
	return s
}

// Round-robin spreads the events over two healthy URLs.
func TestURLPoolRoundRobinSpreadsAttempts(t *testing.T) {
	t.Parallel()
	a, b := newSink(t, nil), newSink(t, nil)
	e := setup(t)
	e.addDest(destination.Destination{Name: "rr", URL: a.URL, URLs: []string{a.URL, b.URL}, URLStrategy: destination.URLRoundRobin, Retry: fast(5)})
	rec, _ := e.startRelay()
	const n = 60
	for i := range n {
		e.publish("rr", "", fmt.Sprintf(`{"i":%d}`, i))
	}
	eventually(t, time.Minute, func() bool { return len(a.delivered())+len(b.delivered()) == n && e.settled("rr") }, "every event delivered")
	require.GreaterOrEqual(t, len(a.delivered()), n/3, "the first URL's share")
	require.GreaterOrEqual(t, len(b.delivered()), n/3, "the second URL's share")
	for i := range 2 {
		acked := rec.count(func(o relay.Outcome) bool { return o.Decision.Action == relay.Ack && o.Result.URL == i })
		require.GreaterOrEqual(t, acked, n/3, "deliveries recorded with URL index %d", i)
	}
}

// Each attempt records the index of the URL it went to: in the history of
// an event in retry ('relay dest retrying') and in its dead letter ('relay
// dlq show'); a destination with one URL records none.
func TestURLPoolIndexIsInTheHistoryAndTheDeadLetter(t *testing.T) {
	t.Parallel()
	fail := func(h hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	a, b := newSink(t, fail), newSink(t, fail)
	e := setup(t)
	retry := destination.RetryPolicy{Base: destination.Duration(2 * time.Second), Max: destination.Duration(4 * time.Second), NoJitter: true, MaxAttempts: 3}
	e.addDest(destination.Destination{Name: "rr", URL: a.URL, URLs: []string{a.URL, b.URL}, URLStrategy: destination.URLRoundRobin, Retry: retry})
	e.addDest(destination.Destination{Name: "single", URL: a.URL, Retry: fast(2)})
	e.startRelay()
	res := e.publish("rr", "", `{}`)
	e.publish("single", "", `{}`)

	ctx := context.Background()
	var inRetry history.Retrying
	eventually(t, time.Minute, func() bool {
		rs, err := history.ListRetrying(ctx, e.store, "rr", 0)
		require.NoError(t, err)
		if len(rs) == 1 && rs[0].LastURL != nil {
			inRetry = rs[0]
			return true
		}
		return false
	}, "the event in retry, with the URL of its last attempt")
	require.Equal(t, res.ID, inRetry.EventID)
	require.Equal(t, (inRetry.Attempts-1)%2, *inRetry.LastURL, "round-robin: attempt %d", inRetry.Attempts)

	eventually(t, time.Minute, func() bool { return len(e.deadLetters("rr")) == 1 && len(e.deadLetters("single")) == 1 }, "both dead-lettered")
	l := e.deadLetters("rr")[0]
	require.Len(t, l.History, 3)
	for i, at := range l.History {
		require.NotNil(t, at.URL, "attempt %d", i+1)
		require.Equal(t, i%2, *at.URL, "attempt %d", i+1)
	}
	single := e.deadLetters("single")[0]
	require.Len(t, single.History, 2)
	for _, at := range single.History {
		require.Nil(t, at.URL, "no pool, no index")
	}

	code, out := e.relayCLI("dlq", "show", strconv.FormatUint(l.Seq, 10))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "url 0  500")
	require.Contains(t, out, "url 1  500")
	code, out = e.relayCLI("dlq", "show", strconv.FormatUint(single.Seq, 10))
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "url ")
}

// 'dest add' and 'dest update' take a pool (--url repeated) and its
// strategy, refuse a pool with one URL the relays' address policy blocks
// (naming it), and 'dest list' shows the pool.
func TestDestURLPoolOnTheCommandLine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, out := e.relayCLI("dest", "add", "p", "--no-secret", "--url", "https://a.test/hook?x=1,2", "--url", "https://b.test/hook", "--url-strategy", "round-robin")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "round-robin: [0] https://a.test/hook?x=xxxxx [1] https://b.test/hook")
	code, out = e.relayCLI("dest", "list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "round-robin: [0] https://a.test/hook?x=xxxxx [1] https://b.test/hook")
	code, out = e.relayCLI("dest", "list", "--json")
	require.Equal(t, 0, code, out)
	var d destination.Destination
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &d))
	require.Equal(t, []string{"https://a.test/hook?x=xxxxx", "https://b.test/hook"}, d.URLs)
	require.Equal(t, destination.URLRoundRobin, d.URLStrategy)

	got, err := e.store.Get(context.Background(), "p")
	require.NoError(t, err)
	require.Equal(t, []string{"https://a.test/hook?x=1,2", "https://b.test/hook"}, got.Pool(), "a comma does not split a URL")

	code, out = e.relayCLI("dest", "add", "q", "--no-secret", "--url", "https://a.test/", "--url", "ftp://b.test/")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `URL 2 of the pool: URL "ftp://b.test/": scheme must be http or https`)
	code, out = e.relayCLI("dest", "add", "q", "--no-secret", "--url", "https://a.test/", "--url-strategy", "random")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `url-strategy "random"`)

	// The relays reach public addresses only.
	require.NoError(t, egress.AgreePolicy(context.Background(), e.js, egress.Policy{}))
	code, out = e.relayCLI("dest", "add", "q", "--no-secret", "--url", "http://93.184.216.34/hook", "--url", "http://10.1.2.3/hook")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "--url http://10.1.2.3/hook: 10.1.2.3 is 10.1.2.3, a non-public address")
	_, err = e.store.Get(context.Background(), "q")
	require.ErrorIs(t, err, destination.ErrNotFound, "not added")
	code, out = e.relayCLI("dest", "update", "p", "--url", "http://93.184.216.34/hook", "--url", "http://127.0.0.1:9/hook")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "--url http://127.0.0.1:9/hook: 127.0.0.1 is 127.0.0.1, a non-public address")

	// --url on update replaces the whole pool; one URL is no pool.
	code, out = e.relayCLI("dest", "update", "p", "--url", "http://93.184.216.34/hook")
	require.Equal(t, 0, code, out)
	got, err = e.store.Get(context.Background(), "p")
	require.NoError(t, err)
	require.Equal(t, "http://93.184.216.34/hook", got.URL)
	require.Nil(t, got.URLs)
	require.Equal(t, destination.URLRoundRobin, got.URLStrategy, "the strategy is kept")
}
