package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/relaydev/relay/stream"
)

// heartbeatEvery is how often a replica announces itself; a replica silent
// for the replicas bucket's TTL (3 heartbeats) no longer counts.
const heartbeatEvery = 5 * time.Second

// runRegistry announces this replica in the replicas bucket, under a lease
// of its own that the bucket's age limit removes when it is not renewed,
// and keeps the count of live replicas, which rate limits are divided by.
func (r *Relay) runRegistry(ctx context.Context, id string) {
	kv, err := r.cfg.JS.KeyValue(ctx, stream.ReplicasBucket)
	if err != nil {
		r.log.Warn("no replicas bucket: rate limits apply per replica", "err", err)
		return
	}
	l := &lease{kv: kv, key: id, id: id, now: r.cfg.Now,
		holder: func([]byte) (string, error) { return id, nil }} // a key of its own
	record := func() []byte {
		rec, _ := json.Marshal(replicaRecord{At: r.cfg.Now().UTC(), NetPolicy: r.cfg.NetPolicy})
		return rec
	}
	count := func(ctx context.Context) error {
		if keys, err := kv.Keys(ctx); err == nil {
			r.limits.mu.Lock()
			r.limits.replicas = max(len(keys), 1)
			r.limits.mu.Unlock()
		}
		return nil
	}
	for ctx.Err() == nil {
		if _, err := l.acquire(ctx, func([]byte) ([]byte, error) { return record(), nil }, r.log.Warn); err != nil {
			break // ctx ended
		}
		_ = count(ctx)
		// It returns when ctx ends, or with errLeaseLost when the bucket
		// removed the key (this replica was silent for its TTL): announce
		// it again.
		if err := l.keep(ctx, heartbeatEvery, record, count); errors.Is(err, errLeaseLost) {
			r.log.Warn("this replica's record in the replicas bucket expired (it was silent for 15s); announcing it again", "replica", id)
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = kv.Delete(dctx, id)
	cancel()
}

// replicaID names this process in the replicas bucket.
func replicaID() string {
	return fmt.Sprintf("r-%s", NewEventID()[4:])
}
