package stream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// Every replica (and CLI run) loads the same seal from the relay_state
// bucket: what one seals, another opens. Without the bucket, LoadSeal says
// which bucket it could not open.
func TestLoadSealIsSharedThroughTheStateBucket(t *testing.T) {
	t.Parallel()
	js := startJS(t)
	ctx := context.Background()
	_, err := LoadSeal(ctx, js)
	require.ErrorContains(t, err, "open bucket "+StateBucket)

	require.NoError(t, Ensure(ctx, js, Config{}))
	a, err := LoadSeal(ctx, js)
	require.NoError(t, err)
	b, err := LoadSeal(ctx, js)
	require.NoError(t, err)
	h := Envelope{ID: "evt-1", Attempt: 3, Origin: 7}.Header(Promoted, a)
	require.True(t, b.Valid(h), "sealed by one, valid for the other")

	kv, err := js.KeyValue(ctx, StateBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, SealSecretKey)
	require.NoError(t, err)
	require.Len(t, e.Value(), 32)
	other, err := LoadSecret(ctx, js, "another-secret", "another secret")
	require.NoError(t, err)
	require.NotEqual(t, e.Value(), other, "each key its own secret")
}

// ProducerHeader: of relay's headers a producer sets the event id and the
// order key only, in any case.
func TestProducerHeader(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"X-Trace", "Content-Type", HdrMsgID, "Nats-Expected-Stream", HdrEventID, "relay-event-id", HdrKey, "RELAY-ORDER-KEY", "Relay", "Relay_Attempt"} {
		require.True(t, ProducerHeader(h), h)
	}
	for _, h := range []string{HdrAttempt, "relay-attempt", HdrOrigin, HdrPublished, HdrNotBefore, HdrType, HdrFanDests, HdrSeal, HdrReason, "Relay-Anything"} {
		require.False(t, ProducerHeader(h), h)
	}
}

// BenchmarkSealValid is the check of a retry's copy, made per delivery of
// each of relay's copies.
func BenchmarkSealValid(b *testing.B) {
	s, err := NewSeal(make([]byte, MinSealKey))
	require.NoError(b, err)
	h := Envelope{ID: "evt_06h2rcpt1p0j6zbfdgx7z5g334", Attempt: 3, Origin: 7, Published: time.Now(), Headers: nats.Header{"Content-Type": {"application/json"}}}.Header(Promoted, s)
	b.ReportAllocs()
	for b.Loop() {
		if !s.Valid(h) {
			b.Fatal("not valid")
		}
	}
}
