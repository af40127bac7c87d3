package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// The NATS permissions docs/security.md lists for a relay and for a producer using
// relay's Go package, exactly as written there.
var (
	// relayAPI is the narrower list of JetStream API subjects, for the
	// streams relay uses.
	relayAPI = func() []string {
		api := []string{"$JS.API.INFO", "$JS.API.STREAM.MSG.DELETE.RELAY_DLQ"} // dlq replay removes what it republished
		for _, s := range []string{"RELAY_EVENTS", "RELAY_DLQ", "KV_relay_destinations", "KV_relay_attempts", "KV_relay_replicas", "KV_relay_state", "KV_relay_ordered", "KV_relay_api_keys", "KV_relay_tenants", "KV_relay_event_types", "KV_relay_portal", "RELAY_LOG"} {
			api = append(api,
				"$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s,
				"$JS.API.STREAM.MSG.GET."+s, "$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>",
				"$JS.API.CONSUMER.*."+s, "$JS.API.CONSUMER.*."+s+".>",
				"$JS.API.CONSUMER.DURABLE.CREATE."+s+".>", "$JS.API.CONSUMER.MSG.NEXT."+s+".>")
		}
		return api
	}()
	relayPermissions = func(api ...string) *server.Permissions {
		return &server.Permissions{
			Publish: &server.SubjectPermission{Allow: append([]string{
				"relay.in.>", "relay.dlq.>", "relay.tdlq.>", "relay.lane.>", "relay.fan", "relay.log.>", "relay.tlog.>", "relay.logidx.>", "relay.type.relay.>",
				"$KV.relay_destinations.>", "$KV.relay_attempts.>", "$KV.relay_replicas.>", "$KV.relay_state.>", "$KV.relay_ordered.>",
				"$KV.relay_tenants.>", "$KV.relay_event_types.>", "$KV.relay_portal.>",
				"$JS.ACK.RELAY_EVENTS.>",
			}, api...)},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_RELAY.>"}},
		}
	}
	producerPermissions = &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			"relay.in.>",
			"$JS.API.STREAM.INFO.RELAY_EVENTS", "$JS.API.STREAM.INFO.KV_relay_destinations",
			"$JS.API.DIRECT.GET.KV_relay_destinations.>",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}, Deny: []string{"_INBOX_RELAY.>"}},
	}
)

// violations collects the permission errors the server reports to a client.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
}

func (v *violations) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

func connectAs(t *testing.T, url, user string, v *violations) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, user), nats.ErrorHandler(v.handler))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// A relay connected as a user with only the permissions docs/security.md lists
// sets up its streams, delivers, retries (the attempt history), pauses a
// destination that answers 410 (a write to the destinations bucket),
// dead-letters an event for an unknown destination (the check's lease and
// the dead-letter stream), and replays a dead letter; a producer with its
// listed permissions publishes through relay's Go package. The server
// reports no permission violation to either.
func TestRelayRunsWithTheDocumentedPermissions(t *testing.T) {
	t.Parallel()
	t.Run("all of the JetStream API", func(t *testing.T) {
		t.Parallel()
		runWithPermissions(t, relayPermissions("$JS.API.>"))
	})
	t.Run("the narrower list of API subjects", func(t *testing.T) {
		t.Parallel()
		runWithPermissions(t, relayPermissions(relayAPI...))
	})
}

func runWithPermissions(t *testing.T, perms *server.Permissions) {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "relay", Password: "relay", Permissions: perms},
			{Username: "producer", Password: "producer", Permissions: producerPermissions},
		},
	})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "NATS server up")
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	ctx := context.Background()
	var relayErrs, producerErrs, snoopErrs violations
	// relay connects as 'relay run' does (its own inbox prefix).
	rnc, err := stream.Connect(stream.ConnConfig{URL: s.ClientURL(), User: "relay", Password: "relay", Logf: func(format string, args ...any) {
		relayErrs.handler(nil, nil, fmt.Errorf(format, args...))
	}})
	require.NoError(t, err)
	t.Cleanup(rnc.Close)
	js, err := jetstream.New(rnc)
	require.NoError(t, err)

	// Another tenant's producer, with the same permissions, listens on
	// every inbox it may, and tries relay's.
	snc, err := nats.Connect(s.ClientURL(), nats.UserInfo("producer", "producer"), nats.ErrorHandler(snoopErrs.handler))
	require.NoError(t, err)
	t.Cleanup(snc.Close)
	snooped := make(chan *nats.Msg, 10000)
	_, err = snc.ChanSubscribe("_INBOX.>", snooped)
	require.NoError(t, err)
	_, err = snc.ChanSubscribe(stream.InboxPrefix+".>", snooped)
	require.NoError(t, err)
	require.NoError(t, snc.Flush())
	require.NoError(t, stream.Ensure(ctx, js, stream.Config{}))
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)

	ok := newSink(t, nil)
	flaky := newSink(t, func(h hit, w http.ResponseWriter) int {
		if h.N == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return http.StatusServiceUnavailable
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	gone := newSink(t, func(_ hit, w http.ResponseWriter) int {
		w.WriteHeader(http.StatusGone)
		return http.StatusGone
	})
	for _, d := range []destination.Destination{
		{Name: "ok", URL: ok.URL},
		{Name: "flaky", URL: flaky.URL, Retry: fast(3)},
		{Name: "gone", URL: gone.URL},
		{Name: "acme=ok", URL: ok.URL}, // a tenant's: its log records on relay.tlog
	} {
		_, err := st.Add(ctx, d)
		require.NoError(t, err)
	}

	rctx, cancel := context.WithCancel(ctx)
	r, err := relay.New(rctx, relay.Config{
		JS:         js,
		HTTPClient: egress.NewClient(egress.Options{Guard: egress.Guard{Allow: loopback}}),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	pjs := connectAs(t, s.ClientURL(), "producer", &producerErrs)
	prod, err := publish.NewProducer(ctx, pjs)
	require.NoError(t, err)
	ids := map[string]string{}
	for _, dest := range []string{"ok", "flaky", "gone"} {
		res, err := prod.Publish(ctx, publish.Event{Dest: dest, Data: []byte(`{"n":1}`)})
		require.NoError(t, err, "publish for %s", dest)
		ids[dest] = res.ID
	}
	_, err = js.Publish(ctx, "relay.in.ghost", []byte(`{}`))
	require.NoError(t, err)
	tenantAck, err := js.Publish(ctx, stream.InSubject("acme=ok", ""), []byte(`{}`))
	require.NoError(t, err)
	// A tenant's unknown destination: its dead letter on relay.tdlq.
	_, err = js.Publish(ctx, stream.InSubject("acme=ghost", ""), []byte(`{}`))
	require.NoError(t, err)

	eventually(t, 30*time.Second, func() bool {
		g, err := st.Get(ctx, "gone")
		return ok.delivered()[ids["ok"]] == 1 && flaky.delivered()[ids["flaky"]] == 1 &&
			err == nil && g.PauseReason == destination.PauseGone
	}, "delivered to ok, to flaky on its second attempt, and gone paused")

	letters, err := dlq.Open(ctx, js)
	require.NoError(t, err)
	var ghost []dlq.Letter
	eventually(t, 30*time.Second, func() bool {
		ghost, err = letters.List(ctx, dlq.Filter{Dest: "ghost"}, 0)
		return err == nil && len(ghost) == 1
	}, "the ghost event dead-lettered")
	require.Equal(t, relay.ReasonUnknownDestination, ghost[0].Reason)
	eventually(t, 30*time.Second, func() bool {
		l, err := letters.List(ctx, dlq.Filter{Dest: "acme=ghost"}, 0)
		return err == nil && len(l) == 1
	}, "the tenant's ghost event dead-lettered")
	eventually(t, 30*time.Second, func() bool {
		page, err := deliverylog.ReadAttempts(ctx, js, deliverylog.AttemptQuery{Dest: "acme=ok"})
		return err == nil && len(page.Attempts) == 1 && page.Attempts[0].Seq > 0 && tenantAck.Sequence > 0
	}, "the tenant's delivery logged")

	// Replay it once "ghost" exists.
	_, err = st.Add(ctx, destination.Destination{Name: "ghost", URL: ok.URL})
	require.NoError(t, err)
	_, err = letters.Replay(ctx, ghost[0], "")
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool { return ok.delivered()[ghost[0].EventID] == 1 }, "the replayed event delivered")

	require.Empty(t, relayErrs.list(), "permission errors reported to relay")
	require.Empty(t, producerErrs.list(), "permission errors reported to the producer")

	// The snooper saw none of relay's traffic: no pulled event (its ack
	// subject), no event body; its subscription to relay's inboxes was
	// refused.
	eventually(t, 10*time.Second, func() bool { return len(snoopErrs.list()) > 0 }, "the subscription to relay's inboxes refused")
	require.Contains(t, strings.Join(snoopErrs.list(), "\n"), stream.InboxPrefix+".>")
	require.NoError(t, snc.Flush())
	for len(snooped) > 0 {
		m := <-snooped
		require.False(t, strings.HasPrefix(m.Reply, "$JS.ACK."), "a producer received an event relay pulled (%s, ack %s)", m.Subject, m.Reply)
		require.NotContains(t, string(m.Data), `"n":1`, "a producer received an event body on %s", m.Subject)
		require.False(t, strings.HasPrefix(m.Subject, stream.InboxPrefix+"."), "a producer received relay's reply on %s", m.Subject)
	}
}
