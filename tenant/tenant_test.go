package tenant

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

func TestValidateID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "acme", "Acme_Corp-2", "cus_9f8A7b", "0", strings.Repeat("x", 64)} {
		require.NoError(t, ValidateID(ok), ok)
	}
	for _, bad := range []string{"", "-acme", "_acme", "acme.corp", "acme corp", "acme>", "acme*", "acme/x", "é", strings.Repeat("x", 65)} {
		err := ValidateID(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "invalid tenant id")
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range MaxMetadataKeys + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, c := range []struct {
		t     Tenant
		field string
	}{
		{Tenant{ID: "a.b"}, "id"},
		{Tenant{ID: "a", Name: strings.Repeat("n", MaxNameLen+1)}, "name"},
		{Tenant{ID: "a", Name: "line\nbreak"}, "name"},
		{Tenant{ID: "a", Metadata: many}, "metadata"},
		{Tenant{ID: "a", Metadata: map[string]string{"": "v"}}, "metadata"},
		{Tenant{ID: "a", Metadata: map[string]string{"plan": strings.Repeat("v", MaxMetadataValLen+1)}}, "metadata.plan"},
		{Tenant{ID: "a", Metadata: map[string]string{"plan": "\xff"}}, "metadata.plan"},
	} {
		var fe *FieldError
		require.True(t, errors.As(c.t.Validate(), &fe), "%+v", c.t)
		require.Equal(t, c.field, fe.Field, "%+v", c.t)
	}
	require.NoError(t, Tenant{ID: "a", Name: "Acme, Inc.", Metadata: map[string]string{"plan": "pro"}}.Validate())
}

func TestPutGetListDelete(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s, err := Open(ctx, srv.JS, func() time.Time { return now })
	require.NoError(t, err)

	got, created, err := s.Put(ctx, Tenant{ID: "acme", Name: "Acme", Metadata: map[string]string{"plan": "pro"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, now, got.CreatedAt)

	now = now.Add(time.Hour)
	got, created, err = s.Put(ctx, Tenant{ID: "acme", Name: "Acme Corp"})
	require.NoError(t, err)
	require.False(t, created, "an upsert of an existing tenant updates it")
	require.Equal(t, now.Add(-time.Hour), got.CreatedAt, "created_at is kept")
	require.Equal(t, now, got.UpdatedAt)
	read, err := s.Get(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, got, read)
	require.Nil(t, read.Metadata, "the update replaced the metadata")

	_, _, err = s.Put(ctx, Tenant{ID: "bad.id"})
	var fe *FieldError
	require.ErrorAs(t, err, &fe)

	for _, id := range []string{"c3", "b2", "a1", "d4"} {
		_, _, err := s.Put(ctx, Tenant{ID: id})
		require.NoError(t, err)
	}
	var pages [][]string
	for after := ""; ; {
		page, next, err := s.List(ctx, after, 2)
		require.NoError(t, err)
		var ids []string
		for _, t := range page {
			ids = append(ids, t.ID)
		}
		pages = append(pages, ids)
		if next == "" {
			break
		}
		after = next
	}
	require.Equal(t, [][]string{{"a1", "acme"}, {"b2", "c3"}, {"d4"}}, pages, "in the order of their ids, two a page")

	require.NoError(t, s.Delete(ctx, "acme"))
	_, err = s.Get(ctx, "acme")
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorIs(t, s.Delete(ctx, "acme"), ErrNotFound)
	_, err = s.Get(ctx, "no.such")
	require.ErrorIs(t, err, ErrNotFound, "an id that cannot be one is not found")

	_, created, err = s.Put(ctx, Tenant{ID: "acme"})
	require.NoError(t, err)
	require.True(t, created, "a deleted tenant's id can be used again")
}

// Two writers upserting the same new tenant at once: one creates it, the
// other updates it, and neither fails.
func TestConcurrentPuts(t *testing.T) {
	t.Parallel()
	srv := streamtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.JS, nil)
	require.NoError(t, err)
	const n = 8
	created := make(chan bool, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, c, err := s.Put(ctx, Tenant{ID: "race", Name: fmt.Sprint(i)})
			created <- c
			errs <- err
		}()
	}
	creations := 0
	for range n {
		require.NoError(t, <-errs)
		if <-created {
			creations++
		}
	}
	require.Equal(t, 1, creations)
}
