package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrStop ends a Scan early without an error.
var ErrStop = errors.New("stop scanning")

// Scan reads the messages of streamName on the given filter subjects (none:
// all) stored at or after since (zero: from the start), in stream order, up to
// the last message that was stored when Scan started. It stops early when fn
// returns an error (ErrStop: no error).
func Scan(ctx context.Context, js jetstream.JetStream, streamName string, filters []string, since time.Time, fn func(jetstream.Msg) error) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// Deleted when Scan returns; this is for a process that dies
		// first (the client's default is 5 minutes).
		InactiveThreshold: 30 * time.Second,
		// The client recreates the consumer for every Fetch (and deletes
		// the one before in the background); if that keeps failing, Scan
		// ends with an error rather than retry for ever.
		MaxResetAttempts: 5,
	}
	if !since.IsZero() {
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &since
	}
	st, err := js.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	last := st.CachedInfo().State.LastSeq
	c, err := js.OrderedConsumer(ctx, streamName, cfg)
	if err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	defer func() {
		// The current consumer; the client deletes those before it. Not
		// with ctx: Scan may end because ctx did.
		if info := c.CachedInfo(); info != nil && info.Name != "" {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = js.DeleteConsumer(dctx, streamName, info.Name) // else it goes after InactiveThreshold
		}
	}()
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	left := info.NumPending
	for left > 0 {
		batch, err := c.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("read %s: %w", streamName, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if meta.Sequence.Stream > last {
				return nil // stored after the scan began
			}
			if err := fn(m); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
			left = meta.NumPending
			if left == 0 || meta.Sequence.Stream == last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("read %s: %w", streamName, err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			// Messages may have expired or been deleted under us.
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			left = info.NumPending
		}
	}
	return nil
}
