package tenant

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
		{Tenant{ID: "a", Portal: Portal{ProductName: strings.Repeat("p", MaxProductNameLen+1)}}, "portal.product_name"},
		{Tenant{ID: "a", Portal: Portal{ProductName: "tab\there"}}, "portal.product_name"},
		{Tenant{ID: "a", Portal: Portal{ProductName: "\xff"}}, "portal.product_name"},
		{Tenant{ID: "a", Portal: Portal{AccentColor: "1a73e8"}}, "portal.accent_color"},
		{Tenant{ID: "a", Portal: Portal{AccentColor: "#1a73e"}}, "portal.accent_color"},
		{Tenant{ID: "a", Portal: Portal{AccentColor: "#1a73eg"}}, "portal.accent_color"},
		{Tenant{ID: "a", Portal: Portal{FrameAncestors: []string{"https://app.example.com/"}}}, "portal.frame_ancestors"},
		{Tenant{ID: "a", Portal: Portal{FrameAncestors: []string{"https://a.example.com", "HTTPS://A.example.com:443"}}}, "portal.frame_ancestors"},
		{Tenant{ID: "a", Portal: Portal{FrameAncestors: slices.Repeat([]string{"https://a.example.com"}, MaxFrameAncestors+1)}}, "portal.frame_ancestors"},
	} {
		var fe *FieldError
		require.True(t, errors.As(c.t.Validate(), &fe), "%+v", c.t)
		require.Equal(t, c.field, fe.Field, "%+v", c.t)
	}
	require.NoError(t, Tenant{ID: "a", Name: "Acme, Inc.", Metadata: map[string]string{"plan": "pro"}}.Validate())
	require.NoError(t, Tenant{ID: "a", Portal: Portal{ProductName: strings.Repeat("é", MaxProductNameLen/2), AccentColor: "#1A73e8",
		FrameAncestors: []string{"https://app.example.com", "https://*.example.com"}}}.Validate())
}

func TestValidateOrigin(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://app.example.com":       "https://app.example.com",
		"HTTPS://App.Example.COM":       "https://app.example.com",
		"https://*.example.com":         "https://*.example.com",
		"http://localhost:8080":         "http://localhost:8080",
		"http://127.0.0.1:03000":        "http://127.0.0.1:3000",
		"https://app.example.com:443":   "https://app.example.com",
		"http://app.example.com:80":     "http://app.example.com",
		"http://app.example.com:443":    "http://app.example.com:443",
		"https://xn--bcher-kva.example": "https://xn--bcher-kva.example",
		"https://*.eu.example.com:8443": "https://*.eu.example.com:8443",
		"https://a-b.example.com:65535": "https://a-b.example.com:65535",
	} {
		got, err := ValidateOrigin(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for bad, why := range map[string]string{
		"":                                             "no scheme",
		"app.example.com":                              "no scheme",
		"://app.example.com":                           "the scheme must be http or https",
		"ftp://app.example.com":                        "the scheme must be http or https",
		"https://":                                     "no host",
		"https://:443":                                 "no host",
		"https://app.example.com/":                     "not even /",
		"https://app.example.com/embed":                "a path (/embed)",
		"https://app.example.com?a=1":                  "a query",
		"https://app.example.com#top":                  "a fragment",
		"https://user@app.example.com":                 "user info",
		"https://app.example.com:":                     "the port",
		"https://app.example.com:0":                    "the port",
		"https://app.example.com:65536":                "the port",
		"https://app.example.com:+443":                 "the port",
		"https://app.example.com:*":                    "the port",
		"https://[::1]:8080":                           "IPv6",
		"https://*":                                    "wildcard",
		"https://app.*.example.com":                    "wildcard",
		"https://*app.example.com":                     "wildcard",
		"https://*.":                                   `label ""`,
		"https://example.com.":                         `label ""`,
		"https://-app.example.com":                     `label "-app"`,
		"https://app_1.example.com":                    `label "app_1"`,
		"https://app example.com":                      `label "app example"`,
		"https://app.example.com;x":                    `label "com;x"`,
		"https://bücher.example":                       "xn--",
		"https://" + strings.Repeat("a.", 127) + "com": "longer than 253",
	} {
		_, err := ValidateOrigin(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), why, bad)
		require.Contains(t, err.Error(), "give scheme://host", "the error says what to give: %s", bad)
	}
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

	got, _, err = s.Put(ctx, Tenant{ID: "acme", Name: "Acme Corp", Portal: Portal{ProductName: "Acme Hooks", AccentColor: "#1A73E8",
		FrameAncestors: []string{"HTTPS://App.Acme.example:443", "https://*.acme.example"}}})
	require.NoError(t, err)
	want := Portal{ProductName: "Acme Hooks", AccentColor: "#1a73e8", FrameAncestors: []string{"https://app.acme.example", "https://*.acme.example"}}
	require.Equal(t, want, got.Portal, "stored normalized")
	read, err = s.Get(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, want, read.Portal)
	got, _, err = s.Put(ctx, Tenant{ID: "acme", Name: "Acme Corp"})
	require.NoError(t, err)
	require.True(t, got.Portal.IsZero(), "the update replaced the portal settings")

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
