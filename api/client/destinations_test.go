package client

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDestinations(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	// Created with the defaults of 'relay dest add' and a generated
	// secret, answered once.
	d, err := e.admin.CreateDestination(ctx, NewDestination{Name: "orders", DestinationSettings: DestinationSettings{
		URL: new(e.sink.URL + "/orders?token=s3cret"), Headers: map[string]string{"Authorization": "Bearer s3cret"},
		Types: []string{"order.*"}, Filter: new("data.n > 0"), MaxAttempts: new(5), Timeout: new(Duration(5 * time.Second)),
	}})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(d.Secret, "whsec_"), d.Secret)
	require.True(t, d.Signed)
	require.Equal(t, e.sink.URL+"/orders?token=xxxxx", d.URL, "query values redacted")
	require.Equal(t, []string{"Authorization"}, d.HeaderNames)
	require.Equal(t, Duration(5*time.Second), d.Timeout)
	require.Equal(t, 5, d.MaxAttempts)
	require.Equal(t, 16, d.Concurrency, "the default")
	require.Equal(t, "failover", d.URLStrategy)
	require.Equal(t, "active", d.State)
	require.Equal(t, []string{"order.*"}, d.Types)
	require.Equal(t, "data.n > 0", d.Filter)
	require.False(t, d.Created.IsZero())

	pool, err := e.admin.CreateDestination(ctx, NewDestination{Name: "audit", DestinationSettings: DestinationSettings{
		URLs: []string{e.sink.URL + "/a", e.sink.URL + "/b"}, URLStrategy: new("round-robin"), NoSecret: true,
		Ordered: new(true), Partitions: new(4), OnFailure: new("skip"), Jitter: new(0.0), BackoffMax: new(Duration(10 * time.Minute)),
	}})
	require.NoError(t, err)
	require.Empty(t, pool.Secret, "no secret: none generated")
	require.False(t, pool.Signed)
	require.Equal(t, []string{e.sink.URL + "/a", e.sink.URL + "/b"}, pool.URLs)
	require.True(t, pool.Ordered)
	require.Equal(t, 4, pool.Partitions)
	require.Equal(t, "skip", pool.OnFailure)
	require.Zero(t, pool.Jitter)
	require.Equal(t, Duration(10*time.Minute), pool.BackoffMax)

	all, err := e.read.Destinations(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, "audit", all[0].Name, "sorted by name")
	got, err := e.read.Destination(ctx, "orders")
	require.NoError(t, err)
	require.Empty(t, got.Secret, "a secret is never answered again")
	d.Secret = ""
	require.Equal(t, d, got)

	// Only the settings given change; an empty list or map clears one.
	up, err := e.admin.UpdateDestination(ctx, "orders", DestinationSettings{MaxAttempts: new(7), Types: []string{}, Headers: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, 7, up.MaxAttempts)
	require.Empty(t, up.Types)
	require.Empty(t, up.HeaderNames)
	require.Equal(t, "data.n > 0", up.Filter, "kept")
	require.Equal(t, Duration(5*time.Second), up.Timeout, "kept")
	_, err = e.admin.UpdateDestination(ctx, "audit", DestinationSettings{Partitions: new(8)})
	require.True(t, IsConflict(err), "the layout is fixed: %v", err)

	p, err := e.admin.PauseDestination(ctx, "orders", PauseFor(time.Hour))
	require.NoError(t, err)
	require.Equal(t, "operator", p.State)
	require.WithinDuration(t, time.Now().Add(time.Hour), p.PausedUntil, time.Minute)
	p, err = e.admin.PauseDestination(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, "operator", p.State)
	require.True(t, p.PausedUntil.IsZero(), "paused until resumed")
	stats, err := e.read.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, "orders", stats[1].Dest)
	require.Equal(t, "operator", stats[1].State)
	r, err := e.admin.ResumeDestination(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, "active", r.State)

	rot, err := e.admin.RotateSecret(ctx, "orders")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rot.Secret, "whsec_"))
	sec, err := e.admin.DestinationSecret(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, rot.Secret, sec.Secret, "the secret in force is the rotated one")
	require.NotNil(t, sec.PreviousSecretUntil, "the old one still signs")
	_, err = e.read.DestinationSecret(ctx, "orders")
	require.Equal(t, http.StatusForbidden, statusOf(err), "a read key does not see secrets: %v", err)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), rot.PreviousSecretUntil, time.Minute, "the old one signs for the default overlap")
	rot, err = e.admin.RotateSecret(ctx, "orders", UseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Overlap(0))
	require.NoError(t, err)
	require.Empty(t, rot.Secret, "the secret given is not answered")
	require.True(t, rot.PreviousSecretUntil.IsZero(), "no overlap")

	require.NoError(t, e.admin.DeleteDestination(ctx, "audit"))
	_, err = e.read.Destination(ctx, "audit")
	require.True(t, IsNotFound(err), "%v", err)
}

// A destination whose events wait is removed only with Force.
func TestDeleteDestinationWithEventsWaiting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.addDest("orders", func(d *NewDestination) {
		d.URL = new(e.sink.URL + "/down")
		d.BackoffBase, d.BackoffMax = new(Duration(time.Hour)), new(Duration(time.Hour))
	})
	_, err := e.publish.Publish(ctx, NewEvent{Dest: "orders", Data: 1})
	require.NoError(t, err)
	// It failed once, and waits an hour for its next attempt.
	e.waitAttempts(AttemptQuery{Dest: "orders", Status: "503"}, 1)

	err = e.admin.DeleteDestination(ctx, "orders")
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 409, pe.Status)
	require.Contains(t, pe.Detail, "force=true")
	require.True(t, IsConflict(err))
	require.NoError(t, e.admin.DeleteDestination(ctx, "orders", Force()))
	all, err := e.read.Destinations(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}

// A filter is tried on an example event as a destination would decide.
func TestTestFilter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	ev := FilterExample{Type: "order.created", Data: json.RawMessage(`{"total": 120, "region": "eu"}`), Headers: map[string]string{"x-region": "eu"}}
	for _, c := range []struct{ filter, outcome string }{
		{`data.total > 100 && type == "order.created"`, "delivered"},
		{`data.region == "us"`, "filtered"},
		{`headers["X-Region"] == "eu"`, "delivered"},
		{`data.total / 0 > int("x")`, "dead_letter"},
	} {
		res, err := e.read.TestFilter(ctx, c.filter, ev)
		require.NoError(t, err, c.filter)
		require.Equal(t, c.outcome, res.Outcome, "%s: %+v", c.filter, res)
		require.Equal(t, c.outcome == "delivered", res.Matched, c.filter)
		require.Equal(t, c.outcome == "dead_letter", res.Error != "", c.filter)
	}
	_, err := e.read.TestFilter(ctx, `data.total >`, ev)
	var apiErr *Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnprocessableEntity, apiErr.Status)
	require.Equal(t, "filter", apiErr.Field)
}

// An Ed25519 destination's public key is in the JWKS, which needs no key;
// a tenant's is in its own.
func TestEd25519DestinationsAndTheirJWKS(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	d, err := e.admin.CreateDestination(ctx, NewDestination{Name: "edge", DestinationSettings: DestinationSettings{
		URL: new(e.sink.URL + "/edge"), Signature: new("ed25519")}})
	require.NoError(t, err)
	require.Empty(t, d.Secret, "no HMAC secret")
	require.True(t, d.Signed)
	require.Equal(t, "ed25519", d.Signature)
	require.Len(t, d.PublicKeys, 1)
	require.True(t, strings.HasPrefix(d.PublicKeys[0].Key, "whpk_"), d.PublicKeys[0].Key)

	anyone := e.client("")
	set, err := anyone.JWKS(ctx)
	require.NoError(t, err)
	require.Len(t, set.Keys, 1)
	require.Equal(t, JWK{Kty: "OKP", Crv: "Ed25519", X: set.Keys[0].X, Kid: d.PublicKeys[0].Kid, Use: "sig", Alg: "EdDSA"}, set.Keys[0])

	_, _, err = e.admin.PutTenant(ctx, "acme", TenantChange{Name: "Acme"})
	require.NoError(t, err)
	td, err := e.admin.ForTenant("acme").CreateDestination(ctx, NewDestination{Name: "orders", DestinationSettings: DestinationSettings{
		URL: new(e.sink.URL + "/orders"), Signature: new("both")}})
	require.NoError(t, err)
	require.NotEmpty(t, td.Secret, "both: an HMAC secret too, shown once")
	set, err = anyone.ForTenant("acme").JWKS(ctx)
	require.NoError(t, err)
	require.Len(t, set.Keys, 1)
	require.Equal(t, td.PublicKeys[0].Kid, set.Keys[0].Kid)

	rot, err := e.admin.RotateSecret(ctx, "edge", Overlap(time.Hour))
	require.NoError(t, err)
	require.Len(t, rot.PublicKeys, 2)
	require.Equal(t, d.PublicKeys[0].Kid, rot.PublicKeys[1].Kid)
	require.False(t, rot.PublicKeys[1].Until.IsZero())

	addrs, err := e.read.Egress(ctx)
	require.NoError(t, err)
	require.Empty(t, addrs, "none declared")

	types, err := e.read.DestinationTypes(ctx)
	require.NoError(t, err)
	var names []string
	for _, ty := range types {
		names = append(names, ty.Name)
	}
	require.Equal(t, []string{"http", "eventbridge", "kafka", "nats", "pubsub", "rabbitmq", "sqs"}, names)
	for _, ty := range types[1:] {
		require.NotEmpty(t, ty.Fields, ty.Name)
		var required bool
		for _, f := range ty.Fields {
			required = required || f.Required
		}
		require.True(t, required || ty.Name == "eventbridge", "%s has a required field", ty.Name)
	}
	require.True(t, types[2].Ordered, "kafka keeps a key's order")
	require.False(t, types[1].Ordered, "eventbridge does not")
}

// A destination of another kind is created, shown (its credentials by
// name only), updated and refused by its config's field, through the API.
func TestDestinationOfAnotherKind(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	kafka := "kafka"
	d, err := e.admin.CreateDestination(ctx, NewDestination{Name: "stream", DestinationSettings: DestinationSettings{
		Kind: &kafka, Config: map[string]string{"brokers": "kafka-1:9092", "topic": "orders", "sasl_mechanism": "plain", "sasl_username": "relay", "sasl_password": "s3cret"},
		Ordered: new(true)}})
	require.NoError(t, err)
	require.Equal(t, "kafka", d.Kind)
	require.Equal(t, map[string]string{"brokers": "kafka-1:9092", "topic": "orders", "sasl_mechanism": "plain", "sasl_username": "relay"}, d.Config)
	require.Equal(t, []string{"sasl_password"}, d.CredentialNames, "the password by name only")
	require.Empty(t, d.URL)
	require.NotEmpty(t, d.Secret, "signed, as an HTTP destination is")

	d, err = e.admin.UpdateDestination(ctx, "stream", DestinationSettings{Config: map[string]string{"topic": "orders-v2"}})
	require.NoError(t, err)
	require.Equal(t, "orders-v2", d.Config["topic"])
	require.Equal(t, []string{"sasl_password"}, d.CredentialNames, "fields not given keep their values")

	for _, tc := range []struct {
		nd    NewDestination
		field string
	}{
		{NewDestination{Name: "bad", DestinationSettings: DestinationSettings{Kind: &kafka, Config: map[string]string{"brokers": "kafka-1:9092"}}}, "config.topic"},
		{NewDestination{Name: "bad", DestinationSettings: DestinationSettings{Kind: &kafka, Config: map[string]string{"brokers": "kafka-1", "topic": "t"}}}, "config.brokers"},
		{NewDestination{Name: "bad", DestinationSettings: DestinationSettings{Kind: &kafka, Config: map[string]string{"brokers": "k:1", "topic": "t", "nope": "1"}}}, "config.nope"},
		{NewDestination{Name: "bad", DestinationSettings: DestinationSettings{Kind: new("carrier-pigeon")}}, "kind"},
		{NewDestination{Name: "bad", DestinationSettings: DestinationSettings{Kind: &kafka, Config: map[string]string{"brokers": "k:1", "topic": "t", "key": "none"}, Ordered: new(true)}}, "ordered"},
	} {
		_, err := e.admin.CreateDestination(ctx, tc.nd)
		var pe *Error
		require.ErrorAs(t, err, &pe, tc.field)
		require.Equal(t, 422, pe.Status, pe.Detail)
		require.Equal(t, tc.field, pe.Field, pe.Detail)
	}
	_, err = e.admin.UpdateDestination(ctx, "stream", DestinationSettings{Kind: new("http")})
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "kind", pe.Field, pe.Detail)
}
