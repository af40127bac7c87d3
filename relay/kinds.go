package relay

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/publish"
)

// publisherIdle is how long a destination's publisher stays open unused.
const publisherIdle = time.Minute

// publishers keeps one open publisher per non-HTTP destination, for its
// configuration: a new configuration opens a new one, and the old one is
// closed once its last attempt ends. A publisher unused for publisherIdle
// is closed (sweep), as are all at stop (closeAll).
type publishers struct {
	env kind.Env
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	m  map[string]*openPublisher // by destination name
	// closing counts the closes under way, which closeAll waits for.
	closing sync.WaitGroup
}

type openPublisher struct {
	pub     kind.Publisher
	version [sha256.Size]byte // of the kind and configuration it was opened with
	updated time.Time         // the destination's version it was opened for
	inUse   int
	last    time.Time
	retired bool // replaced or swept: closed when inUse drops to 0
}

// configVersion tells configurations apart without keeping them.
func configVersion(d destination.Destination) [sha256.Size]byte {
	c := d.KindConfig()
	h := sha256.New()
	h.Write([]byte(d.Kind))
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(h, "\x00%s\x00%d:%s", k, len(c[k]), c[k])
	}
	var v [sha256.Size]byte
	h.Sum(v[:0])
	return v
}

// get returns d's publisher, opened if need be, and the function that
// gives it back when the attempt ends.
func (p *publishers) get(d destination.Destination) (kind.Publisher, func(), error) {
	v := configVersion(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	op := p.m[d.Name]
	if op == nil || op.version != v {
		k, ok := kind.Lookup(d.Kind)
		if !ok {
			return nil, nil, fmt.Errorf("unknown destination kind %q", d.Kind)
		}
		// An attempt that took its copy of the destination before a change
		// (handed back, waiting for its rate limit) must not take the
		// publisher from the newer configuration's attempts: it gets one of
		// its own, closed when it ends.
		stale := op != nil && d.Updated.Before(op.updated)
		env := p.env
		if dial := env.Dial; dial != nil {
			// Connections the library opens in the background carry the
			// destination too: --no-proxy dest:... and tenant:... match.
			env.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dial(egress.ForDestination(ctx, d.Name), network, addr)
			}
		}
		pub, err := k.Open(d.KindConfig(), env)
		if err != nil {
			return nil, nil, err
		}
		if stale {
			once := &openPublisher{pub: pub, version: v, updated: d.Updated, inUse: 1, retired: true}
			return pub, func() { p.release(d.Name, once) }, nil
		}
		if op != nil {
			p.retire(d.Name, op)
		}
		op = &openPublisher{pub: pub, version: v, updated: d.Updated}
		p.m[d.Name] = op
	}
	op.inUse++
	op.last = p.now()
	return op.pub, func() { p.release(d.Name, op) }, nil
}

// release gives op back at the end of an attempt: closed if it was
// retired meanwhile and no other attempt uses it.
func (p *publishers) release(dest string, op *openPublisher) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op.inUse--
	op.last = p.now()
	if op.retired && op.inUse == 0 {
		p.closeLater(dest, op)
	}
}

// retire takes op out of use; it is closed now if no attempt uses it, else
// when the last one ends. p.mu is held.
func (p *publishers) retire(dest string, op *openPublisher) {
	op.retired = true
	if op.inUse == 0 {
		p.closeLater(dest, op)
	}
}

// closeLater closes op without holding up the caller (a Close may wait for
// the target); closeAll waits for it. p.mu is held.
func (p *publishers) closeLater(dest string, op *openPublisher) {
	p.closing.Go(func() { p.close(dest, op) })
}

func (p *publishers) close(dest string, op *openPublisher) {
	if err := op.pub.Close(); err != nil {
		p.log.Warn("closing a destination's publisher failed", "dest", dest, "err", err)
	}
}

// sweep closes the publishers unused for publisherIdle, and those of
// destinations that are gone (keep says which are known).
func (p *publishers) sweep(keep func(dest string) bool) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, op := range p.m {
		if op.inUse == 0 && now.Sub(op.last) >= publisherIdle || !keep(name) {
			delete(p.m, name)
			p.retire(name, op)
		}
	}
}

// closeAll closes every publisher, once no attempt runs (at stop).
func (p *publishers) closeAll() {
	p.mu.Lock()
	ops := p.m
	p.m = map[string]*openPublisher{}
	p.mu.Unlock()
	for name, op := range ops {
		p.close(name, op)
	}
	p.closing.Wait()
}

// publish makes one attempt to deliver ev to d, a destination of a
// non-HTTP kind, through its publisher, and turns the kind's answer into
// a Result: Delivered when the target confirmed, Permanent when the kind
// says no retry can succeed.
func (r *Relay) publish(ctx context.Context, d destination.Destination, ev Delivery) Result {
	if err := publish.ValidateEventID(ev.ID); err != nil {
		return Result{Err: &InvalidEventError{Header: "webhook-id", Err: fmt.Errorf("header %q: %w", "webhook-id", err)}}
	}
	now := r.cfg.Now()
	ts := now.Unix()
	sig, err := signature(d, ev, ts, now)
	if err != nil {
		return Result{Err: err}
	}
	pub, release, err := r.kinds.get(d)
	if err != nil {
		// Validated when stored: this is a configuration a relay of
		// another version took, or one whose kind cannot start here.
		return Result{Err: fmt.Errorf("%s: cannot open a publisher: %w", d.Kind, err), Permanent: true, Duration: r.cfg.Now().Sub(now)}
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(d.Timeout))
	defer cancel()
	ctx = egress.ForDestination(ctx, d.Name)
	a := pub.Publish(ctx, kind.Message{
		ID: ev.ID, Type: ev.Type, Tenant: d.Tenant(), Dest: d.Name, Key: ev.Key,
		Body: ev.Body, ContentType: contentType(ev), Timestamp: ts, Signature: sig, Attempt: ev.Attempt,
	})
	res := Result{Duration: r.cfg.Now().Sub(now), Code: a.Code}
	if a.Err == nil {
		res.Delivered = true
		if a.Detail != "" && r.sender.KeepBody > 0 {
			res.Body = []byte(a.Detail[:min(len(a.Detail), r.sender.KeepBody)])
		}
		return res
	}
	msg := a.Err.Error()
	if a.Code != "" && !strings.Contains(msg, a.Code) {
		msg = a.Code + ": " + msg
	}
	res.Err = fmt.Errorf("%s: %s", d.Kind, msg)
	if !a.Permanent && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.Err = fmt.Errorf("timeout after %s: %w", time.Duration(d.Timeout), res.Err)
	}
	var be *egress.BlockedError
	var pe *egress.ProxyError
	res.Blocked = errors.As(a.Err, &be)
	// As for HTTP: the egress proxy's failure is not the target's
	// (Decide hands the event back without an attempt).
	res.ProxyFailed = errors.As(a.Err, &pe)
	res.Permanent = a.Permanent
	if a.RetryAfter > 0 {
		res.RetryAfter, res.HasRetryAfter = a.RetryAfter, true
	}
	return res
}

// contentType is the Content-Type ev is sent with: its template's, the
// event's own, or application/json.
func contentType(ev Delivery) string {
	if ev.ContentType != "" {
		return ev.ContentType
	}
	for k, vs := range ev.Headers {
		if strings.EqualFold(k, "Content-Type") && len(vs) > 0 && vs[0] != "" {
			return vs[0]
		}
	}
	return "application/json"
}
