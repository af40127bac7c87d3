package destination

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/relaydev/relay/webhook"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// Rekey reseals each secret of each destination that is not sealed with the
// current key, and only those; it drops an expired previous secret, does
// not validate the rest of a destination, and leaves alone, reported, a
// secret no key it has opens.
func TestRekeyResealsEverySecretItCanOpen(t *testing.T) {
	ctx := context.Background()
	js := streamtest.Start(t).JS
	oldKey, newKey, otherKey := []byte("the-old-operator-key-123"), []byte("the-new-operator-key-456"), []byte("an-unknown-operator-key-789")
	byOld, err := NewStore(ctx, js, WithSecretKey(oldKey))
	require.NoError(t, err)
	byNew, err := NewStore(ctx, js, WithSecretKey(newKey))
	require.NoError(t, err)
	byOther, err := NewStore(ctx, js, WithSecretKey(otherKey))
	require.NoError(t, err)
	rotating, err := NewStore(ctx, js, WithSecretKey(newKey, oldKey))
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, stream.DestBucket)
	require.NoError(t, err)
	put := func(st *Store, d Destination) {
		t.Helper()
		_, err := kv.Put(ctx, d.Name, st.encode(d))
		require.NoError(t, err)
	}
	s1, s2 := webhook.GenerateSecret(), webhook.GenerateSecret()
	// Its secret sealed with the new key, its previous one with the old.
	mixed := Destination{Name: "mixed", URL: "https://example.test/m", Secret: s1, PrevSecret: s2, PrevSecretUntil: time.Now().Add(time.Hour)}
	put(byNew, mixed)
	raw, err := kv.Get(ctx, "mixed")
	require.NoError(t, err)
	var stored Destination
	require.NoError(t, json.Unmarshal(raw.Value(), &stored))
	stored.PrevSecret = byOld.sealer.seal(s2, "mixed")
	b, _ := json.Marshal(stored)
	_, err = kv.Put(ctx, "mixed", b)
	require.NoError(t, err)
	// A URL that no longer validates does not stop a reseal.
	put(byOld, Destination{Name: "badurl", URL: "ftp://example.test/x", Secret: s1})
	// A previous secret past its end is dropped.
	put(byOld, Destination{Name: "expired", URL: "https://example.test/e", Secret: s1, PrevSecret: s2, PrevSecretUntil: time.Now().Add(-time.Minute)})
	put(byNew, Destination{Name: "current", URL: "https://example.test/c", Secret: s1})
	put(byOther, Destination{Name: "unknown", URL: "https://example.test/u", Secret: s1})
	before, err := kv.Get(ctx, "unknown")
	require.NoError(t, err)

	res, err := rotating.Rekey(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"badurl", "expired", "mixed"}, res.Resealed)
	require.Equal(t, []string{"current"}, res.Current)
	require.Len(t, res.Failed, 1)
	require.ErrorIs(t, res.Failed["unknown"], ErrSealed)
	after, err := kv.Get(ctx, "unknown")
	require.NoError(t, err)
	require.Equal(t, before.Revision(), after.Revision(), "a secret it cannot open is left as it was")

	// Everything it resealed opens with the new key alone.
	for _, name := range []string{"mixed", "badurl", "expired"} {
		e, err := kv.Get(ctx, name)
		require.NoError(t, err)
		d, open, err := byNew.decode(name, e.Value())
		require.NoError(t, err)
		require.True(t, open, "%s opens with the new key alone", name)
		require.Equal(t, s1, d.Secret, name)
		require.False(t, strings.Contains(string(e.Value()), strings.TrimPrefix(s1, "whsec_")), "%s: stored sealed", name)
	}
	d, err := byNew.Get(ctx, "mixed")
	require.NoError(t, err)
	require.Equal(t, s2, d.PrevSecret, "the previous secret kept, resealed")
	d, err = byNew.Get(ctx, "expired")
	require.NoError(t, err)
	require.Empty(t, d.PrevSecret, "the expired previous secret dropped")
	require.True(t, d.PrevSecretUntil.IsZero())
	d, err = byNew.Get(ctx, "badurl")
	require.NoError(t, err)
	require.Equal(t, "ftp://example.test/x", d.URL, "nothing else changed")

	again, err := rotating.Rekey(ctx)
	require.NoError(t, err)
	require.Empty(t, again.Resealed, "a second run has nothing to do")
	require.Equal(t, []string{"badurl", "current", "expired", "mixed"}, again.Current)
}

// Configured header values are sealed like the signing secret, bound to their
// destination and header, and a store without the key cannot use them;
// Rekey seals those stored in the clear.
func TestHeaderValuesAreSealedAtRest(t *testing.T) {
	ctx := context.Background()
	js := streamtest.Start(t).JS
	key := []byte("the-operator-key-123456789")
	sealed, err := NewStore(ctx, js, WithSecretKey(key))
	require.NoError(t, err)
	clear, err := NewStore(ctx, js, AllowStoringInClear())
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, stream.DestBucket)
	require.NoError(t, err)
	h := map[string]string{"Authorization": "Bearer tok-1", "Cookie": "c00kie"}
	_, err = sealed.Add(ctx, Destination{Name: "a", URL: "https://example.test/a", Headers: h})
	require.NoError(t, err)
	raw, err := kv.Get(ctx, "a")
	require.NoError(t, err)
	require.NotContains(t, string(raw.Value()), "tok-1")
	require.NotContains(t, string(raw.Value()), "c00kie")
	d, err := sealed.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, h, d.Headers)

	// Without the key: not usable, not updatable.
	d, open, err := clear.decode("a", raw.Value())
	require.NoError(t, err)
	require.False(t, open)
	require.ErrorIs(t, d.WithDefaults().Validate(), ErrSealed)
	_, err = clear.Update(ctx, "a", func(*Destination) error { return nil })
	require.ErrorIs(t, err, ErrSealed)

	// A sealed value moved to another header does not open.
	var stored Destination
	require.NoError(t, json.Unmarshal(raw.Value(), &stored))
	stored.Headers["Cookie"] = stored.Headers["Authorization"]
	b, _ := json.Marshal(stored)
	_, err = kv.Put(ctx, "a", b)
	require.NoError(t, err)
	_, open, err = sealed.decode("a", b)
	require.NoError(t, err)
	require.False(t, open, "a seal is bound to its header")

	// Stored in the clear (before a key was set): Rekey seals them.
	_, err = clear.Add(ctx, Destination{Name: "b", URL: "https://example.test/b", Headers: h})
	require.NoError(t, err)
	res, err := sealed.Rekey(ctx)
	require.NoError(t, err)
	require.Contains(t, res.Resealed, "b")
	raw, err = kv.Get(ctx, "b")
	require.NoError(t, err)
	require.NotContains(t, string(raw.Value()), "tok-1")
	d, err = sealed.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, h, d.Headers)

	// Without the key, beside sealed ones, Add refuses to store secrets in
	// the clear unless allowed.
	plain, err := NewStore(ctx, js)
	require.NoError(t, err)
	_, err = plain.Add(ctx, Destination{Name: "c", URL: "https://example.test/c", Headers: map[string]string{"X-A": "v"}})
	require.ErrorIs(t, err, ErrWouldStoreInClear)
	_, err = plain.Add(ctx, Destination{Name: "c", URL: "https://example.test/c"})
	require.NoError(t, err, "nothing secret to store")
}

// A body template is sealed at rest like the secrets (it may embed a
// credential: a PagerDuty routing key), bound to its destination; a store
// without the key cannot use or change it, and Add will not store one in
// the clear beside sealed ones. One stored in the clear (before a key was
// set) loads, and Rekey seals it.
func TestBodyTemplateIsSealedAtRest(t *testing.T) {
	ctx := context.Background()
	js := streamtest.Start(t).JS
	key := []byte("the-operator-key-123456789")
	sealed, err := NewStore(ctx, js, WithSecretKey(key))
	require.NoError(t, err)
	clear, err := NewStore(ctx, js, AllowStoringInClear())
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, stream.DestBucket)
	require.NoError(t, err)
	const tmpl = `{"routing_key":"R0UT1NG-K3Y-0123","event_action":"trigger","payload":{"summary":{{json .Type}}}}`
	_, err = sealed.Add(ctx, Destination{Name: "pd", URL: "https://events.example.test/v2/enqueue", BodyTemplate: tmpl})
	require.NoError(t, err)
	raw, err := kv.Get(ctx, "pd")
	require.NoError(t, err)
	require.NotContains(t, string(raw.Value()), "R0UT1NG-K3Y-0123", "the stored value holds no template text")
	require.NotContains(t, string(raw.Value()), "event_action")
	d, err := sealed.Get(ctx, "pd")
	require.NoError(t, err)
	require.Equal(t, tmpl, d.BodyTemplate)

	// Without the key: not usable, not updatable.
	d, open, err := clear.decode("pd", raw.Value())
	require.NoError(t, err)
	require.False(t, open)
	err = d.WithDefaults().Validate()
	require.ErrorIs(t, err, ErrSealed)
	var se *SettingError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "body-template", se.Setting)
	_, err = clear.Update(ctx, "pd", func(*Destination) error { return nil })
	require.ErrorIs(t, err, ErrSealed)

	// A sealed template moved to another destination does not open.
	var stored Destination
	require.NoError(t, json.Unmarshal(raw.Value(), &stored))
	stored.Name = "other"
	b, _ := json.Marshal(stored)
	_, open, err = sealed.decode("other", b)
	require.NoError(t, err)
	require.False(t, open, "a seal is bound to its destination")

	// Stored in the clear: it loads, and Rekey seals it.
	_, err = clear.Add(ctx, Destination{Name: "b", URL: "https://example.test/b", BodyTemplate: tmpl})
	require.NoError(t, err)
	raw, err = kv.Get(ctx, "b")
	require.NoError(t, err)
	require.Contains(t, string(raw.Value()), "R0UT1NG-K3Y-0123", "stored as it was given")
	d, err = sealed.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, tmpl, d.BodyTemplate)
	res, err := sealed.Rekey(ctx)
	require.NoError(t, err)
	require.Contains(t, res.Resealed, "b")
	raw, err = kv.Get(ctx, "b")
	require.NoError(t, err)
	require.NotContains(t, string(raw.Value()), "R0UT1NG-K3Y-0123")
	d, err = sealed.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, tmpl, d.BodyTemplate)

	// Without the key, beside sealed ones, Add refuses to store a template
	// in the clear unless allowed.
	plain, err := NewStore(ctx, js)
	require.NoError(t, err)
	_, err = plain.Add(ctx, Destination{Name: "c", URL: "https://example.test/c", BodyTemplate: tmpl})
	require.ErrorIs(t, err, ErrWouldStoreInClear)
}
