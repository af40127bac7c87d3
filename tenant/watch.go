package tenant

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Policies is a live copy of the tenants' limits, as the relay_tenants
// bucket holds them, for the engine and the API to enforce without a read
// per event. Only tenants with limits take memory. A nil *Policies limits
// nothing.
type Policies struct {
	stop func()
	log  *slog.Logger

	mu     sync.Mutex
	limits map[string]Limits
}

// WatchPolicies loads the tenants' limits and follows their changes until
// Stop.
func WatchPolicies(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Policies, error) {
	p := &Policies{log: log, limits: map[string]Limits{}}
	stop, err := stream.FollowBucket(ctx, js, stream.TenantsBucket, "tenants", p.apply)
	if err != nil {
		return nil, err
	}
	p.stop = stop
	return p, nil
}

func (p *Policies) apply(e jetstream.KeyValueEntry) {
	var t Tenant
	if e.Operation() == jetstream.KeyValuePut {
		if err := json.Unmarshal(e.Value(), &t); err != nil {
			p.log.Error("tenant stored invalid: it is not limited until it is fixed ('relay tenant put')", "tenant", e.Key(), "err", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.Limits.IsZero() {
		delete(p.limits, e.Key())
	} else {
		p.limits[e.Key()] = t.Limits
	}
}

// Limits returns tenant id's limits (none for an unknown tenant).
func (p *Policies) Limits(id string) Limits {
	if p == nil || id == "" {
		return Limits{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limits[id]
}

// Stop ends the watch.
func (p *Policies) Stop() {
	if p != nil {
		p.stop()
	}
}
