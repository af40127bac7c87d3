package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/publish"
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
	l := &lease.Lease{KV: kv, Key: id, ID: id, Now: r.cfg.Now,
		Holder: func([]byte) (string, error) { return id, nil }} // a key of its own
	record := func() []byte {
		rec, _ := json.Marshal(replicaRecord{At: r.cfg.Now().UTC(), NetPolicy: r.cfg.NetPolicy, AckWait: r.cfg.AckWait})
		return rec
	}
	warned := map[string]bool{}
	count := func(ctx context.Context) error {
		keys, err := kv.Keys(ctx)
		if err != nil {
			return nil
		}
		r.limits.mu.Lock()
		r.limits.replicas = max(len(keys), 1)
		r.limits.mu.Unlock()
		r.ackWait.Store(int64(r.shortestAckWait(ctx, kv, id, keys, warned)))
		return nil
	}
	for ctx.Err() == nil {
		if _, err := l.Acquire(ctx, func([]byte) ([]byte, error) { return record(), nil }, r.log.Warn); err != nil {
			break // ctx ended
		}
		_ = count(ctx)
		// It returns when ctx ends, or with errLeaseLost when the bucket
		// removed the key (this replica was silent for its TTL): announce
		// it again.
		if err := l.Keep(ctx, heartbeatEvery, record, count); errors.Is(err, lease.ErrLost) {
			r.log.Warn("this replica's record in the replicas bucket expired (it was silent for 15s); announcing it again", "replica", id)
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = kv.Delete(dctx, id)
	cancel()
}

// shortestAckWait returns the shortest AckWait of this replica and the
// live ones listed in keys. Replicas should all run with the same: each
// sets its own on the consumers it starts, so with different ones the
// consumers have the last one's, and a replica pinging its events at a
// third of a longer one would have them handed out again mid-attempt.
// Going by the shortest, the pings stay within whichever the consumers
// have. It warns once per replica that runs with another.
func (r *Relay) shortestAckWait(ctx context.Context, kv jetstream.KeyValue, self string, keys []string, warned map[string]bool) time.Duration {
	shortest := r.cfg.AckWait
	for _, k := range keys {
		if k == self {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // gone since it was listed
		}
		var rec replicaRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.AckWait <= 0 || rec.AckWait == r.cfg.AckWait {
			continue
		}
		shortest = min(shortest, rec.AckWait)
		if !warned[k] {
			warned[k] = true
			r.log.Warn("a live replica runs with another --ack-wait: give every replica the same; until then this one restarts the AckWait of the events it holds by the shorter, and an event may be delivered twice while the consumers change",
				"replica", k, "its_ack_wait", rec.AckWait, "ack_wait", r.cfg.AckWait)
		}
	}
	return shortest
}

// replicaID names this process in the replicas bucket.
func replicaID() string {
	return fmt.Sprintf("r-%s", publish.NewEventID()[4:])
}

// replicaRecord is a replica's entry in the replicas bucket.
type replicaRecord struct {
	At time.Time `json:"at"`
	// NetPolicy is absent for a relay that announces none (Config.NetPolicy
	// nil).
	NetPolicy *egress.Policy `json:"allow_net,omitempty"`
	// AckWait is the replica's Config.AckWait (absent before relay
	// announced it).
	AckWait time.Duration `json:"ack_wait,omitempty"`
}
