package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// loadWithin bounds FollowBucket's first load.
const loadWithin = time.Minute

// FollowBucket keeps a live copy of bucket: apply is called with each of
// its entries, first those stored (FollowBucket returns once they are all
// applied, or fails after a minute), then with every change, from one
// goroutine, until stop, which returns once the watch has ended. what
// names the bucket's records in errors ("tenants").
func FollowBucket(ctx context.Context, js jetstream.JetStream, bucket, what string, apply func(jetstream.KeyValueEntry)) (stop func(), err error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("open %s bucket %s (has relay set up the streams? run 'relay run' once): %w", what, bucket, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch %s: %w", what, err)
	}
	load, loaded := context.WithTimeout(ctx, loadWithin)
	defer loaded()
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				cancel()
				return nil, errors.New("watch " + what + ": ended while loading")
			}
			if e == nil {
				done = true
				break
			}
			apply(e)
		case <-load.Done():
			_ = w.Stop()
			cancel()
			return nil, fmt.Errorf("load %s: %w", what, load.Err())
		}
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for e := range w.Updates() {
			if e != nil {
				apply(e)
			}
		}
	}()
	return func() {
		_ = w.Stop()
		cancel()
		<-ended
	}, nil
}
