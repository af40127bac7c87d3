package relay

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/internal/lease"
	"github.com/relaydev/relay/opevent"
	"github.com/relaydev/relay/stream"
)

// opsQueue is how many operator events may wait to be published; an
// emitter waits while it is full.
const opsQueue = 256

// opPublishTimeout bounds the publish of one operator event, and opsDrain
// the publish of those still queued when relay stops.
const (
	opPublishTimeout = 10 * time.Second
	opsDrain         = 5 * time.Second
)

// startOps starts publishOps, and returns what stops it once no one emits
// any more: the events still queued then get opsDrain to be published.
func (r *Relay) startOps() (stop func()) {
	stopping, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.publishOps(stopping)
	}()
	return func() {
		t := time.AfterFunc(opsDrain, cancel)
		defer t.Stop()
		close(r.ops)
		<-done
		cancel()
	}
}

// publishOps publishes the queued operator events in the order they were
// emitted, until ops is closed and drained, logging those that could not
// be (at most once a second, with a count).
func (r *Relay) publishOps(stopping context.Context) {
	failed, lastWarn := 0, time.Time{}
	for ev := range r.ops {
		ctx, cancel := context.WithTimeout(stopping, opPublishTimeout)
		err := opevent.Publish(ctx, r.cfg.JS, ev)
		cancel()
		if err == nil {
			r.signals.OpEvent.Signal(ev.Type)
			continue
		}
		failed++
		if now := time.Now(); now.Sub(lastWarn) >= time.Second {
			r.log.Warn("cannot publish an operator event", "type", ev.Type, "id", ev.ID, "err", err, "failed_since_last_warning", failed)
			failed, lastWarn = 0, now
		}
	}
	if failed > 0 {
		r.log.Warn("operator events not published when relay stopped", "count", failed)
	}
}

// job's lease: one replica watches backlogs and dead letters.
const OpsKey = "ops"

// opsState is the job's lease value.
type opsState struct {
	Holder string `json:"holder,omitempty"`
}

// opsEvery is how often the job looks at every destination's backlog.
const opsEvery = 10 * time.Second

// opsJob watches, on one replica at a time, what no single delivery shows:
// a destination whose oldest undelivered event is older than
// Config.AlertBacklogAge (relay.destination.backlog_stale, once each time
// it becomes so), and dead letters (relay.dead_letters, per destination at
// most once a minute, when a minute had at least Config.AlertDeadLetters).
type opsJob struct {
	r *Relay
	// stale are the destinations found stale, with the episode's oldest
	// event's time (its id).
	stale map[string]time.Time

	mu sync.Mutex
	// window gathers the current minute's dead letters by destination.
	windowStart time.Time
	window      map[string]*opevent.DeadLettersBody
}

func (r *Relay) runOps(ctx context.Context, id string) {
	if r.cfg.NoOperatorEvents || (r.cfg.AlertBacklogAge <= 0 && r.cfg.AlertDeadLetters <= 0) {
		return
	}
	j := &opsJob{r: r, stale: map[string]time.Time{}, window: map[string]*opevent.DeadLettersBody{}}
	lease.Run(ctx, r.cfg.JS, lease.Config{Name: "operator events (backlog and dead-letter alerts are not emitted meanwhile)", Key: OpsKey,
		ID: id, Takeover: r.cfg.CheckTakeover, Now: r.cfg.Now, Log: r.log}, lease.Job[opsState](opsLease{j: j, id: id}))
}

// opsLease is the operator-events job as a leased job: its lease value is
// an opsState, which records no progress.
type opsLease struct {
	j  *opsJob
	id string
}

func (l opsLease) Holder(st opsState) string { return st.Holder }

func (l opsLease) Take(*opsState, time.Time) (opsState, error) { return opsState{Holder: l.id}, nil }

func (l opsLease) Progress(holder string) opsState { return opsState{Holder: holder} }

func (l opsLease) Work(ctx context.Context) error { return l.j.work(ctx) }

// work runs while this replica holds the lease: it follows the dead
// letters stored from now on, and looks at the backlogs every opsEvery.
func (j *opsJob) work(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	now := j.r.cfg.Now()
	win := j.r.cfg.alertWindow
	j.mu.Lock()
	j.windowStart, j.window = now.Truncate(win), map[string]*opevent.DeadLettersBody{}
	j.mu.Unlock()
	errs := make(chan error, 1)
	if j.r.cfg.AlertDeadLetters > 0 {
		go func() { errs <- j.followDeadLetters(ctx, now) }()
	}
	tick := time.NewTicker(j.r.cfg.opsEvery)
	defer tick.Stop()
	minute := time.NewTimer(now.Truncate(win).Add(win).Sub(now))
	defer minute.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-tick.C:
			j.checkBacklogs(ctx)
		case <-minute.C:
			j.closeWindow()
			t := j.r.cfg.Now()
			minute.Reset(t.Truncate(win).Add(win).Sub(t))
		}
	}
}

// checkBacklogs emits backlog_stale for each destination whose oldest
// undelivered event became older than the threshold.
func (j *opsJob) checkBacklogs(ctx context.Context) {
	limit := j.r.cfg.AlertBacklogAge
	if limit <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	all, err := Stats(ctx, j.r.cfg.JS, nil)
	if err != nil {
		j.r.log.Warn("operator events: cannot read the destinations' backlogs", "err", err)
		return
	}
	now := j.r.cfg.Now()
	seen := map[string]bool{}
	for _, s := range all {
		seen[s.Dest] = true
		if s.OldestUndelivered.IsZero() || now.Sub(s.OldestUndelivered) < limit || j.onlyOpEvents(s.Dest) {
			delete(j.stale, s.Dest)
			continue
		}
		if _, ok := j.stale[s.Dest]; ok {
			continue // said already, for this episode
		}
		j.stale[s.Dest] = s.OldestUndelivered
		j.r.emitOp(opevent.Event{Type: opevent.BacklogStale, ID: opevent.ID(opevent.BacklogStale, s.Dest, strconv.FormatInt(s.OldestUndelivered.UnixNano(), 10)),
			Data: opevent.BacklogStaleBody{Dest: s.Dest, At: now.UTC(), OldestUndelivered: s.OldestUndelivered.UTC(), AgeSeconds: now.Sub(s.OldestUndelivered).Seconds(),
				Backlog: s.Backlog, ThresholdSeconds: limit.Seconds()}})
	}
	for d := range j.stale {
		if !seen[d] {
			delete(j.stale, d)
		}
	}
	j.r.opsLooks.Add(1)
}

// onlyOpEvents reports whether dest receives operator events only: its
// backlog is of operator events, and an alert about it would be one about
// their delivery.
func (j *opsJob) onlyOpEvents(dest string) bool {
	d, ok := j.r.dests.Get(dest)
	if !ok || len(d.Types) == 0 {
		return false
	}
	for _, t := range d.Types {
		if !opevent.Is(t) {
			return false
		}
	}
	return true
}

// followDeadLetters counts the dead letters stored from since on, per
// destination, leaving out those of operator events.
func (j *opsJob) followDeadLetters(ctx context.Context, since time.Time) error {
	err := stream.Read(ctx, j.r.cfg.JS, stream.DLQStream, stream.ReadOptions{Since: since, Follow: true, HeadersOnly: true, Description: "relay operator events"},
		func(m *jetstream.RawStreamMsg) error {
			l, _ := stream.DecodeLetter(m.Sequence, m.Subject, m.Header, nil) // one without a destination counts too
			if opevent.Is(l.Type) {
				return nil // no feedback loop
			}
			dest, _ := stream.DLQDest(m.Subject)
			j.mu.Lock()
			defer j.mu.Unlock()
			w := j.window[dest]
			if w == nil {
				w = &opevent.DeadLettersBody{Dest: dest, Reasons: map[string]int{}}
				j.window[dest] = w
			}
			w.Count++
			w.Reasons[l.Reason]++
			if id := l.EventID; id != "" && len(w.EventIDs) < 5 {
				w.EventIDs = append(w.EventIDs, id)
			}
			return nil
		})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// closeWindow emits relay.dead_letters for each destination whose minute
// reached the threshold, and starts the next minute.
func (j *opsJob) closeWindow() {
	j.mu.Lock()
	win := j.r.cfg.alertWindow
	start, window := j.windowStart, j.window
	end := j.r.cfg.Now().Truncate(win)
	if !end.After(start) {
		end = start.Add(win)
	}
	j.windowStart, j.window = end, map[string]*opevent.DeadLettersBody{}
	j.mu.Unlock()
	for _, dest := range slices.Sorted(maps.Keys(window)) {
		w := window[dest]
		if w.Count < j.r.cfg.AlertDeadLetters {
			continue
		}
		w.WindowStart, w.WindowEnd = start.UTC(), end.UTC()
		j.r.emitOp(opevent.Event{Type: opevent.DeadLetters, ID: opevent.ID(opevent.DeadLetters, dest, opevent.Millis(start)), Data: w})
	}
}
