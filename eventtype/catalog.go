package eventtype

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Catalog is a live copy of the catalog's schemas, kept by a watch of its
// bucket: what checks events as they are published over HTTP and as they
// are routed. A nil *Catalog checks nothing.
type Catalog struct {
	stop func()
	log  *slog.Logger

	mu      sync.Mutex
	schemas map[string]*Schema
	rev     uint64
	moved   chan struct{} // closed when rev moves
}

// WatchCatalog loads the catalog and keeps it up to date until Stop.
func WatchCatalog(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Catalog, error) {
	c := &Catalog{log: log, schemas: map[string]*Schema{}, moved: make(chan struct{})}
	stop, err := stream.FollowBucket(ctx, js, stream.EventTypesBucket, "event types", c.apply)
	if err != nil {
		return nil, err
	}
	c.stop = stop
	return c, nil
}

// apply takes in an entry of the bucket.
func (c *Catalog) apply(e jetstream.KeyValueEntry) {
	var s *Schema
	if e.Operation() == jetstream.KeyValuePut {
		var t EventType
		err := json.Unmarshal(e.Value(), &t)
		if err == nil {
			s, err = t.compile()
		}
		if err != nil {
			// Stored by another version, or by hand: its events are
			// accepted unchecked until it is fixed.
			c.log.Error("event type stored invalid: its events are not checked until it is fixed ('relay event-type put')", "type", e.Key(), "err", err)
			s = nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == nil {
		delete(c.schemas, e.Key())
	} else {
		c.schemas[e.Key()] = s
	}
	if e.Revision() > c.rev {
		c.rev = e.Revision()
		close(c.moved)
		c.moved = make(chan struct{})
	}
}

// Check checks body, an event of type typ, against its type's schema: a
// *Mismatch when it does not satisfy it; nil when it does, when the type
// has no schema, or when the type is not in the catalog.
func (c *Catalog) Check(typ string, body []byte) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	s := c.schemas[typ]
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Check(body)
}

// WaitRev waits until the change at revision rev of the bucket, or a later
// one, is applied.
func (c *Catalog) WaitRev(ctx context.Context, rev uint64) error {
	for {
		c.mu.Lock()
		if c.rev >= rev {
			c.mu.Unlock()
			return nil
		}
		moved := c.moved
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-moved:
		}
	}
}

// Stop ends the watch.
func (c *Catalog) Stop() {
	if c != nil {
		c.stop()
	}
}
