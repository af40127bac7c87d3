package stream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/stream/embedded"
	"github.com/stretchr/testify/require"
)

func startJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	s, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1, Mappings: Mappings()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

func TestEnsureIsIdempotentAndUpdatesInPlace(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	require.NoError(t, Ensure(ctx, js, Config{}), "a second run changes nothing and succeeds")

	ack, err := js.Publish(ctx, InSubject("orders", "k"), []byte("kept"))
	require.NoError(t, err)

	// New settings are applied to the existing stream; its events survive.
	require.NoError(t, Ensure(ctx, js, Config{EventRetention: 48 * time.Hour, DuplicateWindow: time.Minute}))
	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 48*time.Hour, info.Config.MaxAge)
	require.Equal(t, time.Minute, info.Config.Duplicates)
	require.Equal(t, uint64(1), info.State.Msgs)
	m, err := s.GetMsg(ctx, ack.Sequence)
	require.NoError(t, err)
	require.Equal(t, "kept", string(m.Data))
	require.Equal(t, KeyedSubject("orders", "k"), m.Subject)
	p, err := ParseSubject(m.Subject)
	require.NoError(t, err)
	require.Equal(t, "orders", p.Dest)
	require.Equal(t, Bucket("k"), p.Bucket)
}

// Relay computes the bucket the server's subject transform stores a keyed
// event under (replay --key reads that one bucket): the two must agree.
func TestBucketAgreesWithTheServer(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	keys := []string{"k", "customer-42", "tenant.7 user", "ключ", "A=b:c_d-e", strings.Repeat("x", 64), strings.Repeat("y", 65)}
	for i := range 2000 {
		keys = append(keys, fmt.Sprintf("customer-%d", i*7919))
	}
	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, key := range keys {
		ack, err := js.Publish(ctx, InSubject("orders", key), nil)
		require.NoError(t, err)
		msg, err := s.GetMsg(ctx, ack.Sequence)
		require.NoError(t, err)
		require.Equal(t, KeyedSubject("orders", key), msg.Subject, "key %q (token %q)", key, KeyToken(key))
		seen[Bucket(KeyToken(key))] = true
	}
	require.Len(t, seen, Buckets, "the keys cover every bucket")
}

// The earlier layout kept the key token in the stored subject
// (relay.ev.<dest>.<bucket>.<key>).
func oldLayout(t *testing.T, js jetstream.JetStream) jetstream.StreamConfig {
	t.Helper()
	old := Config{}.WithDefaults().EventsConfig()
	old.SubjectTransform = &jetstream.SubjectTransformConfig{
		Source:      InPrefix + ".*.*",
		Destination: KeyedPrefix + ".{{wildcard(1)}}.{{partition(64,2)}}.{{wildcard(2)}}",
	}
	_, err := js.CreateStream(context.Background(), old)
	require.NoError(t, err)
	return old
}

func TestEnsureUpdatesAnEarlierLayoutWithoutKeyedEvents(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	oldLayout(t, js)
	_, err := js.Publish(ctx, InSubject("orders", ""), []byte("unkeyed"))
	require.NoError(t, err)

	require.NoError(t, Ensure(ctx, js, Config{}))
	ack, err := js.Publish(ctx, InSubject("orders", "k"), nil)
	require.NoError(t, err)
	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	m, err := s.GetMsg(ctx, ack.Sequence)
	require.NoError(t, err)
	require.Equal(t, KeyedSubject("orders", "k"), m.Subject, "the transform was updated in place")
	require.Equal(t, uint64(2), s.CachedInfo().State.Msgs, "the unkeyed event is kept")
}

func TestEnsureRefusesAnEarlierLayoutWithKeyedEvents(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	old := oldLayout(t, js)
	_, err := js.Publish(ctx, InSubject("orders", ""), []byte("unkeyed"))
	require.NoError(t, err)
	ack, err := js.Publish(ctx, InSubject("orders", "k"), []byte("keyed"))
	require.NoError(t, err)

	err = Ensure(ctx, js, Config{})
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, fmt.Sprintf("holds keyed events stored under the earlier layout relay.ev.<dest>.<bucket>.<key> (the first at sequence %d, relay.ev.orders.%d.k)", ack.Sequence, Bucket("k")))
	require.ErrorContains(t, err, `nats stream purge RELAY_EVENTS --subject "relay.ev.*.*.*"`)

	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, old.SubjectTransform, info.Config.SubjectTransform, "the stream was not changed")
	require.Equal(t, uint64(2), info.State.Msgs)

	// Once they are gone, the layout is updated.
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSubject("relay.ev.*.*.*")))
	require.NoError(t, Ensure(ctx, js, Config{}))
}

func TestEnsureReportsAStreamItCannotChange(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: EventsStream, Subjects: []string{"relay.in.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "relay.in.x", []byte("precious"))
	require.NoError(t, err)

	err = Ensure(ctx, js, Config{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "uses Memory storage, relay needs File")
	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	require.Equal(t, uint64(1), s.CachedInfo().State.Msgs, "the stream was not recreated")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.WithDefaults().Validate())
	for _, c := range []Config{
		{Replicas: 7},
		{EventRetention: time.Second},
		{DLQRetention: time.Second},
		{DuplicateWindow: time.Millisecond},
		{EventRetention: time.Hour, DuplicateWindow: 2 * time.Hour},
	} {
		require.Error(t, c.WithDefaults().Validate(), "%+v", c)
	}
}

// The events stream sets its consumer limit: the server's default of 1,000
// per stream no longer applies, a new limit reaches an existing stream, and
// the server enforces it.
func TestEnsureSetsTheEventsStreamsConsumerLimit(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, js, Config{}))
	s, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	require.Equal(t, DefaultMaxConsumers, s.CachedInfo().Config.MaxConsumers)

	require.NoError(t, Ensure(ctx, js, Config{MaxConsumers: ReservedConsumers + 3}))
	s, err = js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	require.Equal(t, ReservedConsumers+3, s.CachedInfo().Config.MaxConsumers, "a new limit is applied in place")
	for i := range ReservedConsumers + 3 {
		_, err := js.CreateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{Durable: fmt.Sprintf("c%d", i), FilterSubject: InSubject(fmt.Sprintf("d%d", i), "")})
		require.NoError(t, err)
	}
	_, err = js.CreateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{Durable: "one-too-many", FilterSubject: InSubject("x", "")})
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, jetstream.JSErrCodeMaximumConsumersLimit, apiErr.ErrorCode)
}

func TestConfigValidateMaxConsumers(t *testing.T) {
	t.Parallel()
	err := Config{MaxConsumers: ReservedConsumers}.WithDefaults().Validate()
	require.ErrorContains(t, err, "max consumers 16 must be between 17")
	require.NoError(t, Config{MaxConsumers: ReservedConsumers + 1}.WithDefaults().Validate())
}

// On a server whose storage is smaller than the delivery log's default,
// the log is made smaller (a quarter of what the server takes) rather than
// refusing to start; a size given that does not fit is refused, saying so.
func TestEnsureFitsTheDeliveryLogToTheServersStorage(t *testing.T) {
	s, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1, MaxStore: 64 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()

	err = Ensure(ctx, js, Config{LogMaxBytes: 1 << 30})
	require.ErrorContains(t, err, "--attempt-max-bytes")
	require.NoError(t, Ensure(ctx, js, Config{}))
	ls, err := js.Stream(ctx, LogStream)
	require.NoError(t, err)
	got := ls.CachedInfo().Config.MaxBytes
	require.Less(t, got, int64(64<<20), "within the server's storage")
	require.GreaterOrEqual(t, got, int64(minLogMaxBytes))
	require.NoError(t, Ensure(ctx, js, Config{}), "again: the same")
}
