// Package routing copies typed events to the destinations subscribed to
// their type (RunRouter), and dead-letters events of destinations that do
// not exist (RunCheck): each the work of one replica at a time, under a
// lease (internal/lease). The engine gives each what it needs in a Config.
package routing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/stream"
)

// The router: fan-out of typed events.
//
// An event published by type (relay.type.T) goes to every destination
// subscribed to T. One replica at a time (it holds the lease RouterKey in
// the relay_state bucket, as the unknown-destination check holds its own)
// reads the typed events in stream order and publishes, for each
// destination subscribed to the event's type when it was stored, a copy to
// relay.in.D (relay.in.D.K with an order key): from there on a copy is an
// event of its destination like any other, with its own attempts, backoff,
// parking, dead letters, breaker, rate limit and order. Each copy carries
// the event's id (webhook-id is the same for every destination), its type
// and publish time, and the dedup id route:<seq>:<dest>, so that the
// copies a crashed router had published are stored once when its successor
// publishes them again from the sequence the lease recorded. Shared
// destinations get no copy: one fan-out message names up to
// stream.FanChunk of them (see fan.go).
//
// A change of a destination's subscriptions is marked in the events stream
// (relay.sub.<dest>): the router reads the marks among the typed events, and
// at each waits until this replica has applied the change it marks, so
// that every typed event goes by the subscriptions in force when it was
// stored.
//
// Copies are published in the typed events' order, a window of them
// unconfirmed at a time; the lease records a sequence only once every copy
// up to it is confirmed. When a publish fails, the router starts again
// from the first unconfirmed event.

// Key is the relay_state key of the router.
const Key = "router"

// State is the value of RouterKey.
type State struct {
	// Holder is the replica routing; empty when released.
	Holder string `json:"holder,omitempty"`
	// Routed is the stream sequence up to which every typed event is
	// routed.
	Routed uint64 `json:"routed"`
	// Stream is when the events stream Routed counts in was created.
	Stream time.Time `json:"stream_created"`
	// Events, Copies and Unsubscribed count the typed events routed, the
	// copies written, and the typed events no destination subscribed to,
	// since the stream was created (events routed again after a crash
	// count again).
	Events       uint64 `json:"events"`
	Copies       uint64 `json:"copies"`
	Unsubscribed uint64 `json:"unsubscribed"`
}

func decodeRouterState(b []byte) (State, error) {
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("%s/%s holds %q, not a router state: %w", stream.StateBucket, Key, b, err)
	}
	return st, nil
}

// ReadState returns the router's state, and false when no relay has
// Routed yet.
func ReadState(ctx context.Context, js jetstream.JetStream) (State, bool, error) {
	kv, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return State{}, false, fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	e, err := kv.Get(ctx, Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read %s/%s: %w", stream.StateBucket, Key, err)
	}
	st, err := decodeRouterState(e.Value())
	return st, err == nil, err
}

// Lag is how many typed events the router has not routed yet.
func Lag(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, _, err := ReadState(ctx, js)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", stream.EventsStream, err)
	}
	routed := st.Routed
	if !st.Stream.Equal(s.CachedInfo().Created) {
		routed = 0
	}
	return destination.CountAfter(ctx, js, []string{stream.TypeFilter(">"), stream.TenantTypeFilter}, routed)
}

// routerWindow is how many typed events may have copies unconfirmed, and
// routerCopies how many copies (an event with more subscribers goes alone).
// The router's publishing context allows routerMaxPending unconfirmed
// publishes: above it nats.go stalls and fails them.
const (
	routerWindow = 256
	routerCopies = 4096
	MaxPending   = 16384
)

// copyWindow counts the copies published and not confirmed yet.
type copyWindow struct {
	mu    sync.Mutex
	n     int
	freed chan struct{}
}

// acquire waits until k more copies may be published: when fewer than
// routerCopies would be unconfirmed, or none is.
func (w *copyWindow) acquire(ctx context.Context, k int) error {
	for {
		w.mu.Lock()
		if w.n == 0 || w.n+k <= routerCopies {
			w.n += k
			w.mu.Unlock()
			return nil
		}
		if w.freed == nil {
			w.freed = make(chan struct{})
		}
		freed := w.freed
		w.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release records k copies confirmed (or given up).
func (w *copyWindow) release(k int) {
	w.mu.Lock()
	w.n -= k
	if w.freed != nil {
		close(w.freed)
		w.freed = nil
	}
	w.mu.Unlock()
}

// noCounters counts nothing (a config without Metrics).
type noCounters struct{}

func (noCounters) RoutedCopies(int)     {}
func (noCounters) RoutedNone()          {}
func (noCounters) CheckedListed(uint64) {}
func (noCounters) CheckedRead()         {}

// RouterConfig is what the router needs of the engine. JS, ID, Store,
// Dests and Log are required; the rest is optional.
type RouterConfig struct {
	JS jetstream.JetStream
	// ID is this replica's.
	ID    string
	Store *destination.Store
	// Dests is the engine's live copy of the destinations.
	Dests *destination.Watch
	// Seal seals the copies (see stream.Seal).
	Seal     *stream.Seal
	Log      *slog.Logger
	Now      func() time.Time
	Takeover time.Duration
	Metrics  RouterCounters
	// Recorded is called with each typed event's routing once its copies
	// are confirmed (the engine records it in the delivery log).
	Recorded func(Routed)
	// TooLarge dead-letters the copy of p for dest, which the events
	// stream refused as too large.
	TooLarge func(ctx context.Context, p Routed, dest string, cause error)
	// Catalog checks each typed event against its type's schema; nil
	// checks nothing. An event that does not satisfy it is not copied:
	// Mismatched dead-letters it for each subscriber, with why (an
	// *eventtype.Mismatch).
	Catalog    *eventtype.Catalog
	Mismatched func(ctx context.Context, p Routed, dest string, cause error)
	// Written, if set, is called with the router's state each time it is
	// written to relay_state (tests wait for it).
	Written func(State)
}

// RunRouter takes part in routing until ctx ends.
func RunRouter(ctx context.Context, cfg RouterConfig) {
	if cfg.Metrics == nil {
		cfg.Metrics = noCounters{}
	}
	if cfg.Recorded == nil {
		cfg.Recorded = func(Routed) {}
	}
	if cfg.TooLarge == nil {
		cfg.TooLarge = func(_ context.Context, p Routed, dest string, cause error) {
			cfg.Log.Error("a typed event too large to copy; it is not delivered to this destination", "dest", dest, "event_id", p.Envelope.ID, "seq", p.Seq, "err", cause)
		}
	}
	if cfg.Mismatched == nil {
		cfg.Mismatched = func(_ context.Context, p Routed, dest string, cause error) {
			cfg.Log.Error("a typed event does not satisfy its type's schema; it is not delivered", "dest", dest, "event_id", p.Envelope.ID, "seq", p.Seq, "err", cause)
		}
	}
	ro := &router{js: cfg.JS, store: cfg.Store, dests: cfg.Dests, seal: cfg.Seal, recorded: cfg.Recorded, metrics: cfg.Metrics, tooLarge: cfg.TooLarge,
		catalog: cfg.Catalog, mismatched: cfg.Mismatched, id: cfg.ID, log: cfg.Log, now: cfg.Now}
	var err error
	ro.pub, err = stream.AsyncPublisher(cfg.JS, MaxPending)
	if err != nil {
		cfg.Log.Error("router not started: typed events are not copied to their subscribers", "err", err)
		return
	}
	lease.Run(ctx, cfg.JS, lease.Config{Name: "the router (typed events are not copied to their subscribers meanwhile)", Key: Key,
		ID: cfg.ID, Takeover: cfg.Takeover, Now: cfg.Now, Log: cfg.Log}, lease.Job[State](&routerJob{ro: ro, written: cfg.Written}))
}

// router is one replica's part in routing typed events.
type router struct {
	js     jetstream.JetStream
	pub    jetstream.JetStream // publishes copies, with room for routerMaxPending
	window copyWindow
	store  *destination.Store
	dests  *destination.Watch
	seal   *stream.Seal
	// recorded is called with each typed event's routing once its copies
	// are confirmed (the engine records it in the delivery log).
	recorded func(Routed)
	metrics  RouterCounters
	// tooLarge dead-letters the copy of p for dest, which the events
	// stream refused as too large.
	tooLarge func(ctx context.Context, p Routed, dest string, cause error)
	// catalog and mismatched: RouterConfig's Catalog and Mismatched.
	catalog    *eventtype.Catalog
	mismatched func(ctx context.Context, p Routed, dest string, cause error)
	id         string
	log        *slog.Logger
	now        func() time.Time

	// cache maps a tenant and a type (cacheKey) to the destinations
	// subscribed to it, and byTenant a tenant to its destinations, for the
	// destinations' generation gen.
	mu       sync.Mutex
	gen      uint64
	cache    map[string][]destination.Destination
	byTenant map[string][]destination.Destination
}

// cacheKey is the router's cache key of typ published for tenant.
func cacheKey(tenant, typ string) string { return tenant + "\x00" + typ }

// RouterCounters count the router's work (relay's Metrics do).
type RouterCounters interface {
	// RoutedCopies counts n copies of a typed event written.
	RoutedCopies(n int)
	// RoutedNone counts a typed event no destination subscribed to.
	RoutedNone()
}

// Routed is one typed event's copies waiting for their confirmations.
type Routed struct {
	Seq      uint64
	pubs     []routedPub
	Dests    []string // every subscriber
	Envelope stream.Envelope
}

// routedPub is one publish of a typed event's routing: a copy for one
// destination, or a fan-out message for shared ones (fanned).
type routedPub struct {
	f      jetstream.PubAckFuture
	dests  []string
	fanned bool
}

// routerJob is routing as a leased job: its lease value is a RouterState.
type routerJob struct {
	ro      *router
	written func(State)
	mu      sync.Mutex // guards st
	st      State
}

func (j *routerJob) Holder(st State) string { return st.Holder }

func (j *routerJob) Written(st State) {
	if j.written != nil {
		j.written(st)
	}
}

func (j *routerJob) Take(old *State, created time.Time) (State, error) {
	next := State{Stream: created}
	if old != nil {
		if old.Stream.Equal(created) {
			next = *old
		} else {
			j.ro.log.Warn("the events stream was created again since the router last ran: routing it from the start", "stream", stream.EventsStream, "routed_seq_before", old.Routed)
		}
	}
	next.Holder, next.Stream = j.ro.id, created
	j.mu.Lock()
	j.st = next
	j.mu.Unlock()
	return next, nil
}

func (j *routerJob) Progress(holder string) State {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := j.st
	v.Holder = holder
	return v
}

func (j *routerJob) Work(ctx context.Context) error {
	j.mu.Lock()
	from := j.st.Routed
	j.mu.Unlock()
	return j.ro.route(ctx, from, func(p Routed) {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.st.Routed = p.Seq
		j.st.Events++
		j.st.Copies += uint64(len(p.Dests))
		if len(p.Dests) == 0 {
			j.st.Unsubscribed++
		}
	})
}

// route routes the typed events stored after sequence from until ctx ends
// or a copy cannot be stored, calling done for each event, in order, once
// its copies are confirmed.
func (ro *router) route(ctx context.Context, from uint64, done func(Routed)) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// Confirmations are awaited in order by a goroutine of their own; a
	// failure stops the read.
	pending := make(chan Routed, routerWindow)
	var failed error
	confirmed := make(chan struct{})
	go func() {
		defer close(confirmed)
		for p := range pending {
			if err := ro.confirm(ctx, p); err != nil {
				failed = err
				stop()
				for p := range pending { // drain: the read stops at once
					ro.window.release(len(p.pubs))
				}
				return
			}
			ro.recorded(p)
			done(p)
		}
	}()
	err := stream.Read(ctx, ro.js, stream.EventsStream, stream.ReadOptions{After: from, Follow: true,
		Filters: []string{stream.TypeFilter(">"), stream.TenantTypeFilter, stream.SubPrefix + ".*"}, Description: "relay router"},
		func(m *jetstream.RawStreamMsg) error {
			if dest, ok := stream.SubMarkDest(m.Subject); ok {
				return ro.awaitChange(ctx, dest, m.Sequence)
			}
			p, err := ro.copy(ctx, m)
			if err != nil {
				return err
			}
			select {
			case pending <- p:
				return nil
			case <-ctx.Done():
				ro.window.release(len(p.pubs))
				return ctx.Err()
			}
		})
	close(pending)
	<-confirmed
	if failed != nil && !errors.Is(failed, context.Canceled) {
		return failed
	}
	return err
}

// markWait is how long the router waits at a subscription mark for the
// change it marks to be stored. A mark without a change (the change was
// refused after the mark, or its writer died) is passed after it.
const markWait = 5 * time.Second

// awaitChange waits, at the mark at sequence seq of a change of dest's
// subscriptions, until this replica has applied the change: the typed
// events after the mark go by it (see stream.SubPrefix).
func (ro *router) awaitChange(ctx context.Context, dest string, seq uint64) error {
	for wait, deadline := 10*time.Millisecond, ro.now().Add(markWait); ; wait = min(2*wait, 500*time.Millisecond) {
		if rev, marked, err := ro.store.MarkedAt(ctx, dest, seq); err == nil && marked {
			return ro.dests.WaitRev(ctx, rev)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ro.now().After(deadline) {
			ro.log.Debug("a subscription mark without its change: passed", "dest", dest, "seq", seq)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// subscribers returns the destinations of tenant ("" for those of no
// tenant) subscribed to typ when the event stored at seq was stored.
func (ro *router) subscribers(tenant, typ string, seq uint64) []string {
	var ds []destination.Destination
	ro.dests.View(func(gen uint64, dests map[string]destination.Destination) {
		ro.mu.Lock()
		defer ro.mu.Unlock()
		if ro.gen != gen || ro.cache == nil {
			ro.gen, ro.cache, ro.byTenant = gen, map[string][]destination.Destination{}, map[string][]destination.Destination{}
			for _, d := range dests {
				ro.byTenant[d.Tenant()] = append(ro.byTenant[d.Tenant()], d)
			}
		}
		var ok bool
		if ds, ok = ro.cache[cacheKey(tenant, typ)]; ok {
			return
		}
		// Those of tenant with a pattern, current or ended, that matches
		// typ.
		for _, d := range ro.byTenant[tenant] {
			match := len(d.Subscriptions) == 0 && d.Subscribed(typ, ^uint64(0))
			for _, s := range d.Subscriptions {
				match = match || stream.TypeMatches(s.Pattern, typ)
			}
			if match {
				ds = append(ds, d)
			}
		}
		ro.cache[cacheKey(tenant, typ)] = ds
	})
	var out []string
	for _, d := range ds {
		if d.Subscribed(typ, seq) {
			out = append(out, d.Name)
		}
	}
	return out
}

// copy publishes m's copies, unconfirmed.
func (ro *router) copy(ctx context.Context, m *jetstream.RawStreamMsg) (Routed, error) {
	ev, err := stream.DecodeTyped(m.Subject, m.Sequence, m.Time, m.Header, m.Data)
	if err != nil {
		return Routed{Seq: m.Sequence}, nil // not a typed event: nothing to route
	}
	p := Routed{Seq: m.Sequence, Envelope: ev}
	if stream.ValidTypeName(ev.Type) != nil || stream.Spoofed(ev.Type) {
		// A type whose first token is relay in another case is a producer's
		// imitation of relay's own: relay publishes its own in lower case.
		ro.log.Warn("typed event with an invalid type (or one like relay's own in another case) not routed", "subject", m.Subject, "seq", m.Sequence)
		ro.metrics.RoutedNone()
		return p, nil
	}
	tenant, _, _ := stream.TypedTarget(m.Subject)
	p.Dests = ro.subscribers(tenant, ev.Type, m.Sequence)
	if len(p.Dests) == 0 {
		ro.metrics.RoutedNone()
		return p, nil
	}
	if err := ro.catalog.Check(ev.Type, ev.Body); err != nil {
		// Not copied: each subscriber has a dead letter saying why
		// (schema_mismatch), to replay once the schema or the producer is
		// fixed. The routing records no subscriber.
		for _, d := range p.Dests {
			ro.mismatched(ctx, p, d, err)
		}
		p.Dests = nil
		return p, nil
	}
	// Shared destinations get one fan-out message for up to
	// stream.FanChunk of them, which the shared consumer delivers to each;
	// the others a copy each.
	var own, shared []string
	for _, name := range p.Dests {
		if d, ok := ro.dests.Get(name); ok && d.Shared {
			shared = append(shared, name)
		} else {
			own = append(own, name)
		}
	}
	npubs := len(own) + (len(shared)+stream.FanChunk-1)/stream.FanChunk
	if err := ro.window.acquire(ctx, npubs); err != nil {
		return p, err
	}
	fail := func(what string, err error) (Routed, error) {
		// Not confirmed: routing starts again from before this event.
		ro.window.release(npubs)
		return p, fmt.Errorf("copy typed event %d for %s: %w", m.Sequence, what, err)
	}
	for _, d := range own {
		c := ev
		c.Dest = d
		f, err := ro.pub.PublishMsgAsync(c.Msg(stream.Routed, stream.InSubject(d, ev.Key), ro.seal))
		if err != nil {
			return fail(d, err)
		}
		p.pubs = append(p.pubs, routedPub{f: f, dests: []string{d}})
	}
	// Sorted, so that routing the event again (after a failed publish, or
	// by another replica) makes the same chunks, with the same dedup ids.
	slices.Sort(shared)
	for chunk := range slices.Chunk(shared, stream.FanChunk) {
		f, err := ro.pub.PublishMsgAsync(fanMsg(ev, chunk, ro.seal))
		if err != nil {
			return fail(strings.Join(chunk, ","), err)
		}
		p.pubs = append(p.pubs, routedPub{f: f, dests: chunk, fanned: true})
	}
	ro.metrics.RoutedCopies(len(p.Dests))
	return p, nil
}

// fanMsg is typed event ev's fan-out message to the shared destinations
// dests, sealed with seal. Its dedup id names them all (a hash): the same
// event routed again to other destinations is not dropped as a duplicate.
func fanMsg(ev stream.Envelope, dests []string, seal *stream.Seal) *nats.Msg {
	c := ev
	h := fnv.New64a()
	for _, d := range dests {
		h.Write([]byte(d))
		h.Write([]byte{','})
	}
	c.Dest, c.Dests = strconv.FormatUint(h.Sum64(), 36), dests
	return c.Msg(stream.Fanned, stream.FanSubject, seal)
}

// confirm waits for p's copies to be stored. A copy refused for good (too
// large once relay's headers are added) is dead-lettered for its
// destination (a fan-out message refused so is sent as a copy for each);
// any other failure is returned.
func (ro *router) confirm(ctx context.Context, p Routed) error {
	defer ro.window.release(len(p.pubs))
	for _, pub := range p.pubs {
		select {
		case <-pub.f.Ok():
		case err := <-pub.f.Err():
			if !tooLarge(err) {
				return fmt.Errorf("copy typed event %d for %s: %w", p.Seq, strings.Join(pub.dests, ","), err)
			}
			if !pub.fanned {
				ro.tooLarge(ctx, p, pub.dests[0], err)
				continue
			}
			for _, d := range pub.dests {
				c := p.Envelope
				c.Dest = d
				_, err := ro.pub.PublishMsg(ctx, c.Msg(stream.Routed, stream.InSubject(d, p.Envelope.Key), ro.seal))
				switch {
				case tooLarge(err):
					ro.tooLarge(ctx, p, d, err)
				case err != nil:
					return fmt.Errorf("copy typed event %d for %s: %w", p.Seq, d, err)
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// tooLarge reports whether err is the events stream's refusal of a message
// over its size limit.
func tooLarge(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}
