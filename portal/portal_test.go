package portal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

func TestPortalSessions(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	now := time.Now()
	s, err := Open(ctx, srv.JS, func() time.Time { return now })
	require.NoError(t, err)

	link, sess, err := s.Mint(ctx, "acme", []Capability{ManageEndpoints}, 0, "ops")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(link, "rpl_"+sess.ID+"_"))
	require.Equal(t, now.Add(DefaultTTL).UTC(), sess.Expires)
	require.True(t, sess.Can(ManageEndpoints))
	require.False(t, sess.Can(Replay))

	// Nothing stored opens a session: only hashes are kept.
	kv, err := srv.JS.KeyValue(ctx, "relay_portal")
	require.NoError(t, err)
	keys, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	secretPart := link[strings.LastIndex(link, "_")+1:]
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		require.NoError(t, err)
		require.NotContains(t, string(e.Value()), secretPart, k)
	}

	// A wrong link, then the right one once; a second exchange is refused.
	_, _, err = s.Exchange(ctx, link+"x")
	require.ErrorIs(t, err, ErrBadToken)
	cookie, got, err := s.Exchange(ctx, link)
	require.NoError(t, err)
	require.Equal(t, sess.ID, got.ID)
	_, _, err = s.Exchange(ctx, link)
	require.ErrorIs(t, err, ErrBadToken, "a link is spent once exchanged")
	v, err := s.Verify(ctx, cookie)
	require.NoError(t, err)
	require.Equal(t, "acme", v.Tenant)
	for _, bad := range []string{"", cookie + "x", link, "rps_0123456789abcdef_x", strings.Replace(cookie, "rps_", "rpl_", 1)} {
		_, err = s.Verify(ctx, bad)
		require.ErrorIs(t, err, ErrBadToken, "%q", bad)
	}

	// Another tenant's sessions are untouched by acme's end-all.
	other, _, err := s.Mint(ctx, "globex", nil, time.Hour, "ops")
	require.NoError(t, err)
	unused, _, err := s.Mint(ctx, "acme", nil, time.Hour, "ops")
	require.NoError(t, err)
	require.NoError(t, s.EndAll(ctx, "acme"))
	_, err = s.Verify(ctx, cookie)
	require.ErrorIs(t, err, ErrBadToken, "ended")
	_, _, err = s.Exchange(ctx, unused)
	require.ErrorIs(t, err, ErrBadToken, "a link not yet used is ended too")
	oc, _, err := s.Exchange(ctx, other)
	require.NoError(t, err)
	// After the end-all, new links work.
	fresh, _, err := s.Mint(ctx, "acme", nil, time.Hour, "ops")
	require.NoError(t, err)
	fc, _, err := s.Exchange(ctx, fresh)
	require.NoError(t, err)

	// Expiry, by the clock.
	now = now.Add(time.Hour + time.Second)
	_, err = s.Verify(ctx, oc)
	require.ErrorIs(t, err, ErrBadToken, "expired")
	_, err = s.Verify(ctx, fc)
	require.ErrorIs(t, err, ErrBadToken, "expired")

	_, _, err = s.Mint(ctx, "acme", nil, 25*time.Hour, "ops")
	require.Error(t, err)
	_, err = ParseCapabilities([]string{"manage_endpoints", "fly"})
	require.ErrorIs(t, err, ErrCapability)
	caps, err := ParseCapabilities([]string{"replay", "view_secret", "replay"})
	require.NoError(t, err)
	require.Equal(t, []Capability{Replay, ViewSecret}, caps)
}
