package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Operator events: typed events relay publishes about itself, under the
// reserved prefix "relay.". Any destination may subscribe to them
// (--type 'relay.>') and gets them with every guarantee of a delivery.
// Each has a stable id (its Nats-Msg-Id and webhook-id), so that one
// published twice is stored once within the duplicate window and
// deduplicated by its receiver after. docs/operator-events.md has their
// bodies' JSON schemas.
const (
	OpBreakerOpened  = "relay.destination.breaker_opened"
	OpBreakerClosed  = "relay.destination.breaker_closed"
	OpDisabled       = "relay.destination.disabled"
	OpBacklogStale   = "relay.destination.backlog_stale"
	OpDeadLetters    = "relay.dead_letters"
	OpReplayFinished = "relay.replay.finished"
)

// OpPrefix starts every operator event's type.
const OpPrefix = stream.ReservedTypePrefix

// IsOpEvent reports whether typ is an operator event's type. relay emits
// no operator event about the delivery of one: an operations destination
// that is down must not feed itself.
func IsOpEvent(typ string) bool { return strings.HasPrefix(typ, OpPrefix) }

// OpEvent is an operator event to publish.
type OpEvent struct {
	Type string
	// ID is stable: the same occurrence always gets the same id.
	ID   string
	Data any
}

// opPublishTimeout bounds the publish of an operator event.
const opPublishTimeout = 5 * time.Second

// PublishOpEvent stores ev as a typed event, deduplicated by its id. Its
// body is ev.Data, a JSON object, with the event's type as its first
// field, "type": a receiver tells the event from its body alone.
func PublishOpEvent(ctx context.Context, js jetstream.JetStream, ev OpEvent) error {
	body, err := opBody(ev)
	if err != nil {
		return err
	}
	env := stream.Envelope{ID: ev.ID, Type: ev.Type, Body: body, Headers: map[string][]string{"Content-Type": {"application/json"}}}
	ctx, cancel := context.WithTimeout(ctx, opPublishTimeout)
	defer cancel()
	if _, err := js.PublishMsg(ctx, env.Msg(stream.Produced, stream.TypeSubject(ev.Type), nil)); err != nil {
		return fmt.Errorf("publish operator event %s: %w", ev.Type, err)
	}
	return nil
}

// opBody is ev.Data as JSON with "type": ev.Type first.
func opBody(ev OpEvent) ([]byte, error) {
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("operator event %s: %w", ev.Type, err)
	}
	if len(data) < 2 || data[0] != '{' {
		return nil, fmt.Errorf("operator event %s: its data %s is not a JSON object", ev.Type, data)
	}
	typ, _ := json.Marshal(ev.Type)
	body := append([]byte(`{"type":`), typ...)
	if data[1] != '}' {
		body = append(body, ',')
	}
	return append(body, data[1:]...), nil
}

// opID is a stable id: the type and the parts that name the occurrence.
func opID(typ string, parts ...string) string {
	return typ + ":" + strings.Join(parts, ":")
}

func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// NewReplayID is the id of one replay's relay.replay.finished.
func NewReplayID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return opID(OpReplayFinished, hex.EncodeToString(b))
}

// ReplayFinished is the body of relay.replay.finished.
type ReplayFinished struct {
	At time.Time `json:"at"`
	// By is what replayed: "relay dlq replay", "relay replay", or "api".
	By         string `json:"by"`
	Dest       string `json:"dest,omitempty"`
	ToDest     string `json:"to_dest,omitempty"`
	Matched    int    `json:"matched"`
	Replayed   int    `json:"replayed"`
	Duplicates int    `json:"duplicates"`
	Skipped    int    `json:"skipped"`
	Failed     int    `json:"failed"`
}

// emitOp publishes an operator event from relay's delivery path, logging a
// failure (an operator event is never worth holding a delivery for).
func (r *Relay) emitOp(ev OpEvent) {
	if r.cfg.NoOperatorEvents {
		return
	}
	if err := PublishOpEvent(context.Background(), r.cfg.JS, ev); err != nil {
		r.log.Warn("cannot publish an operator event", "type", ev.Type, "id", ev.ID, "err", err)
	}
}

// The bodies of the destination events.
type breakerOpened struct {
	Dest        string    `json:"dest"`
	At          time.Time `json:"at"`
	PausedUntil time.Time `json:"paused_until"`
	Trips       int       `json:"trips"`
	Threshold   int       `json:"threshold"`
}

type breakerClosed struct {
	Dest string    `json:"dest"`
	At   time.Time `json:"at"`
}

type disabled struct {
	Dest string    `json:"dest"`
	At   time.Time `json:"at"`
	// Reason is gone (it answered 410) or operator.
	Reason      string    `json:"reason"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	EventID     string    `json:"event_id,omitempty"`
}

type backlogStale struct {
	Dest              string    `json:"dest"`
	At                time.Time `json:"at"`
	OldestUndelivered time.Time `json:"oldest_undelivered"`
	AgeSeconds        float64   `json:"age_seconds"`
	Backlog           uint64    `json:"backlog"`
	ThresholdSeconds  float64   `json:"threshold_seconds"`
}

type deadLetters struct {
	Dest        string         `json:"dest"`
	WindowStart time.Time      `json:"window_start"`
	WindowEnd   time.Time      `json:"window_end"`
	Count       int            `json:"count"`
	Reasons     map[string]int `json:"reasons"`
	EventIDs    []string       `json:"event_ids"`
}

// OpsKey is the key, in the relay_state bucket, of the operator-events
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
	window      map[string]*deadLetters
}

func (r *Relay) runOps(ctx context.Context, id string) {
	if r.cfg.NoOperatorEvents || (r.cfg.AlertBacklogAge <= 0 && r.cfg.AlertDeadLetters <= 0) {
		return
	}
	j := &opsJob{r: r, stale: map[string]time.Time{}, window: map[string]*deadLetters{}}
	runLeased(ctx, r.cfg.JS, id, r.cfg.CheckTakeover, r.cfg.Now, r.log, leasedJob{
		what: "operator events (backlog and dead-letter alerts are not emitted meanwhile)",
		key:  OpsKey,
		holder: func(v []byte) (string, error) {
			var st opsState
			err := json.Unmarshal(v, &st)
			return st.Holder, err
		},
		take: func([]byte, time.Time) ([]byte, error) {
			return json.Marshal(opsState{Holder: id})
		},
		value: func(holder string) []byte {
			b, _ := json.Marshal(opsState{Holder: holder})
			return b
		},
		work: j.work,
	})
}

// work runs while this replica holds the lease: it follows the dead
// letters stored from now on, and looks at the backlogs every opsEvery.
func (j *opsJob) work(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	now := j.r.cfg.Now()
	win := j.r.cfg.alertWindow
	j.mu.Lock()
	j.windowStart, j.window = now.Truncate(win), map[string]*deadLetters{}
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
		j.r.emitOp(OpEvent{Type: OpBacklogStale, ID: opID(OpBacklogStale, s.Dest, strconv.FormatInt(s.OldestUndelivered.UnixNano(), 10)),
			Data: backlogStale{Dest: s.Dest, At: now.UTC(), OldestUndelivered: s.OldestUndelivered.UTC(), AgeSeconds: now.Sub(s.OldestUndelivered).Seconds(),
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
	d, ok := j.r.dests.get(dest)
	if !ok || len(d.Types) == 0 {
		return false
	}
	for _, t := range d.Types {
		if !IsOpEvent(t) {
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
			if IsOpEvent(m.Header.Get(stream.HdrType)) {
				return nil // no feedback loop
			}
			dest, _ := strings.CutPrefix(m.Subject, stream.DLQPrefix+".")
			j.mu.Lock()
			defer j.mu.Unlock()
			w := j.window[dest]
			if w == nil {
				w = &deadLetters{Dest: dest, Reasons: map[string]int{}}
				j.window[dest] = w
			}
			w.Count++
			w.Reasons[m.Header.Get(stream.HdrReason)]++
			if id := m.Header.Get(stream.HdrEventID); id != "" && len(w.EventIDs) < 5 {
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
	j.windowStart, j.window = end, map[string]*deadLetters{}
	j.mu.Unlock()
	for _, dest := range slices.Sorted(maps.Keys(window)) {
		w := window[dest]
		if w.Count < j.r.cfg.AlertDeadLetters {
			continue
		}
		w.WindowStart, w.WindowEnd = start.UTC(), end.UTC()
		j.r.emitOp(OpEvent{Type: OpDeadLetters, ID: opID(OpDeadLetters, dest, millis(start)), Data: w})
	}
}
