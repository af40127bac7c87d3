// Package opevent publishes operator events: typed events relay publishes
// about itself, under the reserved prefix "relay.". Any destination may
// subscribe to them (--type 'relay.>') and gets them with every guarantee
// of a delivery. Each has a stable id (its Nats-Msg-Id and webhook-id), so
// that one published twice is stored once within the duplicate window and
// deduplicated by its receiver after. docs/operator-events.md has their
// bodies' JSON schemas.
package opevent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// The operator events' types.
const (
	BreakerOpened  = "relay.destination.breaker_opened"
	BreakerClosed  = "relay.destination.breaker_closed"
	Disabled       = "relay.destination.disabled"
	BacklogStale   = "relay.destination.backlog_stale"
	DeadLetters    = "relay.dead_letters"
	ReplayFinished = "relay.replay.finished"
	PortalAction   = "relay.portal.action"
	ProxyFailing   = "relay.egress.proxy_failing"
)

// Prefix starts every operator event's type.
const Prefix = stream.ReservedTypePrefix

// Is reports whether typ is an operator event's type. relay emits
// no operator event about the delivery of one: an operations destination
// that is down must not feed itself.
func Is(typ string) bool { return strings.HasPrefix(typ, Prefix) }

// Event is an operator event to publish.
type Event struct {
	Type string
	// ID is stable: the same occurrence always gets the same id.
	ID   string
	Data any
}

// opPublishTimeout bounds the publish of an operator event.
const opPublishTimeout = 5 * time.Second

// Publish stores ev as a typed event, deduplicated by its id. Its
// body is ev.Data, a JSON object, with the event's type as its first
// field, "type": a receiver tells the event from its body alone.
//
// An event about a tenant's destination (its Dest a stream.DestRef, T=N)
// names the tenant and the destination within it ("tenant": T, "dest": N),
// and is published twice: for the operator (relay.type.X) and for the
// tenant (relay.t.T.type.X), so that the tenant's own destinations
// subscribed to relay.> get the events about that tenant, and only them.
func Publish(ctx context.Context, js jetstream.JetStream, ev Event) error {
	var tenant string
	ev.Data, tenant = scoped(ev.Data)
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
	if tenant != "" {
		// Its own dedup id: the same id on the same stream would be
		// dropped as the first's duplicate.
		env.Dedup = "tenant:" + tenant + ":" + ev.ID
		if _, err := js.PublishMsg(ctx, env.Msg(stream.Produced, stream.TenantTypeSubject(tenant, ev.Type), nil)); err != nil {
			return fmt.Errorf("publish operator event %s for tenant %s: %w", ev.Type, tenant, err)
		}
	}
	return nil
}

// scoped is body data with the destination it names taken apart into its
// tenant and its name within it, and the tenant ("" for none).
func scoped(data any) (any, string) {
	split := func(tenant, dest *string) string {
		*tenant, *dest = stream.SplitDestRef(*dest)
		return *tenant
	}
	switch b := data.(type) {
	case BreakerOpenedBody:
		return b, split(&b.Tenant, &b.Dest)
	case BreakerClosedBody:
		return b, split(&b.Tenant, &b.Dest)
	case DisabledBody:
		return b, split(&b.Tenant, &b.Dest)
	case BacklogStaleBody:
		return b, split(&b.Tenant, &b.Dest)
	case *DeadLettersBody:
		c := *b
		return c, split(&c.Tenant, &c.Dest)
	case DeadLettersBody:
		return b, split(&b.Tenant, &b.Dest)
	case PortalActionBody:
		return b, b.Tenant
	case ReplayFinishedBody:
		// A replay to another tenant's destination is the operator's
		// alone.
		t, to := stream.SplitDestRef(b.ToDest)
		if tenant := split(&b.Tenant, &b.Dest); tenant != "" && (b.ToDest == "" || t == tenant) {
			b.ToDest = to
			return b, tenant
		}
		return b, ""
	}
	return data, ""
}

// opBody is ev.Data as JSON with "type": ev.Type first.
func opBody(ev Event) ([]byte, error) {
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

// ID is a stable id: the type and the parts that name the occurrence.
func ID(typ string, parts ...string) string {
	return typ + ":" + strings.Join(parts, ":")
}

// Millis is t in Unix milliseconds, as ids print it.
func Millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// NewReplayID is the id of one replay's relay.replay.finished.
func NewReplayID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return ID(ReplayFinished, hex.EncodeToString(b))
}

// PortalActionBody is the body of relay.portal.action: a change a
// customer portal's session asked for, and what came of it (the audit of
// the portal).
type PortalActionBody struct {
	At      time.Time `json:"at"`
	Tenant  string    `json:"tenant"`
	Session string    `json:"session"`
	// Action is the API route, such as "POST
	// /v1/destinations/{name}/pause"; Path the path asked for.
	Action string `json:"action"`
	Path   string `json:"path"`
	// Status is the API's answer: 2xx done, else refused.
	Status int `json:"status"`
}

// ProxyFailingBody is the body of relay.egress.proxy_failing: the egress
// proxy has failed every attempt through it for a while (a replica's
// view). Deliveries wait for it, no attempt used. Sent again every 10
// minutes while it lasts.
type ProxyFailingBody struct {
	At time.Time `json:"at"`
	// Proxy is the proxy's address (never its credentials).
	Proxy string `json:"proxy"`
	// Since is the first failure of the run; Failures how many attempts it
	// failed since.
	Since    time.Time `json:"since"`
	Failures int       `json:"failures"`
	// LastError is the last failure.
	LastError string `json:"last_error"`
}

// ReplayFinishedBody is the body of relay.replay.finished.
type ReplayFinishedBody struct {
	At time.Time `json:"at"`
	// By is what replayed: "relay dlq replay", "relay replay", or "api".
	By string `json:"by"`
	// Tenant is the tenant of Dest and ToDest (when they are a tenant's);
	// they are named within it.
	Tenant     string `json:"tenant,omitempty"`
	Dest       string `json:"dest,omitempty"`
	ToDest     string `json:"to_dest,omitempty"`
	Matched    int    `json:"matched"`
	Replayed   int    `json:"replayed"`
	Duplicates int    `json:"duplicates"`
	Skipped    int    `json:"skipped"`
	Failed     int    `json:"failed"`
}

// The bodies of the destination events.
type BreakerOpenedBody struct {
	// Tenant is the destination's tenant, and Dest its name within it;
	// no tenant: omitted.
	Tenant      string    `json:"tenant,omitempty"`
	Dest        string    `json:"dest"`
	At          time.Time `json:"at"`
	PausedUntil time.Time `json:"paused_until"`
	Trips       int       `json:"trips"`
	Threshold   int       `json:"threshold"`
}

type BreakerClosedBody struct {
	// Tenant is the destination's tenant, and Dest its name within it;
	// no tenant: omitted.
	Tenant string    `json:"tenant,omitempty"`
	Dest   string    `json:"dest"`
	At     time.Time `json:"at"`
}

type DisabledBody struct {
	// Tenant is the destination's tenant, and Dest its name within it;
	// no tenant: omitted.
	Tenant string    `json:"tenant,omitempty"`
	Dest   string    `json:"dest"`
	At     time.Time `json:"at"`
	// Reason is gone (it answered 410) or operator.
	Reason      string    `json:"reason"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	EventID     string    `json:"event_id,omitempty"`
}

type BacklogStaleBody struct {
	// Tenant is the destination's tenant, and Dest its name within it;
	// no tenant: omitted.
	Tenant            string    `json:"tenant,omitempty"`
	Dest              string    `json:"dest"`
	At                time.Time `json:"at"`
	OldestUndelivered time.Time `json:"oldest_undelivered"`
	AgeSeconds        float64   `json:"age_seconds"`
	Backlog           uint64    `json:"backlog"`
	ThresholdSeconds  float64   `json:"threshold_seconds"`
}

type DeadLettersBody struct {
	// Tenant is the destination's tenant, and Dest its name within it;
	// no tenant: omitted.
	Tenant      string         `json:"tenant,omitempty"`
	Dest        string         `json:"dest"`
	WindowStart time.Time      `json:"window_start"`
	WindowEnd   time.Time      `json:"window_end"`
	Count       int            `json:"count"`
	Reasons     map[string]int `json:"reasons"`
	EventIDs    []string       `json:"event_ids"`
}

// OpsKey is the key, in the relay_state bucket, of the operator-events
