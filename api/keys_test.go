package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

func TestKeysCreateVerifyListRevoke(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	keys, err := OpenKeys(ctx, srv.JS)
	require.NoError(t, err)

	key, rec, err := keys.Create(ctx, "ci-publisher", ScopePublish)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(key, "relay_"), key)
	require.Equal(t, "ci-publisher", rec.Name)
	require.Empty(t, rec.Hash, "the hash is not handed out")

	// Only a hash is stored: the bucket holds neither the key nor its
	// secret part.
	kv, err := srv.JS.KeyValue(ctx, stream.KeysBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, rec.ID)
	require.NoError(t, err)
	secret := key[strings.LastIndex(key, rec.ID+"_")+len(rec.ID)+1:]
	require.NotContains(t, string(e.Value()), secret)
	require.Contains(t, string(e.Value()), hashSecret(secret))

	got, err := keys.Verify(ctx, key)
	require.NoError(t, err)
	require.Equal(t, rec.ID, got.ID)
	require.Equal(t, ScopePublish, got.Scope)
	require.Empty(t, got.Hash)

	for _, bad := range []string{
		"", "relay_", "Bearer " + key, key + "x", key[:len(key)-1],
		"relay_" + rec.ID + "_", "relay_0000000000000000_" + secret, "other_" + rec.ID + "_" + secret,
	} {
		_, err := keys.Verify(ctx, bad)
		require.ErrorIs(t, err, ErrBadKey, "%q", bad)
	}

	_, _, err = keys.Create(ctx, "ci-publisher", ScopeAdmin)
	require.ErrorIs(t, err, ErrKeyExists)
	_, _, err = keys.Create(ctx, "bad name", ScopeAdmin)
	require.ErrorContains(t, err, `key name "bad name"`)
	_, _, err = keys.Create(ctx, "x", Scope("root"))
	require.ErrorContains(t, err, `scope "root": use publish, read or admin`)

	_, admin, err := keys.Create(ctx, "ops", ScopeAdmin)
	require.NoError(t, err)
	all, err := keys.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, []string{"ci-publisher", "ops"}, []string{all[0].Name, all[1].Name})
	require.Equal(t, admin.ID, all[1].ID)
	for _, k := range all {
		require.Empty(t, k.Hash)
	}

	revoked, err := keys.Revoke(ctx, "ci-publisher")
	require.NoError(t, err)
	require.Equal(t, rec.ID, revoked.ID)
	_, err = keys.Verify(ctx, key)
	require.ErrorIs(t, err, ErrBadKey, "a revoked key no longer works")
	_, err = keys.Revoke(ctx, "ci-publisher")
	require.ErrorIs(t, err, ErrKeyNotFound)
	// The name is free again.
	_, _, err = keys.Create(ctx, "ci-publisher", ScopeRead)
	require.NoError(t, err)
}

func TestScopes(t *testing.T) {
	t.Parallel()
	require.True(t, ScopeAdmin.Allows(ScopePublish))
	require.True(t, ScopeAdmin.Allows(ScopeRead))
	require.True(t, ScopeAdmin.Allows(ScopeAdmin))
	require.True(t, ScopeRead.Allows(ScopeRead))
	require.False(t, ScopeRead.Allows(ScopePublish), "read may not publish")
	require.False(t, ScopeRead.Allows(ScopeAdmin))
	require.True(t, ScopePublish.Allows(ScopePublish))
	require.False(t, ScopePublish.Allows(ScopeRead), "publish may only publish")
	for _, s := range []string{"publish", "read", "admin"} {
		got, err := ParseScope(s)
		require.NoError(t, err)
		require.Equal(t, Scope(s), got)
	}
	_, err := ParseScope("Admin")
	require.Error(t, err)
}

// TestKeyRevokedElsewhereStopsWorkingWithinASecond: a replica keeps a
// verified key for a second (a KV read per request cost the API about a
// fifth of its CPU); a key revoked by another process (relay api-key
// revoke, another replica) stops working there once that second is over,
// and at once in the process that revoked it.
func TestKeyRevokedElsewhereStopsWorkingWithinASecond(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	replica, err := OpenKeys(ctx, srv.JS)
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	replica.now = func() time.Time { return now }
	cli, err := OpenKeys(ctx, srv.JS)
	require.NoError(t, err)

	key, _, err := cli.Create(ctx, "ops", ScopeRead)
	require.NoError(t, err)
	_, err = replica.Verify(ctx, key)
	require.NoError(t, err)
	_, err = cli.Verify(ctx, key)
	require.NoError(t, err)

	_, err = cli.Revoke(ctx, "ops")
	require.NoError(t, err)
	_, err = cli.Verify(ctx, key)
	require.ErrorIs(t, err, ErrBadKey, "the revoking process forgets it at once")

	now = now.Add(999 * time.Millisecond)
	_, err = replica.Verify(ctx, key)
	require.NoError(t, err, "another replica may take it for up to a second")
	_, err = replica.Verify(ctx, key+"x")
	require.ErrorIs(t, err, ErrBadKey, "but not with a wrong secret")

	now = now.Add(time.Millisecond)
	_, err = replica.Verify(ctx, key)
	require.ErrorIs(t, err, ErrBadKey, "a second after it was verified, it is read again, and refused")
}
