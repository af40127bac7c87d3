package relay

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// tenantSlots are the tenants' in-flight slots in this replica: a tenant's
// share of its MaxInFlight (tenant.Limits), at least 1.
type tenantSlots struct {
	mu       sync.Mutex
	byTenant map[string]*slots
}

// slots is a tenant's in-flight slots: a semaphore of size n.
type slots struct {
	n   int
	sem chan struct{}
}

// tenantWait is how long a delivery waits in relay for a slot of its
// tenant before the event is handed back to JetStream, for about as long
// again.
const tenantWait = 2 * time.Second

// Replicas is how many live replicas share the rate limits and the
// tenants' limits (at least 1).
func (r *Relay) Replicas() int {
	r.limits.mu.Lock()
	defer r.limits.mu.Unlock()
	return max(r.limits.replicas, 1)
}

// tenantSlot takes one of tenant's in-flight slots, waiting up to
// tenantWait, and returns its release; or, when none came free, no
// release and how long to hand the event back for.
func (r *Relay) tenantSlot(ctx context.Context, tenant string) (release func(), wait time.Duration) {
	max := r.cfg.Policies.Limits(tenant).MaxInFlight
	if max <= 0 {
		return func() {}, 0
	}
	s := r.slotsOf(tenant, max)
	t := time.NewTimer(tenantWait)
	defer t.Stop()
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem }, 0
	case <-t.C:
		r.cfg.Metrics.tenantWaited()
		return nil, tenantWait/2 + rand.N(tenantWait)
	case <-ctx.Done():
		return nil, time.Second // shutting down
	}
}

// slotsOf returns tenant's slots for a MaxInFlight of max, made anew when
// the limit or the replicas changed (deliveries holding the old ones give
// them back there).
func (r *Relay) slotsOf(tenant string, max int) *slots {
	replicas := r.Replicas()
	n := (max + replicas - 1) / replicas // a share, at least 1
	r.tenants.mu.Lock()
	defer r.tenants.mu.Unlock()
	if r.tenants.byTenant == nil {
		r.tenants.byTenant = map[string]*slots{}
	}
	s := r.tenants.byTenant[tenant]
	if s == nil || s.n != n {
		s = &slots{n: n, sem: make(chan struct{}, n)}
		r.tenants.byTenant[tenant] = s
	}
	return s
}
