package main

import (
	"context"
	"time"

	"github.com/relaydev/relay/dlq"
)

// dlqListPolled is called each time 'dlq list --wait' found nothing and is
// about to look again (a test signal).
var dlqListPolled = func() {}

// listWaiting lists the dead letters f selects; with wait > 0 and none yet,
// it looks again every 200ms until one appears, wait has passed or ctx is
// done (then it returns the empty list: nothing matched meanwhile).
func listWaiting(ctx context.Context, st *dlq.Store, f dlq.Filter, limit int, wait time.Duration) ([]dlq.Letter, error) {
	deadline := time.Now().Add(wait)
	for {
		ls, err := st.List(ctx, f, limit)
		if err != nil || len(ls) > 0 || !time.Now().Before(deadline) {
			return ls, err
		}
		dlqListPolled()
		select {
		case <-ctx.Done():
			return ls, nil
		case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
		}
	}
}
