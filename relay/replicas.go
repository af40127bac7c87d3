package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/relaydev/relay/stream"
)

// heartbeatEvery is how often a replica announces itself; a replica silent
// for the replicas bucket's TTL (3 heartbeats) no longer counts.
const heartbeatEvery = 5 * time.Second

// runRegistry announces this replica in the replicas bucket and keeps the
// count of live replicas, which rate limits are divided by.
func (r *Relay) runRegistry(ctx context.Context, id string) {
	kv, err := r.cfg.JS.KeyValue(ctx, stream.ReplicasBucket)
	if err != nil {
		r.log.Warn("no replicas bucket: rate limits apply per replica", "err", err)
		return
	}
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		rec, _ := json.Marshal(replicaRecord{At: r.cfg.Now().UTC(), NetPolicy: r.cfg.NetPolicy})
		if _, err := kv.Put(ctx, id, rec); err == nil {
			if keys, err := kv.Keys(ctx); err == nil {
				r.limits.mu.Lock()
				r.limits.replicas = max(len(keys), 1)
				r.limits.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = kv.Delete(dctx, id)
			cancel()
			return
		case <-t.C:
		}
	}
}

// replicaID names this process in the replicas bucket.
func replicaID() string {
	return fmt.Sprintf("r-%s", NewEventID()[4:])
}
