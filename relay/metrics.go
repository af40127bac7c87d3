package relay

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/spans"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Metrics are the Prometheus metrics of one relay process. A nil *Metrics
// records nothing.
type Metrics struct {
	// PerTenantDestination gives each tenant's destination series of its
	// own (dest="tenant=name"). Default false: all tenants' destinations
	// together are one series (TenantsLabel), so that the series do not
	// grow with tenants. Set it before use.
	PerTenantDestination bool

	deliveries      *prometheus.CounterVec
	attempts        *prometheus.HistogramVec
	responses       *prometheus.CounterVec
	attemptDuration *prometheus.HistogramVec
	latency         *prometheus.HistogramVec
	inFlight        *prometheus.GaugeVec
	parkFailures    *prometheus.CounterVec
	pauses          *prometheus.CounterVec
	settled         *prometheus.CounterVec
	deadLetterFails *prometheus.CounterVec
	filtered        *prometheus.CounterVec
	// The unknown-destination check's events.
	checkRead prometheus.Counter
	// checkListed counts the stream sequences the check settled from the
	// list of the stream's subjects.
	checkListed prometheus.Counter
	// The router's typed events without a subscriber, and copies.
	routedUnsubscribed, routedCopyCount prometheus.Counter
	tenantWaits                         prometheus.Counter
	// Attempts the egress proxy failed to carry.
	proxyFailures prometheus.Counter
	// The delivery log's records lost: not written (the writer's queue
	// full) or refused by JetStream.
	logDropped, logFailed, logIndexFailed prometheus.Counter

	// byDest caches each destination's series (*destMetrics): looking a
	// series up by its labels hashes them, six times per attempt otherwise.
	byDest sync.Map
}

// NewMetrics registers relay's delivery metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_deliveries_total",
			Help: "Attempts by outcome: delivered, retried, dead_lettered, or blocked (an ordered key's head retried).",
		}, []string{"dest", "outcome"}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_delivery_attempts",
			Help:    "Attempt number of successful deliveries (first-attempt success = bucket le=1 / count).",
			Buckets: []float64{1, 2, 3, 4, 5, 8, 13, 21},
		}, []string{"dest"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_http_responses_total",
			Help: "Attempts by HTTP status class (2xx..5xx), or error when no response came back, or blocked; url is the index of the URL in the destination's pool (0 without a pool).",
		}, []string{"dest", "class", "url"}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_attempt_duration_seconds",
			Help:    "Duration of one HTTP attempt; url is the index of the URL in the destination's pool (0 without a pool).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"dest", "url"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_delivery_latency_seconds",
			Help:    "From publish to confirmed delivery.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 24),
		}, []string{"dest"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_in_flight",
			Help: "Attempts in progress in this process.",
		}, []string{"dest"}),
		parkFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_park_failures_total",
			Help: "Waits that could not be parked in Redis and stayed in JetStream.",
		}, []string{"dest"}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_destination_pauses_total",
			Help: "Times this process paused a destination, by reason (circuit_open, retry_after, gone).",
		}, []string{"dest", "reason"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_settled_again_total",
			Help: "Events that came back although settled before (their ack lost in a crash of the NATS server's process), acknowledged without an attempt.",
		}, []string{"dest"}),
		deadLetterFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_dead_letter_failures_total",
			Help: "Events whose dead letter could not be stored for a reason retrying does not change; each stays in the event log (relay replay delivers it again).",
		}, []string{"dest"}),
		filtered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_filtered_total",
			Help: "Events the destination's filter turned down, acknowledged without an attempt.",
		}, []string{"dest"}),
	}
	m.checkRead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_unknown_destination_check_events_total",
		Help: "Events whose headers this process's unknown-destination check read: those of destinations it did not know to route them, or all with more than 20,000 event subjects.",
	})
	m.checkListed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_unknown_destination_check_listed_total",
		Help: "Stream sequences this process's unknown-destination check settled from the list of the stream's subjects, without reading their events.",
	})
	m.routedUnsubscribed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_typed_events_unsubscribed_total",
		Help: "Typed events this process's router found no destination subscribed to (counted, not dead-lettered).",
	})
	m.routedCopyCount = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_typed_event_copies_total",
		Help: "Copies of typed events this process's router published, one per subscribed destination.",
	})
	m.tenantWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_tenant_in_flight_waits_total",
		Help: "Deliveries handed back to JetStream because their tenant's in-flight slots (limits.max_in_flight) stayed taken: no attempt was used.",
	})
	m.proxyFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_egress_proxy_failures_total",
		Help: "Attempts the egress proxy failed to carry (down, refused the tunnel or the credentials, its own 5xx): handed back, no attempt used.",
	})
	m.logDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_attempt_log_dropped_total",
		Help: "Delivery-log records this process dropped because its writer fell behind (deliveries never wait for the log).",
	})
	m.logFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_attempt_log_write_failures_total",
		Help: "Delivery-log records JetStream did not store (their batch timed out or failed).",
	})
	m.logIndexFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_attempt_log_index_failures_total",
		Help: "Batches of the delivery log's index JetStream did not store: the records are kept, but 'relay events show' does not find them.",
	})
	reg.MustRegister(m.logDropped, m.logFailed, m.logIndexFailed)
	reg.MustRegister(m.deliveries, m.attempts, m.responses, m.attemptDuration, m.latency, m.inFlight, m.parkFailures, m.pauses, m.settled, m.deadLetterFails, m.filtered, m.checkRead, m.checkListed,
		m.routedUnsubscribed, m.routedCopyCount, m.tenantWaits, m.proxyFailures)
	return m
}

// LogLost counts n delivery-log records lost: dropped before they were
// written, or not stored.
func (m *Metrics) LogLost(n int, dropped bool) {
	switch {
	case m == nil:
	case dropped:
		m.logDropped.Add(float64(n))
	default:
		m.logFailed.Add(float64(n))
	}
}

// LogIndexLost counts a batch of the delivery log's index not stored.
func (m *Metrics) LogIndexLost() {
	if m != nil {
		m.logIndexFailed.Inc()
	}
}

// deadLetterFailed counts an event of dest whose dead letter could not be
// stored for good.
func (m *Metrics) deadLetterFailed(dest string) {
	if m != nil {
		m.deadLetterFails.WithLabelValues(m.label(dest)).Inc()
	}
}

// CheckedRead counts one event whose headers the unknown-destination check
// read.
func (m *Metrics) CheckedRead() {
	if m != nil {
		m.checkRead.Inc()
	}
}

// CheckedListed counts n stream sequences the check settled from the
// list of the stream's subjects.
func (m *Metrics) CheckedListed(n uint64) {
	if m != nil {
		m.checkListed.Add(float64(n))
	}
}

// tenantWaited counts a delivery handed back for its tenant's in-flight
// slots.
func (m *Metrics) tenantWaited() {
	if m != nil {
		m.tenantWaits.Inc()
	}
}

// proxyFailure counts an attempt the egress proxy failed to carry.
func (m *Metrics) proxyFailure() {
	if m != nil {
		m.proxyFailures.Inc()
	}
}

// RoutedNone counts a typed event no destination subscribed to.
func (m *Metrics) RoutedNone() {
	if m != nil {
		m.routedUnsubscribed.Inc()
	}
}

// RoutedCopies counts n copies of a typed event.
func (m *Metrics) RoutedCopies(n int) {
	if m != nil {
		m.routedCopyCount.Add(float64(n))
	}
}

// destMetrics are one destination's series, each created on first use so
// that only what happened is exported.
type destMetrics struct {
	inFlight          lazy[prometheus.Gauge]
	attempts, latency lazy[prometheus.Observer]
	outcomes          [4]lazy[prometheus.Counter] // delivered, retried, blocked, dead_lettered
	filtered          lazy[prometheus.Counter]
	byURL             [destination.MaxPoolURLs]lazy[*urlMetrics]
}

// urlMetrics are the attempt series of one URL of a destination's pool.
type urlMetrics struct {
	attemptDuration lazy[prometheus.Observer]
	responses       [7]lazy[prometheus.Counter] // by classIndex
}

// urlLabels are the values of the url label, by index in the pool.
var urlLabels = func() (l [destination.MaxPoolURLs]string) {
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	return l
}()

// urlIndex is the pool index r's attempt went to, as a label value.
func urlIndex(r Result) int {
	if r.URL < 0 || r.URL >= destination.MaxPoolURLs {
		return 0
	}
	return r.URL
}

const (
	outDelivered = iota
	outRetried
	outBlocked
	outDeadLettered
)

var (
	outcomeNames = [4]string{"delivered", "retried", "blocked", "dead_lettered"}
	classNames   = [7]string{"1xx", "2xx", "3xx", "4xx", "5xx", "error", "blocked"}
)

// classIndex is r's index in classNames, or -1 for a status outside 1xx-5xx.
func classIndex(r Result) int {
	switch {
	case r.Blocked:
		return 6
	case r.Delivered:
		return 1 // 2xx: every kind's success
	case r.Status == 0:
		return 5
	case r.Status >= 100 && r.Status < 600:
		return r.Status/100 - 1
	}
	return -1
}

// lazy is a metric series created on first use.
type lazy[T any] struct{ p atomic.Pointer[T] }

func (l *lazy[T]) get(create func() T) T {
	if s := l.p.Load(); s != nil {
		return *s
	}
	s := create()
	l.p.Store(&s) // two callers may both create it: the vector returns the same series
	return s
}

// TenantsLabel is the dest label of every tenant's destination together,
// unless Metrics.PerTenantDestination (StateCollector.PerTenantDestination).
const TenantsLabel = "(tenants)"

// label is destination dest's dest label.
func (m *Metrics) label(dest string) string { return destLabel(dest, m.PerTenantDestination) }

func destLabel(dest string, perTenant bool) string {
	if !perTenant && strings.Contains(dest, stream.RefSep) {
		return TenantsLabel
	}
	return dest
}

func (m *Metrics) forDest(dest string) *destMetrics {
	if dm, ok := m.byDest.Load(dest); ok {
		return dm.(*destMetrics)
	}
	actual, _ := m.byDest.LoadOrStore(dest, &destMetrics{})
	return actual.(*destMetrics)
}

func (m *Metrics) outcome(dm *destMetrics, dest string, i int) {
	dm.outcomes[i].get(func() prometheus.Counter { return m.deliveries.WithLabelValues(dest, outcomeNames[i]) }).Inc()
}

func (m *Metrics) response(um *urlMetrics, dest, url string, r Result) {
	i := classIndex(r)
	if i < 0 {
		m.responses.WithLabelValues(dest, statusClass(r), url).Inc()
		return
	}
	um.responses[i].get(func() prometheus.Counter { return m.responses.WithLabelValues(dest, classNames[i], url) }).Inc()
}

// attemptStarted counts an attempt to dest in relay_in_flight.
func (m *Metrics) attemptStarted(dest string) inFlight {
	if m == nil {
		return inFlight{}
	}
	dest = m.label(dest)
	g := m.forDest(dest).inFlight.get(func() prometheus.Gauge { return m.inFlight.WithLabelValues(dest) })
	g.Inc()
	return inFlight{g}
}

// inFlight is an attempt counted in relay_in_flight until done is called.
type inFlight struct{ g prometheus.Gauge }

func (f inFlight) done() {
	if f.g != nil {
		f.g.Dec()
	}
}

// SharedHistograms is the dest label of the histograms of every shared
// destination together: relay_attempt_duration_seconds,
// relay_delivery_attempts and relay_delivery_latency_seconds. A
// deployment with thousands of destinations would otherwise export
// thousands of histograms (and hold them: about 6 KB each); their
// counters and gauges keep the destination's name.
const SharedHistograms = "(shared)"

// observe records one acted-on attempt. shared: the destination is shared
// (see SharedHistograms).
func (m *Metrics) observe(o Outcome, ordered, shared bool, published time.Time, now time.Time) {
	if m == nil || o.Err != nil {
		return
	}
	o.Dest = m.label(o.Dest)
	dm := m.forDest(o.Dest)
	hist := o.Dest
	if shared {
		hist = SharedHistograms
	}
	if o.Result.Attempted() {
		u := urlIndex(o.Result)
		um := dm.byURL[u].get(func() *urlMetrics { return &urlMetrics{} })
		m.response(um, o.Dest, urlLabels[u], o.Result)
		um.attemptDuration.get(func() prometheus.Observer { return m.attemptDuration.WithLabelValues(hist, urlLabels[u]) }).Observe(o.Result.Duration.Seconds())
	}
	switch o.Decision.Action {
	case Ack:
		m.outcome(dm, o.Dest, outDelivered)
		dm.attempts.get(func() prometheus.Observer { return m.attempts.WithLabelValues(hist) }).Observe(float64(o.Attempt))
		if !published.IsZero() {
			dm.latency.get(func() prometheus.Observer { return m.latency.WithLabelValues(hist) }).Observe(now.Sub(published).Seconds())
		}
	case Retry, Park:
		if ordered {
			m.outcome(dm, o.Dest, outBlocked)
		} else {
			m.outcome(dm, o.Dest, outRetried)
		}
		if !o.Parked && o.parkTried {
			m.parkFailures.WithLabelValues(o.Dest).Inc()
		}
	case DeadLetter:
		m.outcome(dm, o.Dest, outDeadLettered)
	case AckFiltered:
		dm.filtered.get(func() prometheus.Counter { return m.filtered.WithLabelValues(o.Dest) }).Inc()
	}
}

func (m *Metrics) settledAgain(dest string) {
	if m != nil {
		m.settled.WithLabelValues(m.label(dest)).Inc()
	}
}

func (m *Metrics) paused(dest, reason string) {
	if m != nil {
		m.pauses.WithLabelValues(m.label(dest), reason).Inc()
	}
}

// StateCollector exports the state of every destination, read from
// JetStream and Redis at each scrape (like 'relay stats').
type StateCollector struct {
	JS       jetstream.JetStream
	Schedule *schedule.Store // optional
	Timeout  time.Duration   // per scrape; default 5s
	// PerTenantDestination: see Metrics.PerTenantDestination. Without
	// it the tenants' destinations are summed into one series each
	// (TenantsLabel): their backlogs, counts and paused destinations
	// added up, the oldest age the oldest of all.
	PerTenantDestination bool

	// now is the clock: it decides the paused state and the oldest
	// event's age. Default time.Now.
	now func() time.Time

	backlog, unacked, retrying, parked, dead, oldest, paused, blocked, up *prometheus.Desc
	checkLag, routerLag                                                   *prometheus.Desc
	sharedBacklog, sharedUnacked                                          *prometheus.Desc
}

// NewStateCollector returns a collector of destination state.
func NewStateCollector(js jetstream.JetStream, sched *schedule.Store) *StateCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"dest"}, nil)
	}
	return &StateCollector{
		JS: js, Schedule: sched, Timeout: 5 * time.Second, now: time.Now,
		backlog:       d("relay_backlog", "Events not yet handed to a relay."),
		unacked:       d("relay_unacked", "Events handed out and not acknowledged: in flight or waiting in JetStream for a retry."),
		retrying:      d("relay_retrying", "Unacknowledged events delivered more than once."),
		parked:        d("relay_parked", "Events waiting in Redis for a later attempt."),
		dead:          d("relay_dead_letters", "Dead letters kept."),
		oldest:        d("relay_oldest_undelivered_age_seconds", "Age of the oldest event not yet delivered (0 when none)."),
		paused:        d("relay_destination_paused", "1 when the destination is paused (operator, circuit breaker, Retry-After or 410 Gone)."),
		blocked:       d("relay_blocked_partitions", "Partitions of an ordered destination whose head is being retried."),
		up:            prometheus.NewDesc("relay_state_scrape_ok", "1 when the destination state could be read.", nil, nil),
		routerLag:     prometheus.NewDesc("relay_router_lag", "Typed events the router has not copied to their subscribers yet (it grows while no replica routes, or while routing is stuck).", nil, nil),
		sharedBacklog: prometheus.NewDesc("relay_shared_backlog", "Events the shared consumer has not handed to a relay yet, of every destination (those of destinations with consumers of their own are acknowledged at once).", nil, nil),
		sharedUnacked: prometheus.NewDesc("relay_shared_unacked", "Events of shared destinations handed out by the shared consumer and not acknowledged: queued or in flight in a relay, or waiting in JetStream for a retry.", nil, nil),
		checkLag:      prometheus.NewDesc("relay_unknown_destination_check_lag", "Events published for a destination that the check for unknown destinations has not gone through yet (it grows while no replica runs the check, or while the check is stuck).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.unacked, c.retrying, c.parked, c.dead, c.oldest, c.paused, c.blocked, c.up, c.checkLag, c.routerLag, c.sharedBacklog, c.sharedUnacked} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	clock := c.now
	if clock == nil {
		clock = time.Now
	}
	all, err := stats(ctx, c.JS, c.Schedule, clock)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	if lag, err := routing.CheckLag(ctx, c.JS); err == nil {
		ch <- prometheus.MustNewConstMetric(c.checkLag, prometheus.GaugeValue, float64(lag))
	}
	if cons, err := c.JS.Consumer(ctx, stream.EventsStream, destination.SharedConsumer); err == nil {
		info := cons.CachedInfo()
		ch <- prometheus.MustNewConstMetric(c.sharedBacklog, prometheus.GaugeValue, float64(info.NumPending))
		ch <- prometheus.MustNewConstMetric(c.sharedUnacked, prometheus.GaugeValue, float64(info.NumAckPending))
	}
	if _, routed, err := routing.ReadState(ctx, c.JS); err == nil && routed {
		if lag, err := routing.Lag(ctx, c.JS); err == nil {
			ch <- prometheus.MustNewConstMetric(c.routerLag, prometheus.GaugeValue, float64(lag))
		}
	}
	now := clock()
	if !c.PerTenantDestination {
		all = sumTenants(all)
	}
	for _, s := range all {
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, s.Dest)
		}
		g(c.backlog, float64(s.Backlog))
		g(c.unacked, float64(s.InFlight))
		g(c.retrying, float64(s.Retrying))
		if s.Parked >= 0 {
			g(c.parked, float64(s.Parked))
		}
		g(c.dead, float64(s.DeadLetters))
		age := 0.0
		if !s.OldestUndelivered.IsZero() {
			age = now.Sub(s.OldestUndelivered).Seconds()
		}
		g(c.oldest, age)
		p := 0.0
		switch {
		case s.Dest == TenantsLabel:
			p = float64(s.paused) // how many are
		case s.State != destination.StateActive:
			p = 1
		}
		g(c.paused, p)
		g(c.blocked, float64(s.BlockedPartitions))
	}
}

// sumTenants is all with the tenants' destinations summed into one
// (TenantsLabel), when there are some.
func sumTenants(all []DestStats) []DestStats {
	var out []DestStats
	sum := DestStats{Dest: TenantsLabel, State: destination.StateActive, Parked: -1}
	n := 0
	for _, s := range all {
		if s.Tenant == "" {
			out = append(out, s)
			continue
		}
		n++
		sum.Backlog += s.Backlog
		sum.InFlight += s.InFlight
		sum.Retrying += s.Retrying
		if s.Parked >= 0 {
			sum.Parked = max(sum.Parked, 0) + s.Parked
		}
		sum.DeadLetters += s.DeadLetters
		if !s.OldestUndelivered.IsZero() && (sum.OldestUndelivered.IsZero() || s.OldestUndelivered.Before(sum.OldestUndelivered)) {
			sum.OldestUndelivered = s.OldestUndelivered
		}
		if s.State != destination.StateActive {
			sum.paused++
		}
		sum.BlockedPartitions += s.BlockedPartitions
	}
	if n > 0 {
		out = append(out, sum)
	}
	return out
}

func statusClass(r Result) string {
	if i := classIndex(r); i >= 0 {
		return classNames[i]
	}
	return strconv.Itoa(r.Status/100) + "xx"
}

// recordOutcome adds out, the outcome of ev's delivery, to the delivery
// log (when relay keeps one): an attempt whatever came of it, or an event
// settled without one.
func (r *Relay) recordOutcome(ev *event, d destination.Destination, out *Outcome, sent bool) {
	if r.logw == nil {
		return
	}
	switch out.Decision.Action {
	case Ack, Retry, Park, DeadLetter, AckFiltered:
	case Leave, HandBack:
		// An attempt outlived AckWait (left to the replica that has the
		// event now) or was cut short by a stop (handed back): the
		// destination may have had it, so it is recorded; it does not
		// decide the event's state (stateOf).
		if !sent {
			return
		}
	default:
		return
	}
	if out.Err != nil && out.Decision.Action != DeadLetter && !sent {
		// Not carried out: the event comes back and the log records what
		// happens then. (A dead letter that failed for good is recorded,
		// and so is an attempt made: the destination had it.)
		return
	}
	res := out.Result
	rec := deliverylog.AttemptRecord{
		EventID:  ev.id,
		Type:     ev.typ,
		Key:      ev.key,
		Dest:     ev.dest,
		Outcome:  out.Decision.Action.String(),
		At:       r.cfg.Now().UTC(),
		Class:    stream.LogClass(sent, res.classStatus()),
		Status:   res.Status,
		EventSeq: ev.origin,
	}
	if sent {
		rec.Attempt = out.Attempt
		rec.At = rec.At.Add(-res.Duration)
		rec.DurationMS = float64(res.Duration.Microseconds()) / 1000
		rec.URL = d.URL
		if res.Pooled {
			if pool := d.Pool(); res.URL < len(pool) {
				rec.URL = pool[res.URL]
			}
		}
	}
	switch {
	case res.Err != nil:
		rec.Error = res.Err.Error()
	case res.Snippet != "" && len(res.Body) == 0:
		rec.Error = res.Snippet
	}
	if len(res.Headers) > 0 {
		rec.ResponseHeaders = make(map[string]string, len(res.Headers)/2)
		for i := 0; i+1 < len(res.Headers); i += 2 {
			rec.ResponseHeaders[res.Headers[i]] = res.Headers[i+1]
		}
	}
	if len(res.Body) > 0 {
		rec.ResponseBody = strings.ToValidUTF8(string(res.Body), string(utf8.RuneError))
	}
	switch out.Decision.Action {
	case Retry, Park:
		rec.RetryInMS, rec.Parked = out.Decision.Delay.Milliseconds(), out.Parked
	case DeadLetter:
		rec.Reason = out.Decision.Reason
		if out.Err != nil && out.Decision.Reason != ReasonDeadLetterFailed {
			// The dead letter was not written this time: the event comes
			// back (deadLetter's nak) and is dead-lettered then.
			rec.Outcome, rec.Reason, rec.RetryInMS = Retry.String(), "", deadLetterRetry.Milliseconds()
		}
	}
	r.logw.Add(rec)
}

// recordRouting adds a typed event's routing, confirmed, to the delivery
// log.
func (r *Relay) recordRouting(p routing.Routed) {
	if r.logw == nil || p.Envelope.ID == "" {
		return // off, or not a typed event
	}
	ev, dests := p.Envelope, p.Dests
	rec := deliverylog.AttemptRecord{EventID: ev.ID, Type: ev.Type, Key: ev.Key, Outcome: deliverylog.OutcomeRouted, At: ev.Stored.UTC(), Class: stream.ClassNone, EventSeq: ev.Seq}
	if len(dests) > deliverylog.MaxRoutedDests {
		rec.DestsMore = len(dests) - deliverylog.MaxRoutedDests
		dests = dests[:deliverylog.MaxRoutedDests]
	}
	rec.Dests = dests
	r.logw.Add(rec)
}

// traceRoom is what a copy of an event may gain in size when relay traces:
// a traceparent it did not have.
const traceRoom = stream.TraceHeaderBytes

// startSpan starts span name for ev, a child of ctx's span, or where ctx
// has none, of the event's traceparent. Only when r traces.
func (r *Relay) startSpan(ctx context.Context, ev event, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = stream.ExtractTrace(ctx, ev.hdr)
	}
	attrs = append(attrs, spans.AttrDest.String(ev.dest), spans.AttrEventID.String(ev.id))
	return r.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// endAttempt ends an attempt's span with what came of it: the HTTP status,
// the URL's host, the attempt's duration and the outcome carried out.
func endAttempt(span trace.Span, d destination.Destination, out Outcome) {
	res := out.Result
	u := d.URL
	if pool := d.Pool(); res.Pooled && res.URL < len(pool) {
		u = pool[res.URL]
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	if p, err := url.Parse(u); err == nil {
		attrs = append(attrs, spans.AttrHost.String(p.Hostname()))
		if port, err := strconv.Atoi(p.Port()); err == nil {
			attrs = append(attrs, spans.AttrPort.Int(port))
		}
	}
	if res.Status != 0 {
		attrs = append(attrs, spans.AttrStatus.Int(res.Status))
	}
	outcome := out.Decision.Action.String()
	if out.Parked {
		outcome = "parked"
	}
	attrs = append(attrs, spans.AttrAttempt.Int(out.Attempt), spans.AttrDuration.Float64(float64(res.Duration)/float64(time.Millisecond)), spans.AttrOutcome.String(outcome))
	switch out.Decision.Action {
	case Retry, Park:
		attrs = append(attrs, spans.AttrRetryIn.Int64(out.Decision.Delay.Milliseconds()))
	case DeadLetter:
		attrs = append(attrs, spans.AttrReason.String(out.Decision.Reason))
	}
	span.SetAttributes(attrs...)
	switch {
	case res.Err != nil:
		span.SetStatus(codes.Error, res.Err.Error())
	case res.Status != 0 && (res.Status < 200 || res.Status > 299):
		span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(res.Status))
	}
	span.End()
}
