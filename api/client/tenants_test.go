package client

import (
	"context"
	"testing"

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
	got, created, err = e.admin.PutTenant(ctx, "acme", TenantChange{Name: "Acme Corp"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "Acme Corp", got.Name)
	read, err := e.read.Tenant(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, got, read)

	_, _, err = e.admin.PutTenant(ctx, "bad.id", TenantChange{})
	var apiErr *Error
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
