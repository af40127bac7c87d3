// Package relay is the delivery engine: it pulls events from JetStream,
// delivers them over HTTP, and decides per attempt whether to acknowledge,
// retry after a delay, or dead-letter.
package relay

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
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
	NetPolicy *NetPolicy
	// OnDelivery, when set, is called after every attempt's decision has been
	// carried out (for tests and metrics).
	OnDelivery func(Outcome)
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
		cfg.HTTPClient = NewHTTPClient(HTTPOptions{})
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
	if cfg.CheckTakeover < 2*leaseRenew {
		return fmt.Errorf("relay: CheckTakeover must be at least %s (twice the lease renewal interval)", 2*leaseRenew)
	}
	return nil
}

// ConsumerName is the durable consumer of destination dest.
func ConsumerName(dest string) string { return "relay_" + dest }

// Relay delivers events to their destinations.
type Relay struct {
	cfg      Config
	log      *slog.Logger
	store    *Store
	attempts jetstream.KeyValue
	events   jetstream.Stream
	dlq      dlq.Writer
	sender   *Sender
	dests    watch
	// ordered holds the partition marks of ordered destinations.
	ordered jetstream.KeyValue
	// maxMsg is the largest message the events stream takes from relay:
	// the stream's limit or the server's, the smaller.
	maxMsg int
	// retryAtStart are the attempt-log keys of the events in retry when
	// Run started (see inRetryAtStart). Not changed after that.
	retryAtStart map[string]struct{}

	mu      sync.Mutex
	workers map[string]*worker

	breakers breakers
	limits   limits
	tune     checkTuning // of the unknown-destination check
	// parkWarn keeps "cannot park" to one warning per destination every
	// 10s (relay_park_failures_total counts them all).
	parkWarn quiet
}

// New prepares a relay runner.
func New(ctx context.Context, cfg Config) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := NewStore(ctx, cfg.JS, WithSecretKey(cfg.SecretKey, cfg.PreviousSecretKeys...), WithClock(cfg.Now))
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
	maxMsg := int(cfg.JS.Conn().MaxPayload())
	if m := int(evs.CachedInfo().Config.MaxMsgSize); m > 0 && (maxMsg <= 0 || m < maxMsg) {
		maxMsg = m
	}
	return &Relay{
		maxMsg:   maxMsg,
		cfg:      cfg,
		log:      cfg.Logger,
		store:    st,
		attempts: kv,
		ordered:  okv,
		events:   evs,
		dlq:      dlq.Writer{JS: cfg.JS},
		sender:   &Sender{Client: cfg.HTTPClient, Now: cfg.Now},
		dests:    watch{dests: map[string]Destination{}},
		workers:  map[string]*worker{},
		breakers: breakers{probing: map[string]bool{}, failures: map[string]int{}},
		limits:   limits{byDest: map[string]*limit{}, replicas: 1},
		tune:     defaultCheckTuning,
		parkWarn: quiet{interval: 10 * time.Second},
	}, nil
}

// Run delivers until ctx is cancelled, then stops pulling, lets in-flight
// deliveries finish within the shutdown grace, hands back what remains, and
// returns nil. It returns early with an error only if it cannot start.
func (r *Relay) Run(ctx context.Context) error {
	w, err := r.store.kv.WatchAll(ctx)
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
	r.reconcile(ctx)

	id := replicaID()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.runUnrouted(ctx, id)
	}()
	go func() {
		defer wg.Done()
		r.runRegistry(ctx, id)
	}()

	r.log.Info("relay running", "destinations", len(r.dests.dests))
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
		case e, ok := <-w.Updates():
			if !ok {
				break loop
			}
			if e != nil {
				r.apply(e, true)
				r.reconcile(ctx)
			}
		}
	}
	r.mu.Lock()
	ws := make([]*worker, 0, len(r.workers))
	for _, wk := range r.workers {
		ws = append(ws, wk)
	}
	r.mu.Unlock()
	for _, wk := range ws {
		wk.stop()
	}
	wg.Wait()
	r.log.Info("relay stopped")
	return nil
}

// apply takes in e, an entry of the destinations bucket. live says it
// changed while relay runs (not loaded at start): the change is logged.
func (r *Relay) apply(e jetstream.KeyValueEntry, live bool) {
	r.dests.mu.Lock()
	defer r.dests.mu.Unlock()
	before, had := r.dests.dests[e.Key()]
	if e.Operation() != jetstream.KeyValuePut {
		if had && live {
			r.log.Info("destination removed", "dest", e.Key())
		}
		delete(r.dests.dests, e.Key())
		return
	}
	d, open, err := r.store.decode(e.Key(), e.Value())
	if err != nil {
		r.log.Error("destination stored corrupt; ignoring it", "dest", e.Key(), "err", err)
		delete(r.dests.dests, e.Key())
		return
	}
	if !open {
		// Its events wait in JetStream until relay runs with the right key.
		r.log.Error("cannot use destination: "+ErrSealed.Error(), "dest", e.Key())
		delete(r.dests.dests, e.Key())
		return
	}
	// Validated as 'relay dest add' validates it: a record written to the
	// bucket by other means is not trusted.
	d = d.WithDefaults()
	if err = d.Validate(); err == nil && d.Name != e.Key() {
		err = fmt.Errorf("it is stored under the key %q but names %q", e.Key(), d.Name)
	}
	if err != nil {
		// Its events wait in JetStream until the record is fixed.
		r.log.Error("destination stored invalid; not used until it is fixed ('relay dest update')", "dest", e.Key(), "err", err)
		delete(r.dests.dests, e.Key())
		return
	}
	r.dests.dests[e.Key()] = d
	switch {
	case !live:
	case !had:
		r.log.Info("destination added", "dest", d.Name, "url", RedactURL(d.URL), "ordered", d.Ordered)
	default:
		if ch := changedSettings(before, d); len(ch) > 0 {
			r.log.Info("destination changed", "dest", d.Name, "changed", strings.Join(ch, ","))
		}
	}
}

// changedSettings names the settings of a destination that differ between
// before and after, by their JSON names ("url", "retry", "headers"...):
// names only, so that no secret or header value reaches the log.
func changedSettings(before, after Destination) []string {
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
	r.dests.mu.RLock()
	want := make(map[string]Destination, len(r.dests.dests))
	for k, d := range r.dests.dests {
		want[k] = d
	}
	r.dests.mu.RUnlock()

	r.mu.Lock()
	defer r.mu.Unlock()
	for name, wk := range r.workers {
		d, ok := want[name]
		if !ok || wk.exited() || d.Concurrency != wk.dest.Concurrency || d.AckWait() != wk.dest.AckWait() {
			wk.stop()
			delete(r.workers, name)
		}
	}
	for name, d := range want {
		if wk, ok := r.workers[name]; ok {
			if !wk.dest.PausedUntil.Equal(d.PausedUntil) {
				wk.dest = d
				go r.applyPause(d)
			}
			continue
		}
		wk, err := r.startWorker(ctx, d)
		if err != nil {
			r.log.Error("cannot consume for destination; will retry on the next change", "dest", name, "err", err)
			continue
		}
		r.workers[name] = wk
	}
}

// worker pulls and delivers the events of one destination.
type worker struct {
	dest   Destination
	cancel context.CancelFunc
	done   chan struct{} // all its pull loops ended
	broken chan struct{} // one of its pull loops ended
}

func (w *worker) exited() bool {
	select {
	case <-w.broken:
		return true
	default:
		return false
	}
}

func (w *worker) stop() {
	w.cancel()
	<-w.done
}

// consumerSpec is one JetStream consumer of a destination and how it is
// worked.
type consumerSpec struct {
	cfg         jetstream.ConsumerConfig
	concurrency int
	// ordered: one event at a time, in order; its waits never leave
	// JetStream (parking would let the next event of the key overtake).
	ordered bool
	// partition is the ordered partition's index.
	partition int
}

// specs lays out d's consumers: one for all its events, or, for an ordered
// destination, one for its events without an order key and one per partition
// with a single event in flight.
func (r *Relay) specs(d Destination) []consumerSpec {
	base := jetstream.ConsumerConfig{
		PauseUntil:    pauseUntil(d, r.cfg.Now()),
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   d.StartSeq,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.AckWait(),
		MaxDeliver:    -1,
		MaxAckPending: r.cfg.MaxAckPending,
	}
	main := base
	main.Durable = ConsumerName(d.Name)
	main.Description = "relay deliveries to " + d.Name
	main.FilterSubjects = stream.DestFilters(d.Name)
	if !d.Ordered {
		return []consumerSpec{{cfg: main, concurrency: d.Concurrency}}
	}
	main.Description = "relay deliveries to " + d.Name + " (events without an order key)"
	main.FilterSubjects = main.FilterSubjects[:1]
	out := []consumerSpec{{cfg: main, concurrency: d.Concurrency}}
	for i := range d.Partitions {
		c := base
		c.Durable = PartitionConsumerName(d.Name, i)
		c.Description = fmt.Sprintf("relay ordered deliveries to %s, partition %d of %d", d.Name, i, d.Partitions)
		c.FilterSubjects = d.partitionFilters(i)
		c.MaxAckPending = 1
		out = append(out, consumerSpec{cfg: c, concurrency: 1, ordered: true, partition: i})
	}
	return out
}

func pauseUntil(d Destination, now time.Time) *time.Time {
	if now.Before(d.PausedUntil) {
		t := d.PausedUntil
		return &t
	}
	return nil
}

func (r *Relay) startWorker(parent context.Context, d Destination) (*worker, error) {
	specs := r.specs(d)
	conss := make([]jetstream.Consumer, len(specs))
	for i, sp := range specs {
		c, err := r.cfg.JS.CreateOrUpdateConsumer(parent, stream.EventsStream, sp.cfg)
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", sp.cfg.Durable, err)
		}
		conss[i] = c
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	wk := &worker{dest: d, cancel: cancel, done: make(chan struct{}), broken: make(chan struct{})}
	// Stop when either Run's context or stop() ends.
	stopped := make(chan struct{})
	go func() {
		select {
		case <-parent.Done():
		case <-ctx.Done():
		}
		close(stopped)
	}()
	var wg sync.WaitGroup
	var once sync.Once
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consume(conss[i], d, specs[i], stopped)
			once.Do(func() { close(wk.broken) })
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(wk.done)
	}()
	return wk, nil
}

// pullHeartbeat is the longest idle heartbeat relay asks of a pull request.
const pullHeartbeat = 2 * time.Second

// pullRounds is how many rounds of attempts (the concurrency) of events an
// unordered destination's consumer holds: those being attempted and the
// queue behind them. A burst larger than the concurrency then arrives at
// once, where asking for one round at a time kept its last events waiting
// for the next request (BENCHMARKS.md, "The bursts of (b)" and ninth round).
const pullRounds = 4

// queueBytes bounds the queue beyond one round of attempts by the events'
// size: it holds about this many bytes of event bodies (by their moving
// average), so large events are not held four rounds deep. Three queued
// rounds of 64 1 KiB events take 192 KiB.
const queueBytes = 8 << 20

// consume runs one destination's pull loop until stopped is closed.
func (r *Relay) consume(cons jetstream.Consumer, d Destination, sp consumerSpec, stopped <-chan struct{}) {
	// Pull requests expire well within AckWait: a process that stops
	// (SIGSTOP) must not hold an open pull that would swallow the
	// redelivery meant for another replica.
	expiry := max(time.Second, min(30*time.Second, sp.cfg.AckWait/2))
	// Heartbeats at most every 2s: relay asks again once two are missed
	// (a server restart, a reconnect, a lost request).
	hb := min(pullHeartbeat, expiry/2)
	// Each request brings at most queueBytes (or two maximum payloads):
	// requests asked for while events were small cannot bring rounds of
	// large ones.
	p, err := newPuller(r.cfg.JS, sp.cfg.Durable, expiry, hb, queueBytes)
	if err != nil {
		r.log.Error("cannot pull", "dest", d.Name, "err", err)
		return
	}
	// Deliveries get their own context: cancelled only once the grace period
	// after stop has run out.
	dctx, dcancel := context.WithCancel(context.Background())
	defer dcancel()
	go func() {
		<-stopped
		t := time.NewTimer(r.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			dcancel()
		case <-dctx.Done():
		}
	}()

	// A fixed pool of workers takes events from the queue: no goroutine
	// (and no stack growth) per event.
	type pulled struct {
		msg *pulledMsg
		// since is when the event arrived, or its AckWait was last
		// restarted.
		since time.Time
	}
	work := make(chan pulled)
	done := make(chan struct{}, sp.concurrency)
	var wg sync.WaitGroup
	restartAfter := d.longWait()
	var mark *partitionMark
	if sp.ordered {
		mark = newPartitionMark(r.ordered, r.cfg.JS.Conn(), d.Name, sp.partition)
		r.ackSettledHead(cons, mark)
	}
	for range sp.concurrency {
		wg.Go(func() {
			for p := range work {
				if time.Since(p.since) > restartAfter {
					// It waited long in the queue: restart its AckWait.
					_ = p.msg.InProgress()
				}
				r.handle(dctx, p.msg, mark)
				done <- struct{}{}
			}
		})
	}

	// hold is how many events this consumer asks to have: being
	// attempted, queued, and asked for. An ordered partition has one at a
	// time anyway. Beyond a round, the queue holds about queueBytes of
	// events, by the average size of those that came; until one has come,
	// a round.
	var avgSize float64
	hold := func() int {
		if sp.ordered || avgSize == 0 {
			return sp.concurrency
		}
		return sp.concurrency + min((pullRounds-1)*sp.concurrency, int(queueBytes/avgSize))
	}
	nc := r.cfg.JS.Conn()
	tick := time.NewTicker(max(hb/2, 100*time.Millisecond))
	defer tick.Stop()
	var (
		queue []pulled
		busy  int
		buf   []*nats.Msg
	)
	gone := false
loop:
	for {
		if err := p.fill(hold(), len(queue)+busy, time.Now()); err != nil {
			r.log.Debug("cannot ask for events; asking again shortly", "dest", d.Name, "err", err)
		}
		var out chan pulled
		var head pulled
		if len(queue) > 0 {
			out, head = work, queue[0]
		}
		select {
		case out <- head:
			queue[0] = pulled{}
			queue = queue[1:]
			busy++
		case <-done:
			busy--
		case <-p.signal:
			now := time.Now()
			got := p.take(buf)
			for _, m := range got {
				st, err := p.status(m, now)
				switch st {
				case pullEvent:
					queue = append(queue, pulled{&pulledMsg{msg: m, nc: nc}, now})
					size := float64(max(len(m.Data), 1))
					if avgSize == 0 {
						avgSize = size
					} else {
						avgSize += (size - avgSize) / 16
					}
				case pullBeat, pullReleased:
				case pullLost:
					r.log.Debug("pull requests lost; asking again", "dest", d.Name, "err", err)
				case pullRefused:
					r.log.Warn("pull request refused; asking again shortly", "dest", d.Name, "err", err)
				case pullUnanswered:
					r.log.Debug("pull request unanswered; asking again shortly", "dest", d.Name, "err", err)
					gone = gone || r.consumerGone(cons)
				case pullGone:
					gone = true
				}
			}
			clear(got)
			buf = got
			if gone {
				r.log.Warn("consumer gone; it is recreated if the destination still exists", "dest", d.Name)
				break loop
			}
		case now := <-tick.C:
			if p.silent(now) {
				r.log.Debug("no heartbeat from the pull requests; asking again", "dest", d.Name)
			}
			for i := range queue {
				if now.Sub(queue[i].since) > restartAfter {
					_ = queue[i].msg.InProgress()
					queue[i].since = now
				}
			}
		case <-stopped:
			break loop
		}
	}
	// Workers still finishing an attempt report it; nobody counts now.
	go func() {
		for range done {
		}
	}()
	// Hand back what is queued and what was on its way: another replica,
	// or this one once started again, has it at once instead of after
	// AckWait. First stop asking (and let what was on its way arrive), so
	// that what is handed back is not handed to this replica again.
	drained := p.stop(5 * time.Second)
	back := make([]*pulledMsg, 0, len(queue)+len(drained))
	for _, q := range queue {
		back = append(back, q.msg)
	}
	for _, m := range drained {
		if st, _ := p.status(m, time.Now()); st == pullEvent {
			back = append(back, &pulledMsg{msg: m, nc: nc})
		}
	}
	// All but the last go back now; the last once the workers are done,
	// confirmed: the server has then stored every hand-back and every ack
	// of the workers, before a server that stops next (the embedded one,
	// with relay) could drop them.
	for i, m := range back {
		if i < len(back)-1 {
			_ = m.handBack(false)
		}
	}
	close(work)
	wg.Wait()
	close(done)
	if len(back) > 0 {
		if err := back[len(back)-1].handBack(true); err != nil {
			r.log.Debug("handing back events not confirmed; they come back after AckWait at the latest", "dest", d.Name, "err", err)
		}
	}
	// Make sure every ack and nak has left the client.
	_ = nc.Flush()
}

// consumerGone reports whether cons no longer exists on the server. It
// holds up the pull loop for at most 2s, well within AckWait.
func (r *Relay) consumerGone(cons jetstream.Consumer) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := cons.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)
}

// event is a stored event taken apart.
type event struct {
	id      string
	dest    string
	key     string // the producer's order key, empty if the event carries none
	seq     uint64
	subject string
	prior   int // attempts made before this stream message
	// origin is the sequence of the message the event first came in as:
	// seq, or for one republished from Redis its Relay-Origin-Seq.
	origin uint64
	// delivered counts JetStream's deliveries of this stream message;
	// stored is when JetStream stored it.
	delivered uint64
	stored    time.Time
	// published is when the producer published the event (a republished
	// copy carries the original's time in a header).
	published time.Time
	// body and hdr are the event's own, as stored.
	body []byte
	hdr  nats.Header
	// parked is the last sequence of this event relay parked in Redis, as
	// its attempt log said (0: not parked, or not read).
	parked uint64
}

func eventOf(msg jetstream.Msg) (event, error) {
	info, ok := parseAckReply(msg.Reply())
	if !ok {
		meta, err := msg.Metadata()
		if err != nil {
			return event{}, fmt.Errorf("message without JetStream metadata: %w", err)
		}
		info = ackInfo{streamSeq: meta.Sequence.Stream, delivered: meta.NumDelivered, stored: meta.Timestamp}
	}
	return newEvent(msg.Subject(), info, msg.Data(), msg.Headers())
}

// rawEvent is eventOf for a message read from the stream by sequence (as if
// delivered once).
func rawEvent(msg *jetstream.RawStreamMsg) (event, error) {
	return newEvent(msg.Subject, ackInfo{streamSeq: msg.Sequence, delivered: 1, stored: msg.Time}, msg.Data, msg.Header)
}

// newEvent takes apart an event stored on subject.
func newEvent(subject string, info ackInfo, body []byte, h nats.Header) (event, error) {
	e, err := stream.Decode(subject, info.streamSeq, info.stored, h, body)
	if err != nil {
		return event{}, err
	}
	return event{
		id: e.ID, dest: e.Dest, key: e.Key, seq: e.Seq, subject: subject, prior: e.Attempt, origin: e.Origin,
		delivered: info.delivered, stored: e.Stored, published: e.Published, body: body, hdr: h,
	}, nil
}

// eventHeaders returns the event's own headers to pass on, nil if none.
func eventHeaders(h nats.Header) http.Header {
	return stream.Envelope{Headers: h}.HTTPHeader()
}

// handle takes one delivered message through its delivery: it learns what
// Decide asks for (the rate limit, the attempt log, the attempt itself)
// until Decide chooses an outcome, and then carries that out. mark is set
// when msg heads an ordered key: its partition's mark.
func (r *Relay) handle(ctx context.Context, msg jetstream.Msg, mark *partitionMark) {
	ev, err := eventOf(msg)
	if err != nil {
		r.log.Error("cannot read event; terminating it", "subject", msg.Subject(), "err", err)
		r.execute(msg, &ev, mark, Input{Unreadable: true}, Decide(Input{Unreadable: true}))
		return
	}
	in := r.input(ev, mark)
	if in.Probing {
		defer r.breakers.endProbe(in.Dest.Name)
	}
	for {
		dec := Decide(in)
		switch dec.Action {
		case WaitRate:
			in.RateAsked = true
			in.RateWait = r.waitRate(ctx, r.limiter(in.Dest), in.Dest, in.Ordered)
		case ReadLog:
			r.readLogInto(&in, &ev)
		case Send:
			inf := r.cfg.Metrics.attemptStarted(in.Dest.Name)
			res := r.sender.Send(ctx, in.Dest, Delivery{ID: ev.id, Body: ev.body, Headers: eventHeaders(ev.hdr)})
			inf.done()
			in.Result = &res
			in.Cancelled = ctx.Err() != nil
			in.Late = res.Duration > in.Dest.AckWait()-time.Second
		default:
			r.execute(msg, &ev, mark, in, dec)
			return
		}
	}
}

// input is what relay knows of ev's delivery before anything is asked: the
// ordered partition's mark, the destination and its state. Where the
// destination's circuit is open, it takes the probe if no other worker has
// it (Input.Probing): the caller ends it.
func (r *Relay) input(ev event, mark *partitionMark) Input {
	in := Input{
		Ordered:       mark != nil,
		Now:           r.cfg.Now(),
		Attempt:       ev.prior + 1,
		CanPark:       mark == nil && r.cfg.Schedule != nil,
		ParkThreshold: r.cfg.ParkThreshold,
		// The attempt number counts attempts whose outcome was recorded,
		// not JetStream's deliveries: a delivery handed back unattempted,
		// dropped by the client or cut short by a crash uses none up. A
		// first delivery has no log to read, unless it brings the event
		// back from Redis (an operator may have marked it meanwhile) or a
		// crash brought it back (inRetryAtStart).
		NeedLog: ev.delivered > 1 || ev.prior > 0 || r.inRetryAtStart(ev),
	}
	if mark != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		// A redelivery reads the mark again: another replica may have
		// settled the event and lost its ack.
		settled, err := mark.settled(ctx, ev.seq, ev.delivered > 1)
		cancel()
		if err != nil {
			r.log.Warn("cannot tell whether the head of an ordered key was delivered before; it waits", "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
		}
		in.MarkUnreadable, in.Settled = err != nil, settled
	}
	in.Dest, in.Known = r.dests.get(ev.dest)
	if in.Known && in.Dest.PauseReason == PauseCircuitOpen && !in.Now.Before(in.Dest.PausedUntil) {
		// The circuit's pause is over: one probe per replica decides.
		in.Probing = r.breakers.tryProbe(in.Dest.Name)
		in.ProbeTaken = !in.Probing
	}
	in.RateLimited = in.Known && in.Dest.RateLimit > 0
	return in
}

// readLogInto reads ev's attempt log into in: the attempt number, an
// operator's skip mark, and whether the event was parked before (then this
// message came back only because its ack was lost).
func (r *Relay) readLogInto(in *Input, ev *event) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	l, found := r.readLog(ctx, *ev)
	in.LogRead = true
	in.Settled = l.parkedAlready(*ev) || !found && ev.prior == 0 && r.cfg.Schedule != nil && r.doneParked(ctx, *ev)
	in.Attempt, in.Skip = max(l.Made, ev.prior)+1, l.skipOf(*ev)
	ev.parked = l.Parked
}

// execute carries out dec, an outcome of Decide for ev's delivery as in
// describes it.
func (r *Relay) execute(msg jetstream.Msg, ev *event, mark *partitionMark, in Input, dec Decision) {
	switch dec.Action {
	case Terminate:
		_ = msg.TermWithReason(dec.Reason)
		return
	case HandBack:
		if in.Result != nil {
			r.log.Info("attempt cancelled by shutdown", "dest", ev.dest, "event_id", ev.id, "attempt", in.Attempt)
		}
		r.handBack(msg, dec.Delay)
		return
	case AckSettled:
		why := "the head of an ordered key settled before its ack was lost (a crash of the NATS server's process)"
		if in.LogRead {
			why = "the event was parked in Redis before its ack was lost (a crash of the NATS server's process, or a lost ack); its copy carries on"
		}
		r.ackSettled(msg, *ev, why)
		return
	case Leave:
		r.log.Warn("attempt finished after AckWait; leaving the event to its redelivery", "dest", ev.dest, "event_id", ev.id, "duration", in.Result.Duration)
		return
	}
	out := Outcome{Dest: ev.dest, EventID: ev.id, Seq: ev.seq, Attempt: in.Attempt, Decision: dec, note: in.Skip}
	if in.Result != nil {
		out.Result = *in.Result
	}
	// Before act: the breaker counts failures in the order responses came
	// back. After act, a failure's bookkeeping (its history in the attempt
	// log) delays it, and failures held up together by a slow write would
	// arrive back to back, "consecutive".
	r.affect(in.Dest, dec, in.Probing, ev.id)
	out.Err = r.act(msg, *ev, in.Attempt, mark, &out)
	r.logOutcome(out)
	r.cfg.Metrics.observe(out, in.Ordered, ev.published, r.cfg.Now())
	if r.cfg.OnDelivery != nil {
		r.cfg.OnDelivery(out)
	}
}

// waitRate waits for d's rate limit to allow an attempt, and returns how
// long to hand the event back for when it does not (0: go on). A wait
// longer than half d's timeout (at least 1s) is not made: the event goes
// back to JetStream until the limit allows it, without using an attempt.
// Waiting for a low limit while holding the event would outlast its
// AckWait (2 × timeout + 5s covers a wait of a timeout before the attempt),
// and JetStream would hand it out again meanwhile: a duplicate delivery.
func (r *Relay) waitRate(ctx context.Context, lim *limit, d Destination, ordered bool) time.Duration {
	if lim == nil {
		return 0
	}
	res, delay, ok := lim.reserve(d.longWait())
	if !ok {
		if ordered {
			// The head of a key: back when the limit allows, give or
			// take a round of the workers, not behind the queue of
			// unordered events.
			round := time.Duration(min(float64(max(d.Concurrency, 1))*float64(lim.every), float64(maxRateWait)))
			return max(min(delay, maxRateWait-round)+rand.N(max(round, time.Millisecond)), time.Nanosecond)
		}
		return max(lim.turn(r.cfg.Now(), delay), time.Nanosecond)
	}
	if delay == 0 {
		return 0
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-ctx.Done():
		res.Cancel()
		return time.Second // shutting down
	}
}

// ackTimeout bounds waiting for JetStream to confirm an ack or a publish.
const ackTimeout = 10 * time.Second

// act carries out the decision for attempt number attempt of ev. mark is set
// when ev heads an ordered key: its acks are confirmed, after the mark
// recorded it settled, and its long waits are not parked in Redis.
func (r *Relay) act(msg jetstream.Msg, ev event, attempt int, mark *partitionMark, out *Outcome) error {
	ordered := mark != nil
	if out.Decision.Action == Ack && attempt == 1 && !ordered {
		// The hot path. The ack is not confirmed: confirming would cost a
		// round trip per event and change nothing, since a lost ack means
		// the event comes back (a duplicate), confirmed or not.
		return msg.Ack()
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	switch out.Decision.Action {
	case Ack:
		if mark != nil && r.settleOrdered(ctx, mark, ev) {
			// The head of an ordered key: its mark, confirmed, answers
			// for the ack. Should the ack be lost, the event comes back
			// and is acknowledged then without an attempt.
			if attempt > 1 {
				r.forgetHistory(ctx, ev)
			}
			return msg.Ack()
		}
		// Confirmed: a retried event's history is deleted only once its
		// ack is certain (else a lost ack would bring it back without one).
		if err := msg.DoubleAck(ctx); err != nil {
			return fmt.Errorf("ack not confirmed (the event may be delivered again): %w", err)
		}
		if attempt > 1 {
			r.forgetHistory(ctx, ev)
		}
		return nil
	case Retry, Park:
		if skip := r.recordAttempt(ctx, ev, attempt, out.Result, msg.Reply()); skip != "" {
			// An operator skipped it while this attempt ran: dead-letter
			// it now rather than after the backoff.
			out.Decision, out.note, out.recorded = Decision{Action: DeadLetter, Reason: ReasonSkipped}, skip, true
			return r.deadLetter(ctx, msg, ev, attempt, mark, out)
		}
		if out.Decision.Action == Park {
			out.parkTried = true
			parked, err := r.park(ctx, msg, ev, attempt, out.Decision.Delay)
			if parked {
				out.Parked = true
				return err
			}
			if ok, held := r.parkWarn.allow(ev.dest, r.cfg.Now()); ok {
				r.log.Warn("cannot park the event in Redis; it waits in JetStream instead", "dest", ev.dest, "event_id", ev.id, "err", err, "also_since_last_warning", held)
			}
			out.Decision.Action = Retry
		}
		return msg.NakWithDelay(out.Decision.Delay)
	}
	return r.deadLetter(ctx, msg, ev, attempt, mark, out)
}

// deadLetter writes ev's dead letter and then terminates msg. mark is set
// when ev heads an ordered key.
func (r *Relay) deadLetter(ctx context.Context, msg jetstream.Msg, ev event, attempt int, mark *partitionMark, out *Outcome) error {
	if err := r.writeDeadLetter(ctx, ev, attempt, out); err != nil {
		if errors.Is(err, dlq.ErrPermanent) {
			// Coming back would not help: attempted again and again, never
			// dead-lettered. Reported; the event stays in the event log.
			r.deadLetterFailed(ctx, ev, out.Decision.Reason, err)
			r.settleOrdered(ctx, mark, ev)
			if terr := msg.TermWithReason(ReasonDeadLetterFailed); terr != nil {
				return errors.Join(err, terr)
			}
			r.forgetHistory(ctx, ev)
			return err
		}
		// Keep the event: it comes back and is dead-lettered then.
		_ = msg.NakWithDelay(5 * time.Second)
		return err
	}
	r.settleOrdered(ctx, mark, ev)
	if err := msg.TermWithReason(out.Decision.Reason); err != nil {
		return fmt.Errorf("dead-lettered, but terminating the original failed (it comes back and is dropped as a duplicate): %w", err)
	}
	r.forgetHistory(ctx, ev)
	return nil
}

// writeDeadLetter writes ev's dead letter, with its history, and waits for
// JetStream to confirm it. It does not touch the original.
func (r *Relay) writeDeadLetter(ctx context.Context, ev event, attempt int, out *Outcome) error {
	hist := r.history(ctx, ev)
	made := attempt - 1 // attempts made before this one
	if out.Result.Attempted() {
		if !out.recorded { // else the history has it already
			hist = append(hist, attemptOf(attempt, r.cfg.Now(), out.Result))
		}
		made = attempt
	}
	l := dlq.Letter{
		DeadAt:    r.cfg.Now().UTC(),
		Dest:      ev.dest,
		EventID:   ev.id,
		Reason:    out.Decision.Reason,
		Note:      cmp.Or(out.note, out.Decision.Note),
		Attempts:  max(made, 0),
		Subject:   ev.subject,
		StreamSeq: ev.seq,
		History:   hist,
		Headers:   ev.hdr,
		Body:      ev.body,
	}
	if n := len(hist); n > 0 {
		l.First, l.Last = hist[0].At, hist[n-1].At
		l.LastStatus, l.LastError = hist[n-1].Status, hist[n-1].Error
	}
	_, err := r.dlq.Write(ctx, l)
	return err
}

// park moves ev to the Redis schedule and acks it once Redis confirmed.
// It reports whether the event was parked (then it must not also be nak'd).
func (r *Relay) park(ctx context.Context, msg jetstream.Msg, ev event, attempt int, delay time.Duration) (bool, error) {
	if err := r.republishable(ev); err != nil {
		return false, err
	}
	p, err := stream.ParseSubject(ev.subject)
	if err != nil {
		return false, err
	}
	e := schedule.Entry{
		Dest:      ev.dest,
		Subject:   p.InputSubject(),
		EventID:   ev.id,
		Attempts:  attempt,
		Headers:   ev.hdr,
		Body:      ev.body,
		Due:       r.cfg.Now().Add(delay),
		Published: ev.published,
		Origin:    ev.origin,
	}
	pctx, cancel := context.WithTimeout(ctx, parkTimeout)
	defer cancel()
	if err := r.cfg.Schedule.Park(pctx, e); err != nil {
		return false, err
	}
	if err := r.markParked(ctx, ev); err != nil {
		// The ack below may still be lost in a crash, and this message
		// then delivered besides its copy: at least once.
		r.log.Warn("parked, but cannot record it in the attempt log (a crash of the NATS server now could deliver the event twice)", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
	if err := msg.DoubleAck(ctx); err != nil {
		// Parked, but JetStream may deliver it again as well: at least once.
		return true, fmt.Errorf("parked, but the ack was not confirmed (the event may be attempted twice): %w", err)
	}
	return true, nil
}

// republishHeaders bounds what the promoter adds to a parked event besides
// two copies of its id (Nats-Msg-Id with the attempt, Relay-Event-Id): the
// attempt, the origin sequence and the publish time, with their names.
const republishHeaders = 256

// republishable reports an event too large to come back from Redis: its
// copy, with the headers the promoter adds, would exceed the events
// stream's or the server's largest message. Such an event is not parked;
// it waits in JetStream.
func (r *Relay) republishable(ev event) error {
	size := len(ev.body) + 2*len(ev.id) + republishHeaders
	for k, vs := range ev.hdr {
		for _, v := range vs {
			size += len(k) + len(v) + 4 // "K: V\r\n"
		}
	}
	if r.maxMsg > 0 && size > r.maxMsg {
		return fmt.Errorf("event of about %d bytes with the headers of its copy: over the largest message of %d bytes, so it cannot be republished from Redis", size, r.maxMsg)
	}
	return nil
}

// parkTimeout bounds a park; Redis being slow must not stall deliveries.
const parkTimeout = 2 * time.Second

func attemptOf(n int, at time.Time, res Result) dlq.Attempt {
	a := dlq.Attempt{N: n, At: at.Add(-res.Duration).UTC(), Duration: res.Duration, Status: res.Status}
	switch {
	case res.Err != nil:
		a.Error = res.Err.Error()
	case res.Snippet != "":
		a.Error = res.Snippet
	}
	return a
}

func historyKey(ev event) string {
	sum := sha256.Sum256([]byte(ev.id))
	return ev.dest + "." + hex.EncodeToString(sum[:16])
}

// attemptLog is what relay keeps about an event in retry: its failed
// attempts (the history, trimmed) and how many attempts counted so far.
type attemptLog struct {
	// Event is the event's id (the key is a hash of it).
	Event    string        `json:"event,omitempty"`
	Attempts []dlq.Attempt `json:"attempts,omitempty"`
	Made     int           `json:"made"`
	// Reply is the ack subject of the delivery whose attempt failed last:
	// Store.SkipHead naks it (nakIfWaiting) so that the event comes back
	// at once.
	Reply string `json:"reply,omitempty"`
	// Skip, set by an operator (Store.SkipHead, Store.SkipEvent), says why: the event
	// stored at SkipSeq is dead-lettered at its next delivery, without an
	// attempt, or after the attempt in flight if that fails. The sequence
	// keeps a mark left behind from applying to a replay of the event,
	// which has the same id.
	Skip    string `json:"skip,omitempty"`
	SkipSeq uint64 `json:"skip_seq,omitempty"`
	// Origin is the origin (event.origin) of the delivery whose attempt
	// failed last. SkipOrigin, set by Store.SkipEvent, makes the mark apply
	// as well to the messages that bring the event back from Redis under
	// new sequences; a replay of the event is a message of its own origin.
	Origin     uint64 `json:"origin,omitempty"`
	SkipOrigin uint64 `json:"skip_origin,omitempty"`
	// Parked is the last sequence of the event (origin Origin) that relay
	// parked in Redis: that message and those before it were handed to
	// Redis, and come back only because an ack was lost (parkedAlready).
	Parked uint64 `json:"parked,omitempty"`
	// SkipLegacy marks an event whose last failed attempt an earlier
	// version recorded (no Origin): the mark applies to a message brought
	// back from Redis without an origin (Relay-Attempt but no
	// Relay-Origin-Seq), which is how that version parked it.
	SkipLegacy bool `json:"skip_legacy,omitempty"`
}

// skipOf is the operator's reason to skip ev, if l marks it.
func (l attemptLog) skipOf(ev event) string {
	if l.Skip != "" && (l.SkipSeq == ev.seq || l.SkipOrigin != 0 && l.SkipOrigin == ev.origin ||
		l.SkipLegacy && ev.prior > 0 && ev.origin == ev.seq) {
		return l.Skip
	}
	return ""
}

// last is when the last recorded attempt was made, and how it failed.
func (l attemptLog) last() (time.Time, string) {
	if len(l.Attempts) == 0 {
		return time.Time{}, ""
	}
	a := l.Attempts[len(l.Attempts)-1]
	switch {
	case a.Status == 0:
		return a.At, a.Error
	case a.Error == "":
		return a.At, fmt.Sprintf("status %d", a.Status)
	}
	return a.At, fmt.Sprintf("status %d: %s", a.Status, a.Error)
}

// readAttemptLog reads the attempt log stored under key in the
// relay_attempts bucket kv, and its revision (for a compare-and-set). A log
// stored corrupt reads as empty.
func readAttemptLog(ctx context.Context, kv jetstream.KeyValue, key string) (attemptLog, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return attemptLog{}, 0, err
	}
	var l attemptLog
	_ = json.Unmarshal(e.Value(), &l)
	return l, e.Revision(), nil
}

// attemptLog returns what is recorded for ev (nothing if that fails).
func (r *Relay) attemptLog(ctx context.Context, ev event) attemptLog {
	l, _ := r.readLog(ctx, ev)
	return l
}

// readLog returns what is recorded for ev, and whether a record was found.
func (r *Relay) readLog(ctx context.Context, ev event) (attemptLog, bool) {
	l, _, err := readAttemptLog(ctx, r.attempts, historyKey(ev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.log.Warn("cannot read attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
	return l, err == nil
}

func (r *Relay) history(ctx context.Context, ev event) []dlq.Attempt {
	return r.attemptLog(ctx, ev).Attempts
}

// recordAttempt adds a failed attempt to ev's history, with reply, the ack
// subject of its delivery, and returns an operator's reason to skip ev if
// one was set. A failure to record is logged: the history is then
// incomplete, the event is not affected. It is a compare-and-set, so that a
// mark set meanwhile (Store.SkipHead) is kept.
func (r *Relay) recordAttempt(ctx context.Context, ev event, attempt int, res Result, reply string) string {
	key := historyKey(ev)
	add := func(l attemptLog) []byte {
		l.Attempts = dlq.TrimHistory(append(l.Attempts, attemptOf(attempt, r.cfg.Now(), res)))
		l.Made = max(l.Made, attempt)
		l.Event, l.Reply, l.Origin = ev.id, reply, ev.origin
		b, _ := json.Marshal(l)
		return b
	}
	var err error
	for range 5 {
		l, rev, gerr := readAttemptLog(ctx, r.attempts, key)
		switch {
		case gerr == nil:
			if l.Origin != 0 && l.Origin != ev.origin {
				r.log.Warn("two messages with one event id are in retry at once: their attempts share one record (publish each event id once)",
					"dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "other_seq", l.Origin)
			}
			_, err = r.attempts.Update(ctx, key, add(l), rev)
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			_, err = r.attempts.Create(ctx, key, add(l))
		default:
			// The record cannot be read (a stored one that does not
			// decode reads as empty, so this is the bucket failing). A
			// write without its revision would replace the history, the
			// count and an operator's skip mark with this one attempt;
			// a create writes only where there is no record (after a
			// first attempt, say), and fails where there is one.
			_, err = r.attempts.Create(ctx, key, add(attemptLog{}))
			if errors.Is(err, jetstream.ErrKeyExists) {
				err = gerr // there is a record: leave it, this attempt goes unrecorded
			}
		}
		if err == nil {
			return l.skipOf(ev)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			break // failed for another reason than a race
		}
	}
	r.log.Warn("cannot record attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
	return ""
}

// settleOrdered records in mark, when ev heads an ordered key, that ev is
// settled, and reports whether it did. A failure is logged: the event is
// settled all the same, and only a crash of the NATS server's process
// before its ack is written could then bring it back, out of order.
func (r *Relay) settleOrdered(ctx context.Context, mark *partitionMark, ev event) bool {
	if mark == nil {
		return false
	}
	if err := mark.settle(ctx, ev.seq); err != nil {
		r.log.Warn("cannot record the head of an ordered key as settled", "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
		return false
	}
	return true
}

// ackSettled acknowledges, without an attempt, a message whose event was
// settled before: why says how relay knows.
func (r *Relay) ackSettled(msg jetstream.Msg, ev event, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	err := msg.DoubleAck(ctx)
	r.log.Info("acknowledged without an attempt: "+why, "dest", ev.dest, "event_id", ev.id, "seq", ev.seq, "err", err)
	r.cfg.Metrics.settledAgain(ev.dest)
}

// handBack hands msg back to JetStream without an attempt (attempts are
// counted in the attempt log, so this uses none up).
func (r *Relay) handBack(msg jetstream.Msg, delay time.Duration) {
	_ = msg.NakWithDelay(delay)
}

// forgetHistory deletes ev's attempt log once ev is settled. Where the log
// says the event was parked, a done mark keeps that first: the message it
// was parked from may still come back after a crash.
func (r *Relay) forgetHistory(ctx context.Context, ev event) {
	if ev.parked != 0 {
		b, _ := json.Marshal(doneMark{Parked: ev.parked, Origin: ev.origin})
		if _, err := r.attempts.Put(ctx, doneKey(ev), b); err != nil {
			r.log.Warn("cannot record that a parked event is settled (a crash of the NATS server could deliver it again)", "dest", ev.dest, "event_id", ev.id, "err", err)
		}
	}
	if err := r.attempts.Delete(ctx, historyKey(ev)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.log.Warn("cannot delete attempt history", "dest", ev.dest, "event_id", ev.id, "err", err)
	}
}

func (r *Relay) logOutcome(o Outcome) {
	// A dead letter needs someone's attention: WARN, like a failure to act.
	level := slog.LevelInfo
	if o.Err != nil || o.Decision.Action == DeadLetter {
		level = slog.LevelWarn
	}
	if !r.log.Enabled(context.Background(), level) {
		return // on the hot path: build nothing that is not logged
	}
	attrs := []any{"dest", o.Dest, "event_id", o.EventID, "seq", o.Seq, "attempt", o.Attempt,
		"outcome", o.Decision.Action.String()}
	if o.Result.Status != 0 {
		attrs = append(attrs, "status", o.Result.Status)
	}
	if o.Result.Err != nil {
		attrs = append(attrs, "error", o.Result.Err.Error())
	}
	attrs = append(attrs, "duration", o.Result.Duration.Round(time.Microsecond))
	switch o.Decision.Action {
	case Retry, Park:
		attrs = append(attrs, "retry_in", o.Decision.Delay.Round(time.Millisecond))
		if o.Parked {
			attrs = append(attrs, "parked", true)
		}
	case DeadLetter:
		attrs = append(attrs, "reason", o.Decision.Reason)
	}
	if o.Err != nil {
		attrs = append(attrs, "act_error", o.Err.Error())
	}
	r.log.Log(context.Background(), level, "attempt", attrs...)
}
