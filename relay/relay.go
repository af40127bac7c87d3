// Package relay is the delivery engine: it pulls events from JetStream,
// delivers them over HTTP, and decides per attempt whether to acknowledge,
// retry after a delay, or dead-letter.
package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/internal/quiet"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/tenant"
)

// Config configures a relay runner.
type Config struct {
	// JS is the JetStream context. Required; stream.Ensure must have run.
	JS jetstream.JetStream
	// Logger receives one line per attempt outcome. Optional, default
	// slog.Default().
	Logger *slog.Logger
	// HTTPClient's Transport makes the deliveries (the client's redirect
	// policy, cookie jar and timeout are not used; see Sender). Optional,
	// default NewHTTPClient(HTTPOptions{}): non-public addresses refused.
	HTTPClient *http.Client
	// Dial opens the connections of the publishers of non-HTTP kinds
	// (kind.Env), and KindHTTPClient makes the requests of those whose
	// client speaks HTTP: both keep the address guard and the egress
	// proxy, as HTTPClient does. Optional, default
	// egress.NewDialer(egress.Options{}) and HTTPClient.
	Dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	KindHTTPClient *http.Client
	// ShutdownGrace is how long in-flight deliveries may take to finish once
	// Run's context is cancelled; what is still running then is cancelled and
	// handed back to JetStream. Optional, default 10s.
	ShutdownGrace time.Duration
	// MaxAckPending caps the events of one destination that are in flight or
	// waiting for a retry in JetStream. Optional, default 10000.
	MaxAckPending int
	// Now is the clock. Optional, default time.Now.
	Now func() time.Time
	// SecretKey decrypts (and encrypts) destination secrets at rest.
	// Optional: without it secrets are stored as they are.
	SecretKey []byte
	// PreviousSecretKeys open secrets sealed before a key rotation, until
	// 'relay dest rekey' has sealed them with SecretKey. Optional.
	PreviousSecretKeys [][]byte
	// Schedule parks long waits in Redis. Optional: without it every wait is
	// a delayed nak in JetStream.
	Schedule *schedule.Store
	// ParkThreshold is the shortest wait that is parked in Redis rather than
	// held by a delayed nak. Optional, default 60s.
	ParkThreshold time.Duration
	// Metrics records delivery metrics. Optional.
	Metrics *Metrics
	// CheckTakeover is how long the replica doing the unknown-destination
	// check may go without renewing its lease before another replica takes
	// the check over. Optional, default 10s.
	CheckTakeover time.Duration
	// NetPolicy is the address policy HTTPClient enforces, announced to
	// the other replicas with this one's heartbeat (see NetPolicy).
	// Optional: nil announces none.
	NetPolicy *egress.Policy
	// URLCooldown is how long a URL of a destination's pool is avoided
	// after consecutive failed attempts to it; it doubles with each
	// consecutive cool-down, up to 8 times. Optional, default 30s.
	URLCooldown time.Duration
	// MaxInFlight bounds the attempts one replica makes at once, all
	// destinations together (each also by its concurrency), so that the
	// goroutines, sockets and response buffers of a replica stay bounded
	// however many destinations it serves. It is also the shared
	// consumer's pool of workers. Optional, default 1024.
	MaxInFlight int
	// AckWait is how long JetStream waits for the ack of an event handed to
	// a replica before it hands the event to another: how soon the events
	// of a replica that died (or stopped, or lost its connection) are
	// delivered by the others. A replica restarts it every third of it for
	// every event it holds, so an attempt may take longer. Optional, default
	// 30s (DefaultAckWait); 3s to 10m.
	AckWait time.Duration
	// NoAttemptLog turns the delivery log off: no record of attempts
	// (stream.LogStream). Optional, default on.
	NoAttemptLog bool
	// LogResponseBytes is how much of each response body the delivery log
	// keeps. Optional, default 1024; negative: none.
	LogResponseBytes int
	// NoOperatorEvents turns operator events off (relay.destination.*,
	// relay.dead_letters: see opevents.go). Optional, default on.
	NoOperatorEvents bool
	// AlertBacklogAge is the age of a destination's oldest undelivered
	// event past which relay.destination.backlog_stale is emitted; 0: never.
	AlertBacklogAge time.Duration
	// AlertDeadLetters is how many dead letters of a destination in a
	// minute make a relay.dead_letters event; 0: never.
	AlertDeadLetters int
	// alertWindow is the dead-letter alert's window and opsEvery how
	// often backlogs are looked at (tests shorten them). Default a minute
	// and opsEvery.
	alertWindow, opsEvery time.Duration
	// checkListMax replaces checkListMax (tests).
	checkListMax int
	// Catalog checks typed events against their type's schema as they are
	// routed: one that does not satisfy it is dead-lettered for each
	// subscriber (ReasonSchemaMismatch). Optional: nil checks nothing.
	Catalog *eventtype.Catalog
	// Policies are the tenants' limits: a tenant's MaxInFlight bounds the
	// attempts under way across its destinations (an equal share per
	// replica). Optional: without it no tenant is limited.
	Policies *tenant.Policies
	// OnDelivery, when set, is called after every attempt's decision has been
	// carried out (for tests and metrics).
	OnDelivery func(Outcome)
	// TestSignals, when set, are the signals the relay fires (tests
	// outside the package: see TestSignals). Init or Notify them before
	// New, which copies them.
	TestSignals *TestSignals
	// TracerProvider makes relay's spans: each attempt, park and dead
	// letter, continuing the trace of the event's traceparent header; the
	// attempt's context is sent to the destination as traceparent (see
	// docs/operations.md#tracing). Optional: nil traces nothing, at no
	// cost per event.
	TracerProvider trace.TracerProvider
}

// Outcome describes one processed attempt, after relay acted on it.
type Outcome struct {
	Dest     string
	EventID  string
	Seq      uint64
	Attempt  int
	Result   Result
	Decision Decision
	Parked   bool  // the retry waits in Redis rather than in JetStream
	Err      error // set when relay could not act on the decision (the event comes back)

	parkTried bool
	// note is an operator's reason for skipping the event.
	note string
	// recorded: the attempt is in the event's history already.
	recorded bool
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = egress.NewClient(egress.Options{})
	}
	if cfg.Dial == nil {
		cfg.Dial = egress.NewDialer(egress.Options{})
	}
	if cfg.KindHTTPClient == nil {
		cfg.KindHTTPClient = cfg.HTTPClient
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = 10000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ParkThreshold == 0 {
		cfg.ParkThreshold = time.Minute
	}
	if cfg.CheckTakeover == 0 {
		cfg.CheckTakeover = 10 * time.Second
	}
	if cfg.URLCooldown == 0 {
		cfg.URLCooldown = DefaultURLCooldown
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 1024
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = destination.DefaultAckWait
	}
	if cfg.alertWindow == 0 {
		cfg.alertWindow = time.Minute
	}
	if cfg.opsEvery == 0 {
		cfg.opsEvery = opsEvery
	}
	if cfg.LogResponseBytes == 0 {
		cfg.LogResponseBytes = DefaultLogResponseBytes
	}
	return cfg
}

// Validate reports a configuration that cannot work.
func (cfg Config) Validate() error {
	if cfg.JS == nil {
		return errors.New("relay: Config.JS is required")
	}
	if cfg.ShutdownGrace < 0 || cfg.MaxAckPending < 1 {
		return errors.New("relay: ShutdownGrace must be >= 0 and MaxAckPending >= 1")
	}
	if cfg.URLCooldown < 0 {
		return errors.New("relay: URLCooldown must be >= 0")
	}
	if cfg.MaxInFlight < 1 || cfg.MaxInFlight > 100_000 {
		return errors.New("relay: MaxInFlight must be between 1 and 100000")
	}
	if cfg.AckWait < 3*time.Second || cfg.AckWait > 10*time.Minute {
		return fmt.Errorf("relay: AckWait %s must be between 3s and 10m", cfg.AckWait)
	}
	if cfg.LogResponseBytes > 64<<10 {
		return errors.New("relay: LogResponseBytes must be at most 65536")
	}
	if cfg.CheckTakeover < 2*lease.Renew {
		return fmt.Errorf("relay: CheckTakeover must be at least %s (twice the lease renewal interval)", 2*lease.Renew)
	}
	return nil
}

// DefaultLogResponseBytes is how much of a response body the delivery log
// keeps unless Config.LogResponseBytes says otherwise.
const DefaultLogResponseBytes = 1024

// Relay delivers events to their destinations.
type Relay struct {
	cfg      Config
	log      *slog.Logger
	store    *destination.Store
	attempts jetstream.KeyValue
	events   jetstream.Stream
	dlq      dlq.Writer
	sender   *Sender
	kinds    *publishers
	// tracer makes relay's spans (nil: no tracing).
	tracer trace.Tracer
	// logw writes the delivery log (nil: off).
	logw  *deliverylog.Writer
	dests *destination.Watch
	// ordered holds the partition marks of ordered destinations.
	ordered jetstream.KeyValue
	// maxMsg is the largest message the events stream takes from relay:
	// the stream's limit or the server's, the smaller.
	maxMsg int
	// seal seals relay's republishes and tells them from a producer's
	// messages (see stream.Seal).
	seal *stream.Seal
	// unsealedWarn keeps "relay headers dropped" to a line per
	// destination a minute.
	unsealedWarn quiet.Limiter
	// retryAtStart are the attempt-log keys of the events in retry when
	// Run started (see inRetryAtStart). Not changed after that.
	retryAtStart map[string]struct{}

	mu      sync.Mutex
	workers map[string]*worker
	// shared works the shared consumer (nil while no destination is
	// shared).
	shared *worker
	// sharedPaused is each shared destination's pause as reconcile last
	// saw it (under mu).
	sharedPaused map[string]time.Time
	// slots bound each shared destination's attempts.
	slots destSlots
	// inFlight bounds all attempts of the replica (MaxInFlight): each
	// takes a place before it starts.
	inFlight chan struct{}
	// ackWait is the shortest AckWait of this replica and the live ones
	// it knows of (see runRegistry): held events are pinged by it, and an
	// attempt is late by it.
	ackWait atomic.Int64
	// queues counts the running pull loops with a queue (unordered
	// consumers of their own and lanes), which share MaxInFlight's
	// queue room.
	queues atomic.Int64
	// laneWarn keeps "cannot open the lane" to a line per destination a
	// minute.
	laneWarn quiet.Limiter
	// unserved are the destinations whose consumers the server refused
	// for the stream's consumer limit, with its answer (under mu).
	unserved map[string]error
	// running is set once Run has started a worker for every destination
	// it could.
	running atomic.Bool
	// limitWarn keeps the consumer-limit error to one line per
	// destination a minute (reconcile retries every reconcileEvery).
	limitWarn quiet.Limiter

	breakers breakers
	pools    *urlPools
	limits   limits
	tenants  tenantSlots
	// proxyDown follows the egress proxy's failures.
	proxyDown proxyWatch
	// parkWarn keeps "cannot park" to one warning per destination every
	// 10s (relay_park_failures_total counts them all).
	parkWarn quiet.Limiter
	// retryLog keeps retries to one INFO line per destination every
	// retryLogEvery; summary counts the outcomes the minute's line per
	// destination gives (logOutcome).
	retryLog quiet.Limiter
	summary  summaries
	// ops queues the operator events of the delivery path and of the
	// operations job for publishOps, so that no delivery waits for one to
	// be stored.
	ops chan opevent.Event

	signals TestSignals
	// opsLooks counts the operator-events job's looks at the backlogs
	// (for tests).
	opsLooks atomic.Int64
}

// New prepares a relay runner.
func New(ctx context.Context, cfg Config) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := destination.NewStore(ctx, cfg.JS, destination.WithSecretKey(cfg.SecretKey, cfg.PreviousSecretKeys...), destination.WithClock(cfg.Now))
	if err != nil {
		return nil, err
	}
	kv, err := cfg.JS.KeyValue(ctx, stream.AttemptsBucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", stream.AttemptsBucket, err)
	}
	okv, err := cfg.JS.KeyValue(ctx, stream.OrderedBucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", stream.OrderedBucket, err)
	}
	evs, err := cfg.JS.Stream(ctx, stream.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", stream.EventsStream, err)
	}
	seal, err := stream.LoadSeal(ctx, cfg.JS)
	if err != nil {
		return nil, err
	}
	maxMsg := int(cfg.JS.Conn().MaxPayload())
	if m := int(evs.CachedInfo().Config.MaxMsgSize); m > 0 && (maxMsg <= 0 || m < maxMsg) {
		maxMsg = m
	}
	r := &Relay{
		maxMsg:       maxMsg,
		seal:         seal,
		unsealedWarn: quiet.Limiter{Interval: time.Minute},
		cfg:          cfg,
		log:          cfg.Logger,
		store:        st,
		attempts:     kv,
		ordered:      okv,
		events:       evs,
		dlq:          dlq.Writer{JS: cfg.JS},
		sender:       &Sender{Client: cfg.HTTPClient, Now: cfg.Now, KeepBody: max(cfg.LogResponseBytes, 0), KeepHeaders: !cfg.NoAttemptLog},
		dests:        destination.NewWatch(),
		kinds:        &publishers{env: kind.Env{Dial: cfg.Dial, HTTPClient: cfg.KindHTTPClient}, log: cfg.Logger, now: cfg.Now, m: map[string]*openPublisher{}},
		workers:      map[string]*worker{},
		unserved:     map[string]error{},
		sharedPaused: map[string]time.Time{},
		limitWarn:    quiet.Limiter{Interval: time.Minute},
		laneWarn:     quiet.Limiter{Interval: time.Minute},
		breakers:     breakers{probing: map[string]bool{}, failures: map[string]int{}},
		pools:        newURLPools(cfg.URLCooldown),
		limits:       limits{byDest: map[string]*limit{}, replicas: 1},
		parkWarn:     quiet.Limiter{Interval: 10 * time.Second},
		retryLog:     quiet.Limiter{Interval: retryLogEvery},
		tracer:       spans.Tracer(cfg.TracerProvider),
		ops:          make(chan opevent.Event, opsQueue),
	}
	if cfg.TestSignals != nil {
		r.signals = *cfg.TestSignals
	}
	r.slots = destSlots{r: r, m: map[string]chan struct{}{}}
	r.inFlight = make(chan struct{}, cfg.MaxInFlight)
	r.ackWait.Store(int64(cfg.AckWait))
	if !cfg.NoAttemptLog {
		if _, err := cfg.JS.Stream(ctx, stream.LogStream); err != nil {
			return nil, fmt.Errorf("open stream %s: %w", stream.LogStream, err)
		}
		if r.logw, err = deliverylog.NewWriter(cfg.JS.Conn(), cfg.Logger, cfg.Metrics, cfg.Now); err != nil {
			return nil, err
		}
		r.logw.Indexed = func(ids []string) {
			for _, id := range ids {
				r.signals.LogIndexed.Signal(id)
			}
		}
	} else {
		r.sender.KeepBody = 0
	}
	return r, nil
}

// Run delivers until ctx is cancelled, then stops pulling, lets in-flight
// deliveries finish within the shutdown grace, hands back what remains, and
// returns nil. It returns early with an error only if it cannot start.
func (r *Relay) Run(ctx context.Context) error {
	w, err := r.store.WatchAll(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing was handed out yet
		}
		return fmt.Errorf("watch destinations: %w", err)
	}
	defer func() { _ = w.Stop() }()

	// Load the current destinations before consuming anything.
	for e := range w.Updates() {
		if e == nil {
			break
		}
		r.apply(e, false)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	r.retryAtStart, err = listInRetry(lctx, r.attempts)
	if err == nil && lctx.Err() != nil {
		err = lctx.Err()
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		// Without the list, an event whose ack a crash took back is
		// attempted again: a duplicate, as before this relay knew better.
		r.log.Warn("cannot list the events in retry; an event parked just before a crash of the NATS server may be delivered twice", "err", err)
	}
	if r.logw != nil {
		go r.logw.Run()
		defer r.logw.Close(deliverylog.FinishTimeout + time.Second)
	}
	// Before the first worker: any may emit an operator event.
	stopOps := r.startOps()
	defer stopOps()
	r.reconcile(ctx)

	id := replicaID()
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		r.runUnrouted(ctx, id)
	}()
	go func() {
		defer wg.Done()
		r.runOps(ctx, id)
	}()
	go func() {
		defer wg.Done()
		r.runRouter(ctx, id)
	}()
	go func() {
		defer wg.Done()
		r.runRegistry(ctx, id)
	}()

	r.running.Store(true)
	r.log.Info("relay running", "destinations", len(r.dests.All()))
	r.signals.Running.Signal(struct{}{})
	// Reconcile now and then too: a consumer that could not be created, or
	// one deleted under a running worker, gets another try.
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			r.reconcile(ctx)
			r.kinds.sweep(func(dest string) bool { _, ok := r.dests.Get(dest); return ok })
			r.summary.flush(r.log, r.cfg.Now(), false)
		case e, ok := <-w.Updates():
			if !ok {
				break loop
			}
			if e != nil {
				r.apply(e, true)
				r.reconcile(ctx)
				r.signals.DestApplied.Signal(e.Key())
			}
		}
	}
	r.mu.Lock()
	ws := make([]*worker, 0, len(r.workers)+1)
	for _, wk := range r.workers {
		ws = append(ws, wk)
	}
	if r.shared != nil {
		ws = append(ws, r.shared)
	}
	r.mu.Unlock()
	// All at once: each lets its in-flight deliveries finish within the
	// shutdown grace and hands back the rest, so the stop takes one grace,
	// not one per destination.
	for _, wk := range ws {
		wk.cancel()
	}
	for _, wk := range ws {
		<-wk.done
	}
	wg.Wait()
	r.kinds.closeAll()
	r.summary.flush(r.log, r.cfg.Now(), true)
	r.log.Info("relay stopped")
	return nil
}

// apply takes in e, an entry of the destinations bucket. live says it
// changed while relay runs (not loaded at start): the change is logged.
func (r *Relay) apply(e jetstream.KeyValueEntry, live bool) {
	ch, err := r.dests.Apply(r.store, e)
	switch {
	case errors.Is(err, destination.ErrSealed):
		// Its events wait in JetStream until relay runs with the right key.
		r.log.Error("cannot use destination: "+destination.ErrSealed.Error(), "dest", e.Key())
		return
	case errors.Is(err, destination.ErrStoredInvalid):
		// Its events wait in JetStream until the record is fixed.
		r.log.Error("destination stored invalid; not used until it is fixed ('relay dest update')", "dest", e.Key(), "err", err)
		return
	case err != nil:
		r.log.Error("destination stored corrupt; ignoring it", "dest", e.Key(), "err", err)
		return
	}
	d := ch.After
	switch {
	case !live:
	case !ch.Put:
		if ch.Had {
			r.log.Info("destination removed", "dest", e.Key())
		}
	case !ch.Had:
		if d.IsHTTP() {
			r.log.Info("destination added", "dest", d.Name, "url", destination.RedactURL(d.URL), "ordered", d.Ordered)
		} else {
			r.log.Info("destination added", "dest", d.Name, "kind", d.Kind, "ordered", d.Ordered)
		}
	default:
		if changed := changedSettings(ch.Before, d); len(changed) > 0 {
			r.log.Info("destination changed", "dest", d.Name, "changed", strings.Join(changed, ","))
		}
	}
}

// changedSettings names the settings of a destination that differ between
// before and after, by their JSON names ("url", "retry", "headers"...):
// names only, so that no secret or header value reaches the log.
func changedSettings(before, after destination.Destination) []string {
	var b, a map[string]json.RawMessage
	bb, _ := json.Marshal(before)
	ab, _ := json.Marshal(after)
	if json.Unmarshal(bb, &b) != nil || json.Unmarshal(ab, &a) != nil {
		return nil
	}
	var ch []string
	for k, v := range a {
		if k != "updated" && !bytes.Equal(v, b[k]) {
			ch = append(ch, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && k != "updated" {
			ch = append(ch, k)
		}
	}
	slices.Sort(ch)
	return ch
}

// reconcileEvery is how often workers are checked without a change.
const reconcileEvery = 5 * time.Second

// reconcile starts a worker for each destination without one, restarts those
// whose consumer settings changed, and stops those of removed destinations.
func (r *Relay) reconcile(ctx context.Context) {
	want := r.dests.All()

	r.mu.Lock()
	defer r.mu.Unlock()
	r.reconcileShared(ctx, want)
	for name, wk := range r.workers {
		d, ok := want[name]
		if !ok || wk.exited() || d.Concurrency != wk.dest.Concurrency {
			wk.stop()
			delete(r.workers, name)
		}
	}
	for name, d := range want {
		if d.Shared {
			// The shared consumer's; a pause applies to its lane.
			if prev, ok := r.sharedPaused[name]; !ok || !prev.Equal(d.PausedUntil) {
				r.sharedPaused[name] = d.PausedUntil
				if ok {
					go r.applyPause(d)
				}
			}
			continue
		}
		if wk, ok := r.workers[name]; ok {
			if !wk.dest.PausedUntil.Equal(d.PausedUntil) {
				wk.dest = d
				go r.applyPause(d)
			}
			continue
		}
		wk, err := r.startWorker(ctx, d)
		if destination.ConsumerLimitError(err) {
			r.unserved[name] = err
			if ok, _ := r.limitWarn.Allow(name, time.Now()); ok {
				r.log.Error("cannot consume for destination: the events stream has reached its consumer limit; its events wait in the log. Raise 'relay run --max-consumers' or remove destinations no longer used",
					"dest", name, "consumers_needed", d.ConsumerCount(), "err", err)
			}
			continue
		}
		if err != nil {
			r.log.Error("cannot consume for destination; retrying every 5s and on its next change", "dest", name, "err", err)
			continue
		}
		delete(r.unserved, name)
		r.workers[name] = wk
	}
	for name := range r.unserved {
		if _, ok := want[name]; !ok {
			delete(r.unserved, name)
		}
	}
	for name := range r.sharedPaused {
		if _, ok := want[name]; !ok {
			delete(r.sharedPaused, name)
		}
	}
}

// reconcileShared starts the shared loop when a destination in want is
// shared, and again if it ended (its consumer deleted). Under r.mu.
func (r *Relay) reconcileShared(ctx context.Context, want map[string]destination.Destination) {
	if r.shared != nil && !r.shared.exited() {
		return
	}
	var start uint64
	for _, d := range want {
		if d.Shared && (start == 0 || d.StartSeq < start) {
			start = d.StartSeq
		}
	}
	if start == 0 {
		return
	}
	if r.shared != nil {
		r.shared.stop()
		r.shared = nil
	}
	wk, err := r.startShared(ctx, start)
	if err != nil {
		if ok, _ := r.limitWarn.Allow(destination.SharedConsumer, time.Now()); ok {
			r.log.Error("cannot consume for the shared destinations; retrying every 5s", "err", err)
		}
		return
	}
	r.shared = wk
}

// Serving reports, for readiness, whether r consumes for every destination:
// an error while Run is still starting its workers, or while a destination
// cannot be consumed because the events stream's consumer limit is reached.
func (r *Relay) Serving() error {
	if !r.running.Load() {
		return errors.New("starting: creating the destinations' consumers")
	}
	r.mu.Lock()
	names := make([]string, 0, len(r.unserved))
	for name := range r.unserved {
		names = append(names, name)
	}
	r.mu.Unlock()
	n := len(names)
	if n == 0 {
		return nil
	}
	slices.Sort(names)
	more := ""
	if len(names) > 5 {
		names, more = names[:5], fmt.Sprintf(" and %d more", len(names)-5)
	}
	return fmt.Errorf("%w: %d destinations are not consumed, the events stream has reached its consumer limit (relay run --max-consumers): %s%s",
		destination.ErrNoConsumerRoom, n, strings.Join(names, ", "), more)
}
