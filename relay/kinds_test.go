package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/deliverylog"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/tenant"
	"github.com/relaydev/relay/webhook"
)

// memKind is a destination kind whose targets live in this test process:
// config "target" names one (memTargets), whose answer function says what
// each publish gets.
type memKind struct{}

type memTarget struct {
	mu       sync.Mutex
	answer   func(n int, m kind.Message) kind.Answer
	got      []kind.Message
	opened   int
	closed   int
	inFlight int
}

var (
	memTargetsMu sync.Mutex
	memTargets   = map[string]*memTarget{}
	registerMem  sync.Once
)

func newMemTarget(t *testing.T, answer func(n int, m kind.Message) kind.Answer) (string, *mem) {
	t.Helper()
	registerMem.Do(func() { kind.Register(memKind{}) })
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	tg := &memTarget{answer: answer}
	memTargetsMu.Lock()
	memTargets[name] = tg
	memTargetsMu.Unlock()
	return name, &mem{tg}
}

// mem reads a target under its lock.
type mem struct{ tg *memTarget }

func (m *mem) messages() []kind.Message {
	m.tg.mu.Lock()
	defer m.tg.mu.Unlock()
	return append([]kind.Message(nil), m.tg.got...)
}

func (m *mem) counts() (opened, closed int) {
	m.tg.mu.Lock()
	defer m.tg.mu.Unlock()
	return m.tg.opened, m.tg.closed
}

func (memKind) Name() string        { return "test-mem" }
func (memKind) Title() string       { return "In-memory (tests)" }
func (memKind) Description() string { return "Keeps events in the test process." }
func (memKind) Fields() []kind.Field {
	return []kind.Field{
		{Name: "target", Type: kind.String, Required: true, Help: "the target's name"},
		{Name: "token", Type: kind.String, Sensitive: true, Help: "a credential"},
		{Name: "unordered", Type: kind.Bool, Help: "the target keeps no order"},
		{Name: "ambient", Type: kind.Bool, Help: "without a token, act with relay's own identity"},
	}
}

func (memKind) AmbientCredentials(c kind.Config) (bool, string) {
	return c["ambient"] == "true" && c["token"] == "", "token"
}
func (memKind) Validate(c kind.Config) error {
	if c["target"] == "bad" {
		return kind.Errorf("target", "bad is not a target")
	}
	return nil
}
func (k memKind) Ordered(c kind.Config) bool { return kind.Get(k, c, "unordered") != "true" }
func (memKind) Open(c kind.Config, _ kind.Env) (kind.Publisher, error) {
	memTargetsMu.Lock()
	tg := memTargets[c["target"]]
	memTargetsMu.Unlock()
	if tg == nil {
		return nil, errors.New("no such target")
	}
	tg.mu.Lock()
	tg.opened++
	tg.mu.Unlock()
	return &memPublisher{tg: tg}, nil
}

type memPublisher struct {
	tg     *memTarget
	closed bool
}

func (p *memPublisher) Publish(_ context.Context, m kind.Message) kind.Answer {
	p.tg.mu.Lock()
	if p.closed {
		p.tg.mu.Unlock()
		return kind.Retry("", kind.ErrClosed)
	}
	p.tg.inFlight++
	n := len(p.tg.got) + 1
	answer := p.tg.answer
	p.tg.mu.Unlock()
	a := answer(n, m)
	p.tg.mu.Lock()
	defer p.tg.mu.Unlock()
	p.tg.inFlight--
	if a.Err == nil {
		p.tg.got = append(p.tg.got, m)
	} else {
		p.tg.got = append(p.tg.got, kind.Message{ID: "failed:" + m.ID})
	}
	return a
}

func (p *memPublisher) Close() error {
	p.tg.mu.Lock()
	defer p.tg.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.tg.closed++
	}
	return nil
}

func (f *logFixture) addKindDest(d destination.Destination) destination.Destination {
	f.t.Helper()
	if d.Retry == (destination.RetryPolicy{}) {
		d.Retry = destination.RetryPolicy{Base: destination.Duration(50 * time.Millisecond), Max: destination.Duration(100 * time.Millisecond), MaxAttempts: 3}
	}
	d, err := f.st.Add(context.Background(), d)
	require.NoError(f.t, err)
	return d
}

// TestKindDeliversThroughItsPublisher: an event to a destination of a
// non-HTTP kind goes through its publisher with its id, type, tenant, key
// and a signature that verifies; a confirmation is a delivery in the log
// (class 2xx, the kind's detail as the response), a retryable failure is
// retried by the policy, a permanent one is dead-lettered at once with
// the kind's code.
func TestKindDeliversThroughItsPublisher(t *testing.T) {
	f := startLogFixture(t, Config{})
	okName, ok := newMemTarget(t, func(n int, m kind.Message) kind.Answer { return kind.Delivered("offset " + strconv.Itoa(n)) })
	flakyName, flaky := newMemTarget(t, func(n int, m kind.Message) kind.Answer {
		if n <= 2 {
			return kind.Retry("BROKER_NOT_AVAILABLE", errors.New("broker not available"))
		}
		return kind.Delivered("")
	})
	deadName, dead := newMemTarget(t, func(int, kind.Message) kind.Answer {
		return kind.Permanent("NOT_FOUND", errors.New("topic t does not exist"))
	})
	d := f.addKindDest(destination.Destination{Name: "acme=orders", Kind: "test-mem", Config: map[string]string{"target": okName}, Credentials: map[string]string{"token": "s3cret"}, Secret: webhook.GenerateSecret()})
	f.addKindDest(destination.Destination{Name: "flaky", Kind: "test-mem", Config: map[string]string{"target": flakyName}})
	f.addKindDest(destination.Destination{Name: "dead", Kind: "test-mem", Config: map[string]string{"target": deadName}})

	ctx := context.Background()
	tenants, err := tenant.Open(ctx, f.srv.JS, nil)
	require.NoError(t, err)
	_, _, err = tenants.Put(ctx, tenant.Tenant{ID: "acme"})
	require.NoError(t, err)
	_, err = f.prod.Publish(ctx, publish.Event{Tenant: "acme", Dest: "orders", ID: "evt_1", Key: "cust-1", Data: []byte(`{"n":1}`)})
	require.NoError(t, err)
	_, err = f.prod.Publish(ctx, publish.Event{Dest: "flaky", ID: "evt_2", Data: []byte(`{}`)})
	require.NoError(t, err)
	_, err = f.prod.Publish(ctx, publish.Event{Dest: "dead", ID: "evt_3", Data: []byte(`{}`)})
	require.NoError(t, err)

	rec := f.waitLog(deliverylog.AttemptQuery{Dest: "acme=orders"}, 1)[0]
	require.Equal(t, deliverylog.OutcomeDelivered, rec.Outcome)
	require.Equal(t, stream.Class2xx, rec.Class)
	require.Zero(t, rec.Status, "no HTTP status")
	require.Equal(t, "offset 1", rec.ResponseBody)
	got := ok.messages()
	require.Len(t, got, 1)
	m := got[0]
	require.Equal(t, "evt_1", m.ID)
	require.Equal(t, "acme", m.Tenant)
	require.Equal(t, "acme=orders", m.Dest)
	require.Equal(t, "cust-1", m.Key)
	require.Equal(t, 1, m.Attempt)
	require.Equal(t, "application/json", m.ContentType)
	require.NoError(t, webhook.Verify(d.Secret, m.ID, m.Timestamp, m.Body, m.Signature), "the signature verifies as an HTTP delivery's does")

	recs := f.waitLog(deliverylog.AttemptQuery{Dest: "flaky"}, 3)
	require.Equal(t, deliverylog.OutcomeDelivered, recs[0].Outcome)
	require.Equal(t, deliverylog.OutcomeRetry, recs[2].Outcome)
	require.Equal(t, stream.ClassError, recs[2].Class)
	require.Contains(t, recs[2].Error, "BROKER_NOT_AVAILABLE")
	require.Len(t, flaky.messages(), 3)

	rec = f.waitLog(deliverylog.AttemptQuery{Dest: "dead"}, 1)[0]
	require.Equal(t, deliverylog.OutcomeDeadLetter, rec.Outcome)
	require.Equal(t, ReasonPermanentError, rec.Reason)
	require.Contains(t, rec.Error, "NOT_FOUND")
	require.Contains(t, rec.Error, "topic t does not exist")
	require.Len(t, dead.messages(), 1, "no retry of a permanent failure")

	opened, _ := ok.counts()
	require.Equal(t, 1, opened)
	f.stop()
	for _, m := range []*mem{ok, flaky, dead} {
		opened, closed := m.counts()
		require.Equal(t, opened, closed, "every publisher is closed at stop")
	}
}

// TestKindKeepsOrderAndReopensOnChange: an ordered destination of a kind
// delivers one key's events in order; changing its config opens a new
// publisher and closes the old one.
func TestKindKeepsOrderAndReopensOnChange(t *testing.T) {
	f := startLogFixture(t, Config{})
	var fails sync.Map
	name, tg := newMemTarget(t, func(n int, m kind.Message) kind.Answer {
		// Each event's first attempt fails: order must hold across retries.
		if _, again := fails.LoadOrStore(m.ID, true); !again {
			return kind.Retry("", errors.New("not now"))
		}
		return kind.Delivered("")
	})
	f.addKindDest(destination.Destination{Name: "ord", Kind: "test-mem", Ordered: true, Config: map[string]string{"target": name}})
	ctx := context.Background()
	const n = 20
	for i := range n {
		_, err := f.prod.Publish(ctx, publish.Event{Dest: "ord", ID: "evt_" + strconv.Itoa(i), Key: "k", Data: []byte(`{}`)})
		require.NoError(t, err)
	}
	var delivered []string
	require.Eventually(t, func() bool {
		delivered = delivered[:0]
		for _, m := range tg.messages() {
			if m.Dest != "" {
				delivered = append(delivered, m.ID)
			}
		}
		return len(delivered) == n
	}, 60*time.Second, 20*time.Millisecond)
	for i, id := range delivered {
		require.Equal(t, "evt_"+strconv.Itoa(i), id)
	}

	name2, tg2 := newMemTarget(t, func(int, kind.Message) kind.Answer { return kind.Delivered("") })
	_, err := f.st.Update(ctx, "ord", func(d *destination.Destination) error {
		d.Config["target"] = name2
		return nil
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		dd, ok := f.r.dests.Get("ord")
		return ok && dd.Config["target"] == name2
	}, 30*time.Second, 10*time.Millisecond)
	_, err = f.prod.Publish(ctx, publish.Event{Dest: "ord", ID: "evt_next", Key: "k", Data: []byte(`{}`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(tg2.messages()) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { o, c := tg.counts(); return o == 1 && c == 1 }, 10*time.Second, 10*time.Millisecond, "the old publisher is closed")
}

// TestKindConfigIsValidatedAndSealed: the store refuses a config its kind
// refuses, naming the field, and an ordered destination on a target that
// keeps no order; credentials are redacted.
func TestKindConfigIsValidatedAndSealed(t *testing.T) {
	f := startLogFixture(t, Config{})
	name, _ := newMemTarget(t, func(int, kind.Message) kind.Answer { return kind.Delivered("") })
	ctx := context.Background()
	for _, tc := range []struct {
		d       destination.Destination
		setting string
		text    string
	}{
		{destination.Destination{Name: "a", Kind: "test-mem"}, "config", "config target: required"},
		{destination.Destination{Name: "a", Kind: "test-mem", Config: map[string]string{"target": "bad"}}, "config", "config target: bad is not a target"},
		{destination.Destination{Name: "a", Kind: "test-mem", Config: map[string]string{"target": name, "nope": "1"}}, "config", "config nope: test-mem has no such field"},
		{destination.Destination{Name: "a", Kind: "test-mem", Config: map[string]string{"target": name, "unordered": "maybe"}}, "config", "not true or false"},
		{destination.Destination{Name: "a", Kind: "test-mem", Config: map[string]string{"target": name, "unordered": "true"}, Ordered: true}, "ordered", "does not keep the order"},
		{destination.Destination{Name: "a", Kind: "test-mem", Config: map[string]string{"target": name}, URL: "https://example.com"}, "url", "has no URL"},
		{destination.Destination{Name: "a", Kind: "nosuch"}, "kind", `unknown kind "nosuch"`},
		{destination.Destination{Name: "a", URL: "https://example.com", Config: map[string]string{"x": "y"}}, "config", "takes no config"},
		{destination.Destination{Name: "acme=a", Kind: "test-mem", Config: map[string]string{"target": name, "ambient": "true"}}, "config", "config token: required for a tenant's destination"},
	} {
		_, err := f.st.Add(ctx, tc.d)
		var se *destination.SettingError
		require.ErrorAs(t, err, &se, "%+v", tc.d)
		require.Equal(t, tc.setting, se.Setting)
		require.Contains(t, err.Error(), tc.text)
	}
	var s destination.Settings
	k := "test-mem"
	s.Kind = &k
	s.Config = map[string]string{"target": name, "token": "s3cret"}
	d, _, err := s.NewDestination("b")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"target": name}, d.Config)
	require.Equal(t, map[string]string{"token": "s3cret"}, d.Credentials, "the kind says which fields are credentials")
	require.Equal(t, map[string]string{"token": "(set)"}, d.Redacted().Credentials)
	_, err = f.st.Add(ctx, d)
	require.NoError(t, err)
	http := "http"
	_, err = f.st.Update(ctx, "b", func(d *destination.Destination) error {
		destination.Settings{Kind: &http}.Apply(d)
		return nil
	})
	require.ErrorContains(t, err, "kind is fixed")
}

// The publishers of many attempts at once, while the destination's config
// changes and idle ones are swept: no attempt ever gets a closed publisher,
// an attempt on an older copy of the destination does not take the
// publisher from the newer one's, and every publisher opened is closed
// once, by closeAll at the latest.
func TestPublishersUnderConcurrentChange(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	p := &publishers{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: now, m: map[string]*openPublisher{}}
	var targets []*mem
	var dests []destination.Destination
	for i := range 4 {
		name, m := newMemTarget(t, func(int, kind.Message) kind.Answer { return kind.Delivered("") })
		targets = append(targets, m)
		dests = append(dests, destination.Destination{Name: "d", Kind: "test-mem", Config: map[string]string{"target": name}, Updated: time.Unix(int64(i+1), 0)})
	}
	var current atomic.Int32
	var swept atomic.Bool // every change made
	attempt := func(d destination.Destination) {
		pub, release, err := p.get(d)
		require.NoError(t, err)
		a := pub.Publish(context.Background(), kind.Message{ID: "evt", Dest: "d"})
		require.NoError(t, a.Err, "never a closed publisher")
		release()
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			// At least 300 attempts, and on until the changes are
			// made, however the scheduler orders the goroutines (a
			// loaded machine may run the changes first or last).
			for i := 0; i < 300 || !swept.Load(); i++ {
				d := dests[current.Load()]
				if i%7 == w%7 && current.Load() > 0 {
					d = dests[current.Load()-1] // an older copy
				}
				attempt(d)
			}
			attempt(dests[len(dests)-1]) // after the last change
		})
	}
	wg.Go(func() {
		defer swept.Store(true)
		for i := 1; i < len(dests); i++ {
			current.Store(int32(i))
			clock.Add(int64(2 * publisherIdle))
			p.sweep(func(string) bool { return true })
		}
	})
	wg.Wait()
	p.closeAll()
	for i, m := range targets {
		opened, closed := m.counts()
		require.Equal(t, opened, closed, "target %d: every publisher closed, once", i)
	}
	opened, _ := targets[len(targets)-1].counts()
	require.Positive(t, opened)
}
