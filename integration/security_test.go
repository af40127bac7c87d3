package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/webhook"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

func TestSignaturesVerifyWithTheReferenceLibraryAcrossARotation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	oldSecret, newSecret := webhook.GenerateSecret(), webhook.GenerateSecret()
	type check struct{ old, new bool }
	checks := make(chan check, 10)
	oldWH, err := standardwebhooks.NewWebhook(oldSecret)
	require.NoError(t, err)
	newWH, err := standardwebhooks.NewWebhook(newSecret)
	require.NoError(t, err)
	s := newSink(t, func(h hit, w http.ResponseWriter) int {
		checks <- check{old: oldWH.Verify([]byte(h.Body), h.Header) == nil, new: newWH.Verify([]byte(h.Body), h.Header) == nil}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	e.addDest(destination.Destination{Name: "sig", URL: s.URL, Secret: oldSecret})
	e.startRelay()
	next := func() check {
		select {
		case c := <-checks:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
			return check{}
		}
	}

	e.publish("sig", "", `{"before":"rotation"}`)
	require.Equal(t, check{old: true, new: false}, next())

	// Rotate with an overlap: both secrets sign.
	_, err = e.store.Update(context.Background(), "sig", func(d *destination.Destination) error {
		d.PrevSecret, d.PrevSecretUntil, d.Secret = d.Secret, time.Now().Add(time.Hour), newSecret
		return nil
	})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool {
		e.publish("sig", "", `{"during":"overlap"}`)
		c := next()
		return c.new
	}, "the running relay picks up the rotation")
	e.publish("sig", "", `{"during":"overlap"}`)
	require.Equal(t, check{old: true, new: true}, next(), "during the overlap both secrets verify")

	// After the overlap only the new secret signs.
	_, err = e.store.Update(context.Background(), "sig", func(d *destination.Destination) error {
		d.PrevSecretUntil = time.Now().Add(-time.Second)
		return nil
	})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool {
		e.publish("sig", "", `{"after":"overlap"}`)
		c := next()
		return !c.old
	}, "the old secret stops signing")
	e.publish("sig", "", `{"after":"overlap"}`)
	require.Equal(t, check{old: false, new: true}, next())
}

func TestSecretsAreEncryptedAtRest(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := []byte("0123456789abcdef0123456789abcdef")
	sealed, err := destination.NewStore(context.Background(), e.js, destination.WithSecretKey(key))
	require.NoError(t, err)
	secret := webhook.GenerateSecret()
	s := newSink(t, nil)
	// Header values are sealed too: any of them may be a credential.
	_, err = sealed.Add(context.Background(), destination.Destination{Name: "enc", URL: s.URL, Secret: secret,
		Headers: map[string]string{"Authorization": "Bearer at-rest-token"}})
	require.NoError(t, err)

	kv, err := e.js.KeyValue(context.Background(), stream.DestBucket)
	require.NoError(t, err)
	raw, err := kv.Get(context.Background(), "enc")
	require.NoError(t, err)
	require.NotContains(t, string(raw.Value()), strings.TrimPrefix(secret, "whsec_"), "the secret is not stored in the clear")
	require.NotContains(t, string(raw.Value()), "at-rest-token", "the header value is not stored in the clear")
	require.Contains(t, string(raw.Value()), `"Authorization"`, "the header's name is")
	require.Contains(t, string(raw.Value()), "enc:v1:")

	d, err := sealed.Get(context.Background(), "enc")
	require.NoError(t, err)
	require.Equal(t, secret, d.Secret, "the key opens it")
	require.Equal(t, "Bearer at-rest-token", d.Headers["Authorization"])

	// A relay without the key leaves the destination alone: its events wait.
	rec, stop := e.startRelay()
	res := e.publish("enc", "", `{}`)
	_, err = e.store.Update(context.Background(), "enc", func(d *destination.Destination) error { return nil })
	require.ErrorIs(t, err, destination.ErrSealed, "no update without the key")
	stop()
	require.Zero(t, rec.count(func(relay.Outcome) bool { return true }), "nothing was attempted without the key")
	require.Zero(t, s.len())

	// With the key, it is delivered, signed with the secret.
	e.startRelay(func(c *relay.Config) { c.SecretKey = key })
	eventually(t, 10*time.Second, func() bool { return s.delivered()[res.ID] == 1 }, "delivered once relay has the key")
	h := s.all()[0]
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	require.NoError(t, wh.Verify([]byte(h.Body), h.Header))
	require.Equal(t, "Bearer at-rest-token", h.Header.Get("Authorization"), "sent opened")
}

func TestDeliveryToABlockedAddressIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "ssrf", URL: s.URL, Retry: fast(5)})
	// The default guard: loopback is not allowed.
	e.startRelay(func(c *relay.Config) { c.HTTPClient = egress.NewClient(egress.Options{}) })
	e.publish("ssrf", "", `{}`)
	eventually(t, 10*time.Second, func() bool { return len(e.deadLetters("ssrf")) == 1 }, "dead-lettered")
	l := e.deadLetters("ssrf")[0]
	require.Equal(t, relay.ReasonBlockedAddress, l.Reason)
	require.Equal(t, 1, l.Attempts, "not retried")
	require.Contains(t, l.LastError, "blocked address")
	require.Zero(t, s.received(), "nothing reached the loopback sink")
}

// During a rotation of the secret key, a relay given the new key and the old
// one as previous delivers, signed, the events of destinations whose
// secrets the old key sealed.
func TestRelayOpensSecretsSealedWithThePreviousKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	oldKey, newKey := []byte("the-old-operator-key-123456789"), []byte("the-new-operator-key-987654321")
	byOld, err := destination.NewStore(context.Background(), e.js, destination.WithSecretKey(oldKey))
	require.NoError(t, err)
	secret := webhook.GenerateSecret()
	s := newSink(t, nil)
	_, err = byOld.Add(context.Background(), destination.Destination{Name: "rotating", URL: s.URL, Secret: secret})
	require.NoError(t, err)

	e.startRelay(func(c *relay.Config) { c.SecretKey, c.PreviousSecretKeys = newKey, [][]byte{oldKey} })
	res := e.publish("rotating", "", `{}`)
	eventually(t, 10*time.Second, func() bool { return s.delivered()[res.ID] == 1 }, "delivered")
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	h := s.all()[0]
	require.NoError(t, wh.Verify([]byte(h.Body), h.Header), "signed with the destination's secret")
}
