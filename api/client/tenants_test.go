package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tenants through the client: upserted, read, listed a page at a time,
// deleted.
func TestTenants(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	got, created, err := e.admin.PutTenant(ctx, "acme", TenantChange{Name: "Acme", Metadata: map[string]string{"plan": "pro"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "pro", got.Metadata["plan"])
	got, created, err = e.admin.PutTenant(ctx, "acme", TenantChange{Name: "Acme Corp", Portal: TenantPortal{ProductName: "Acme Hooks",
		AccentColor: "#1A73E8", FrameAncestors: []string{"https://app.acme.example:443", "https://*.acme.example"}}})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "Acme Corp", got.Name)
	require.Nil(t, got.Metadata, "the change replaces the metadata")
	require.Equal(t, TenantPortal{ProductName: "Acme Hooks", AccentColor: "#1a73e8", FrameAncestors: []string{"https://app.acme.example", "https://*.acme.example"}},
		got.Portal, "answered normalized")
	read, err := e.read.Tenant(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, got, read)

	_, _, err = e.admin.PutTenant(ctx, "acme", TenantChange{Portal: TenantPortal{FrameAncestors: []string{"https://app.acme.example/"}}})
	var apiErr *Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "portal.frame_ancestors", apiErr.Field)

	_, _, err = e.admin.PutTenant(ctx, "bad.id", TenantChange{})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "id", apiErr.Field)

	_, _, err = e.admin.PutTenant(ctx, "beta", TenantChange{})
	require.NoError(t, err)
	page, err := e.read.ListTenants(ctx, "", 1)
	require.NoError(t, err)
	require.Len(t, page.Tenants, 1)
	require.Equal(t, "acme", page.Tenants[0].ID)
	page, err = e.read.ListTenants(ctx, page.Next, 0)
	require.NoError(t, err)
	require.Equal(t, "beta", page.Tenants[0].ID)
	require.Empty(t, page.Next)

	require.NoError(t, e.admin.DeleteTenant(ctx, "acme"))
	_, err = e.read.Tenant(ctx, "acme")
	require.True(t, IsNotFound(err), "%v", err)
	require.True(t, IsNotFound(e.admin.DeleteTenant(ctx, "acme")))
}

// A tenant's resources through the client: a global admin key reaches
// them with ForTenant, a tenant key (created through the client) with no
// more than its own key; neither sees another tenant's.
func TestTenantResources(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	for _, id := range []string{"acme", "globex"} {
		_, _, err := e.admin.PutTenant(ctx, id, TenantChange{})
		require.NoError(t, err)
	}
	acme := e.admin.ForTenant("acme")
	d, err := acme.CreateDestination(ctx, NewDestination{Name: "orders", DestinationSettings: DestinationSettings{URL: new(e.sink.URL + "/orders"), NoSecret: true, BackoffBase: new(Duration(20 * time.Millisecond)), BackoffMax: new(Duration(50 * time.Millisecond))}})
	require.NoError(t, err)
	require.Equal(t, "acme", d.Tenant)
	_, err = e.admin.ForTenant("globex").CreateDestination(ctx, NewDestination{Name: "orders", DestinationSettings: DestinationSettings{URL: new(e.sink.URL + "/orders"), NoSecret: true, BackoffBase: new(Duration(20 * time.Millisecond)), BackoffMax: new(Duration(50 * time.Millisecond))}})
	require.NoError(t, err)

	nk, err := e.admin.CreateTenantKey(ctx, "acme", "acme-admin", "admin")
	require.NoError(t, err)
	require.Equal(t, "acme", nk.Tenant)
	ks, err := e.admin.TenantKeys(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, ks, 1)
	require.Equal(t, "acme-admin", ks[0].Name)
	own := e.client(nk.Key)
	k, err := own.Key(ctx)
	require.NoError(t, err)
	require.Equal(t, "acme", k.Tenant)

	// Published by the tenant key (its tenant implied) and for the
	// tenant by the global key; delivered, logged, looked up.
	_, err = own.Publish(ctx, NewEvent{Dest: "orders", ID: "evt-a1", Data: 1})
	require.NoError(t, err)
	b, err := acme.PublishBatch(ctx, []NewEvent{{Dest: "orders", ID: "evt-a2", Data: 2}})
	require.NoError(t, err)
	require.Equal(t, 1, b.Stored)
	e.waitIndexed("evt-a1", "evt-a2")
	page, err := acme.Attempts(ctx, AttemptQuery{Dest: "orders"})
	require.NoError(t, err)
	require.Len(t, page.Attempts, 2)
	require.Equal(t, "orders", page.Attempts[0].Dest)
	ev, err := own.Event(ctx, "evt-a1")
	require.NoError(t, err)
	require.Equal(t, "orders", ev.Destinations[0].Dest)
	body, err := acme.EventBody(ctx, "evt-a2")
	require.NoError(t, err)
	require.Equal(t, "2", string(body))
	// A key of no tenant at the plain paths sees every tenant's, named
	// tenant=name; a destination it names there is one of no tenant.
	all, err := e.admin.Event(ctx, "evt-a1")
	require.NoError(t, err)
	require.Equal(t, "acme=orders", all.Destinations[0].Dest)
	every, err := e.read.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, every, 2)
	for _, s := range every {
		require.Equal(t, s.Tenant+"=orders", s.Dest)
	}
	_, err = e.admin.Destination(ctx, "orders")
	require.True(t, IsNotFound(err), "no destination orders of no tenant: %v", err)
	pg, err := e.read.Attempts(ctx, AttemptQuery{Dest: "acme=orders"})
	require.NoError(t, err)
	require.Len(t, pg.Attempts, 2)
	st, err := acme.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Equal(t, "acme", st[0].Tenant)

	for _, c := range []*Client{own, acme} {
		ds, err := c.Destinations(ctx)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		ev, err := c.Event(ctx, "evt-a2")
		require.NoError(t, err)
		require.Len(t, ev.Destinations, 1)
	}
	_, err = acme.Destination(ctx, "orders")
	require.NoError(t, err)
	_, err = acme.UpdateDestination(ctx, "orders", DestinationSettings{Timeout: new(Duration(5 * time.Second))})
	require.NoError(t, err)
	_, err = acme.PauseDestination(ctx, "orders")
	require.NoError(t, err)
	_, err = acme.ResumeDestination(ctx, "orders")
	require.NoError(t, err)
	rot, err := acme.RotateSecret(ctx, "orders")
	require.NoError(t, err)
	sec, err := acme.DestinationSecret(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, rot.Secret, sec.Secret)
	rs, err := acme.Retrying(ctx, "orders", 10)
	require.NoError(t, err)
	require.Empty(t, rs)
	_, err = acme.SkipRetrying(ctx, "orders", "evt-none", "")
	require.True(t, IsNotFound(err), "%v", err)

	// A dead letter of acme's, and none of globex's seen by acme.
	e.sink.setReject(true)
	_, err = e.admin.ForTenant("globex").Publish(ctx, NewEvent{Dest: "orders", ID: "evt-g", Data: 3})
	require.NoError(t, err)
	_, err = own.Publish(ctx, NewEvent{Dest: "orders", ID: "evt-dead", Data: 4})
	require.NoError(t, err)
	var letters DeadLetterPage
	deadline := time.Now().Add(30 * time.Second)
	for len(letters.DeadLetters) == 0 {
		require.False(t, time.Now().After(deadline), "no dead letter")
		letters, err = acme.DeadLetters(ctx, DeadLetterQuery{})
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, letters.DeadLetters, 1)
	l := letters.DeadLetters[0]
	require.Equal(t, "evt-dead", l.EventID)
	require.Equal(t, "orders", l.Dest)
	for _, c := range []*Client{own, acme} {
		got, err := c.DeadLetter(ctx, l.Seq)
		require.NoError(t, err)
		require.Equal(t, "evt-dead", got.EventID)
	}
	raw, err := acme.DeadLetterBody(ctx, l.Seq)
	require.NoError(t, err)
	require.Equal(t, "4", string(raw))
	e.sink.setReject(false)
	rep, err := acme.ReplayDeadLetters(ctx, ReplaySelection{LetterSelection: LetterSelection{All: true, DryRun: true}})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Matched, "acme's one letter, not globex's")
	pur, err := acme.PurgeDeadLetters(ctx, LetterSelection{All: true, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1, pur.Matched)

	ps, err := own.CreatePortalSession(ctx, "acme", []string{"replay"}, 30*time.Minute)
	require.NoError(t, err)
	require.Contains(t, ps.URL, "/portal/signin/acme#token=rpl_")
	require.Equal(t, []string{"replay"}, ps.Capabilities)
	require.WithinDuration(t, time.Now().Add(30*time.Minute), ps.ExpiresAt, time.Minute)
	_, err = own.CreatePortalSession(ctx, "globex", nil, 0)
	require.True(t, IsNotFound(err), "another tenant's: %v", err)
	require.NoError(t, e.admin.EndPortalSessions(ctx, "acme"))

	require.NoError(t, e.admin.RevokeTenantKey(ctx, "acme", "acme-admin"))
	_, err = own.Key(ctx)
	require.Error(t, err, "revoked")
	require.NoError(t, acme.DeleteDestination(ctx, "orders", Force()))
	require.NoError(t, e.admin.DeleteTenant(ctx, "acme", Force()))
}
