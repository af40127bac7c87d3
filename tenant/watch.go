package tenant

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Policies is a live copy of the tenants' limits, as the relay_tenants
// bucket holds them, for the engine and the API to enforce without a read
// per event. Only tenants with limits take memory. A nil *Policies limits
// nothing.
type Policies struct {
	w    jetstream.KeyWatcher
	stop context.CancelFunc
	done chan struct{}
	log  *slog.Logger

	mu     sync.Mutex
	limits map[string]Limits
}

// WatchPolicies loads the tenants' limits and follows their changes until
// Stop.
func WatchPolicies(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Policies, error) {
	kv, err := js.KeyValue(ctx, stream.TenantsBucket)
	if err != nil {
		return nil, fmt.Errorf("open tenant bucket %s (has relay set up the streams? run 'relay run' once): %w", stream.TenantsBucket, err)
	}
	wctx, stop := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		stop()
		return nil, fmt.Errorf("watch tenants: %w", err)
	}
	p := &Policies{w: w, stop: stop, done: make(chan struct{}), log: log, limits: map[string]Limits{}}
	load, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for loaded := false; !loaded; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				stop()
				return nil, fmt.Errorf("watch tenants: ended while loading")
			}
			if e == nil {
				loaded = true
				break
			}
			p.apply(e)
		case <-load.Done():
			_ = w.Stop()
			stop()
			return nil, fmt.Errorf("load tenants: %w", load.Err())
		}
	}
	go func() {
		defer close(p.done)
		for e := range w.Updates() {
			if e != nil {
				p.apply(e)
			}
		}
	}()
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
	if p == nil {
		return
	}
	_ = p.w.Stop()
	p.stop()
	<-p.done
}
