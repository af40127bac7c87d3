package schedule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/internal/failpoint"
	"github.com/relaydev/relay/stream"
)

// Promoter republishes parked entries when they are due. Every relay replica
// runs one; the claim lease keeps two from taking the same entry.
type Promoter struct {
	// Store is the Redis side. Required.
	Store *Store
	// JS publishes the due entries. Required.
	JS jetstream.JetStream
	// Lease is how long a claimed entry is reserved for its promoter. It
	// must be shorter than the events stream's duplicate window, so that an
	// entry republished by a promoter that then died is dropped as a
	// duplicate when the next promoter republishes it. Optional, default 30s.
	Lease time.Duration
	// Batch is the most entries claimed at once. Optional, default 1000.
	Batch int
	// Interval is how often the promoter looks for due entries. Optional,
	// default 200ms.
	Interval time.Duration
	// Now is the clock. Optional, default time.Now.
	Now func() time.Time
	// Logger. Optional, default slog.Default().
	Logger *slog.Logger
	// Seal seals the republished events as relay's own (see stream.Seal).
	// Optional, default the seal in JS's relay_state bucket (loaded by
	// Run once, by PromoteDue at each call).
	Seal *stream.Seal
	// TracerProvider makes a span (SpanPromote) per entry republished, a
	// child of the span whose context the entry carries (the park's), and
	// the republished event carries its context. Optional: nil traces
	// nothing.
	TracerProvider trace.TracerProvider
}

// SpanPromote is the span of a parked event republished when due.
const SpanPromote = "relay.promote"

// tracerName is the instrumentation scope of relay's spans (relay.TracerName).
const tracerName = "github.com/relaydev/relay"

// WithDefaults returns p with zero fields set to their defaults.
func (p Promoter) WithDefaults() Promoter {
	if p.Lease == 0 {
		p.Lease = 30 * time.Second
	}
	if p.Batch == 0 {
		p.Batch = 1000
	}
	if p.Interval == 0 {
		p.Interval = 200 * time.Millisecond
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	return p
}

// Run promotes due entries until ctx is cancelled.
func (p Promoter) Run(ctx context.Context) error {
	p = p.WithDefaults()
	if p.Store == nil || p.JS == nil {
		return errors.New("schedule: Promoter needs a Store and a JS")
	}
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	failing := false
	for {
		if p.Seal == nil {
			p.Seal, _ = stream.LoadSeal(ctx, p.JS) // else PromoteDue tries, and says why
		}
		n, err := p.PromoteDue(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				p.Logger.Warn("promoting parked events failed; they stay parked and are retried", "err", err)
			}
			failing = true
		case err == nil && failing:
			p.Logger.Info("promoting parked events works again")
			failing = false
		}
		if n > 0 {
			p.Logger.Debug("promoted parked events", "count", n)
		}
		if n >= p.Batch {
			continue // more may be due right now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// PromoteDue republishes the entries due now, one batch per destination, and
// returns how many it republished.
func (p Promoter) PromoteDue(ctx context.Context) (int, error) {
	p = p.WithDefaults()
	if p.Seal == nil {
		s, err := stream.LoadSeal(ctx, p.JS)
		if err != nil {
			return 0, err
		}
		p.Seal = s
	}
	dests, err := p.Store.Dests(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, d := range dests {
		n, err := p.promoteDest(ctx, d)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
		}
	}
	return total, errors.Join(errs...)
}

func (p Promoter) promoteDest(ctx context.Context, dest string) (int, error) {
	if err := stream.ValidateDestRef(dest); err != nil {
		return 0, fmt.Errorf("entries parked under a name no destination can have are left alone: %w", err)
	}
	claimed, err := p.Store.Claim(ctx, dest, p.Now(), p.Batch, p.Lease)
	if err != nil || len(claimed) == 0 {
		return 0, err
	}
	failpoint.Inject("promote-after-claim")
	futures := make([]jetstream.PubAckFuture, len(claimed))
	spans := p.startSpans(ctx, claimed)
	defer func() { // those the answers below did not end
		for _, s := range spans {
			if s != nil {
				s.SetStatus(codes.Error, "no answer to the publish")
				s.End()
			}
		}
	}()
	end := func(i int, err error) {
		if spans == nil {
			return
		}
		if err != nil {
			spans[i].SetStatus(codes.Error, err.Error())
		}
		spans[i].End()
		spans[i] = nil
	}
	var errs []error
	var aside []string // entries moved to the dead letters
	for i, c := range claimed {
		if c.Err != nil {
			if err := p.setAside(ctx, dest, c); err != nil {
				errs = append(errs, err)
			} else {
				aside = append(aside, c.Member)
			}
			continue
		}
		e := c.Entry
		if spans != nil {
			e.Headers = stream.WithTrace(trace.ContextWithSpan(ctx, spans[i]), e.Headers)
		}
		f, err := p.JS.PublishMsgAsync(e.Envelope().Msg(stream.Promoted, e.Subject, p.Seal))
		if err != nil {
			end(i, err)
			errs = append(errs, err)
			continue
		}
		futures[i] = f
	}
	done := make([]string, 0, len(claimed))
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
wait:
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			end(i, nil)
			done = append(done, claimed[i].Member)
		case err := <-f.Err():
			end(i, err)
			errs = append(errs, err)
		case <-timeout.C:
			errs = append(errs, errors.New("timed out waiting for publish acks"))
			break wait
		}
	}
	failpoint.Inject("promote-after-publish")
	// Entries whose publish failed keep their lease and are claimed again
	// after it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.Store.Remove(rctx, dest, append(done, aside...)); err != nil {
		errs = append(errs, fmt.Errorf("remove %d republished entries (they are republished again after the lease and dropped as duplicates): %w", len(done), err))
	}
	return len(done), errors.Join(errs...)
}

// startSpans starts, when p traces, the span of each entry of claimed that
// may be republished, a child of the context the entry carries; nil when p
// does not trace.
func (p Promoter) startSpans(ctx context.Context, claimed []Claimed) []trace.Span {
	if p.TracerProvider == nil {
		return nil
	}
	tracer := p.TracerProvider.Tracer(tracerName)
	spans := make([]trace.Span, len(claimed))
	for i, c := range claimed {
		if c.Err != nil {
			continue
		}
		e := c.Entry
		_, spans[i] = tracer.Start(stream.ExtractTrace(ctx, e.Headers), SpanPromote, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("relay.destination", e.Dest), attribute.String("relay.event_id", e.EventID),
				attribute.Int("relay.attempts_made", e.Attempts), attribute.String("messaging.destination.name", e.Subject),
				attribute.Int64("relay.late_ms", p.Now().Sub(e.Due).Milliseconds())))
	}
	return spans
}

// setAside moves a claimed entry that must not be republished (c.Err) to
// the dead letters, with reason dlq.ReasonCorruptParkedEntry and the entry
// as stored for its body, so that the rest of its batch goes on and an
// operator can see it. It is removed from Redis once the dead letter is
// stored (its dedup id comes from its member and bytes: a second write
// after a crash stores nothing twice).
func (p Promoter) setAside(ctx context.Context, dest string, c Claimed) error {
	sum := sha256.Sum256([]byte(c.Member + "\x00" + c.Raw))
	l := dlq.Letter{
		DeadAt:    p.Now().UTC(),
		Dest:      dest,
		EventID:   c.Entry.EventID,
		Reason:    dlq.ReasonCorruptParkedEntry,
		LastError: c.Err.Error(),
		Subject:   c.Entry.Subject,
		Body:      []byte(c.Raw),
		DedupID:   "dlq:" + dest + ":parked:" + hex.EncodeToString(sum[:16]),
	}
	if _, err := (dlq.Writer{JS: p.JS}).Write(ctx, l); err != nil {
		return fmt.Errorf("%w; moving it to the dead letters failed (it is tried again after the lease): %w", c.Err, err)
	}
	p.Logger.Error("parked entry refused: moved to the dead letters (reason "+dlq.ReasonCorruptParkedEntry+") and removed from Redis; the rest of its batch goes on",
		"dest", dest, "member", c.Member, "err", c.Err)
	return nil
}
