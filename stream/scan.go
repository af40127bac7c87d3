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

const (
	// scanBatch is how many messages a Scan asks for at a time.
	scanBatch = 256
	// scanWait is the longest a Scan waits for the next message before it
	// starts again with a new consumer.
	scanWait = 5 * time.Second
	// scanRestarts is how often in a row a Scan starts again without
	// getting further before it gives up.
	scanRestarts = 5
)

// errScanGap: a Scan's consumer skipped a message (or went silent), and
// the Scan starts again after the last message it read.
var errScanGap = errors.New("the scan's consumer lost its place")

// Scan reads the messages of streamName on the given filter subjects (none:
// all) stored at or after since (zero: from the start), in stream order, up to
// the last message that was stored when Scan started. It stops early when fn
// returns an error (ErrStop: no error). The filters must not overlap.
//
// It reads through an ephemeral consumer without acks, with pull requests
// of its own, and deletes the consumer when it returns (or the server does
// 30s after a crash). If the consumer skips a message or goes silent, it
// starts again after the last message read, a few times. Until the ninth
// round it used a nats.go ordered consumer, which takes a message with an
// empty body and a Status header for a status of the pull protocol; it
// never got past one.
func Scan(ctx context.Context, js jetstream.JetStream, streamName string, filters []string, since time.Time, fn func(*jetstream.RawStreamMsg) error) error {
	st, err := js.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	last := st.CachedInfo().State.LastSeq
	var after uint64 // the last stream sequence read
	for restarts := 0; ; restarts++ {
		before := after
		cfg := jetstream.ConsumerConfig{
			Description:       "relay scan",
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			AckPolicy:         jetstream.AckNonePolicy,
			FilterSubjects:    filters,
			InactiveThreshold: 30 * time.Second,
			MemoryStorage:     true,
			Replicas:          1,
		}
		switch {
		case after > 0:
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = after + 1
		case !since.IsZero():
			cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
			cfg.OptStartTime = &since
		}
		err := scanWith(ctx, js, streamName, cfg, last, &after, fn)
		if !errors.Is(err, errScanGap) {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
		if after > before {
			restarts = 0 // got further: count again
		}
		if restarts == scanRestarts {
			return fmt.Errorf("read %s: started again %d times in a row after sequence %d: %w", streamName, restarts, after, err)
		}
	}
}

// scanWith reads through one consumer made with cfg, until the stream
// sequence last, recording in after the last sequence read.
func scanWith(ctx context.Context, js jetstream.JetStream, streamName string, cfg jetstream.ConsumerConfig, last uint64, after *uint64, fn func(*jetstream.RawStreamMsg) error) error {
	cons, err := js.CreateConsumer(ctx, streamName, cfg)
	if err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	info := cons.CachedInfo()
	defer func() {
		// Not with ctx: Scan may end because ctx did.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, streamName, info.Name) // else it goes after InactiveThreshold
	}()
	if info.NumPending == 0 {
		return nil
	}
	nc := js.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	subject := APIPrefix(js) + "CONSUMER.MSG.NEXT." + streamName + "." + info.Name
	req := fmt.Appendf(nil, `{"batch":%d,"expires":%d}`, scanBatch, scanWait.Nanoseconds())
	var cseq uint64 // the consumer sequence of the last message read
	for {
		if err := nc.PublishRequest(subject, inbox, req); err != nil {
			return fmt.Errorf("read %s: %w", streamName, err)
		}
		for asked := scanBatch; asked > 0; {
			wctx, cancel := context.WithTimeout(ctx, scanWait+time.Second)
			m, err := sub.NextMsgWithContext(wctx)
			cancel()
			if err != nil {
				if cerr := ctx.Err(); cerr != nil {
					return fmt.Errorf("read %s: %w", streamName, cerr)
				}
				return fmt.Errorf("%w: nothing came for %s", errScanGap, scanWait+time.Second) // start again
			}
			if m.Reply == "" {
				// A status: the request ended (408, 409), or none
				// answered it (503).
				if m.Header.Get("Status") == "100" {
					continue
				}
				if m.Header.Get("Status") != "408" {
					return fmt.Errorf("%w: status %s %s", errScanGap, m.Header.Get("Status"), m.Header.Get("Description"))
				}
				// The request expired: nothing came for a while. If
				// the consumer has nothing left (what it had was
				// deleted), the scan is done; else start again.
				ci, err := cons.Info(ctx)
				if err == nil && ci.NumPending == 0 {
					return nil
				}
				if err != nil {
					return fmt.Errorf("%w: a request expired, and the consumer's info: %w", errScanGap, err)
				}
				return fmt.Errorf("%w: a request expired with %d events left", errScanGap, ci.NumPending)
			}
			asked--
			meta, err := AckMetadata(m.Reply)
			if err != nil {
				return fmt.Errorf("read %s: %w", streamName, err)
			}
			if meta.Sequence.Consumer != cseq+1 {
				return fmt.Errorf("%w: consumer sequence %d after %d", errScanGap, meta.Sequence.Consumer, cseq)
			}
			cseq = meta.Sequence.Consumer
			if meta.Sequence.Stream > last {
				return nil // stored after the scan began
			}
			*after = meta.Sequence.Stream
			if err := fn(&jetstream.RawStreamMsg{Subject: m.Subject, Sequence: meta.Sequence.Stream, Header: m.Header, Data: m.Data, Time: meta.Timestamp}); err != nil {
				return err
			}
			if meta.NumPending == 0 || meta.Sequence.Stream == last {
				return nil
			}
		}
	}
}
