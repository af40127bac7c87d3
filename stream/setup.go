package stream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Config is the JetStream layout relay manages.
type Config struct {
	// Replicas of every stream and bucket: 1 for a single server, 3 for a
	// cluster. Optional, default 1.
	Replicas int
	// EventRetention is how long events stay in the event log, delivered or
	// not. It must exceed the longest time an event may wait for delivery: an
	// event older than this is removed even if undelivered. Optional, default
	// 7 days.
	EventRetention time.Duration
	// EventMaxBytes caps the event log; when full, new publishes are refused
	// (never are undelivered events discarded to make room). Optional,
	// default unlimited.
	EventMaxBytes int64
	// DLQRetention is how long dead letters are kept. Optional, default 14 days.
	DLQRetention time.Duration
	// LogRetention is how long the delivery log keeps an attempt's record.
	// Optional, default 7 days.
	LogRetention time.Duration
	// LogMaxBytes caps the delivery log: when full, the oldest records go
	// first. Optional: by default 1 GiB, or as much of it as the NATS
	// server's storage allows (halved until the server accepts it, down to
	// 16 MiB); a size given is taken or refused.
	LogMaxBytes int64
	// DuplicateWindow is how long JetStream remembers event ids to drop
	// re-publishes. Optional, default 2 minutes.
	DuplicateWindow time.Duration
	// MaxMsgSize caps one event (body and headers). Optional, default 1 MiB.
	MaxMsgSize int32
	// MaxConsumers caps the consumers of the events stream: relay makes one
	// per destination, 1 + Partitions per ordered one, and keeps
	// ReservedConsumers for its own short-lived readers. Set on the stream,
	// it replaces the server's default limit (1,000 per stream). Each
	// consumer costs the NATS server memory (about 53 KB) and time at start
	// and stop (see BENCHMARKS.md). Optional, default DefaultMaxConsumers.
	MaxConsumers int
}

// DefaultMaxConsumers is the events stream's consumer limit unless
// Config.MaxConsumers sets one: twice the server's own default, at about
// 110 MB of server memory and a graceful stop of the server that stays
// within a 30-second termination grace period.
const DefaultMaxConsumers = 2000

// ServerDefaultMaxConsumers is the limit nats-server applies to a stream
// that sets none (and whose account sets none), unless the server's
// configuration changes it.
const ServerDefaultMaxConsumers = 1000

// ReservedConsumers is the room kept on the events stream, beyond the
// destinations' consumers, for relay's own short-lived readers: each
// replica's router and unknown-destination check, the router's lag count,
// and the reads of 'relay replay', 'relay dest heads' and the like.
const ReservedConsumers = 16

// maxMaxConsumers bounds Config.MaxConsumers: far beyond what one server
// holds (about 53 KB each).
const maxMaxConsumers = 1_000_000

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.EventRetention == 0 {
		cfg.EventRetention = 7 * 24 * time.Hour
	}
	if cfg.EventMaxBytes == 0 {
		cfg.EventMaxBytes = -1
	}
	if cfg.DLQRetention == 0 {
		cfg.DLQRetention = 14 * 24 * time.Hour
	}
	if cfg.LogRetention == 0 {
		cfg.LogRetention = 7 * 24 * time.Hour
	}
	if cfg.LogMaxBytes == 0 {
		cfg.LogMaxBytes = DefaultLogMaxBytes
	}
	if cfg.DuplicateWindow == 0 {
		cfg.DuplicateWindow = 2 * time.Minute
	}
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = 1 << 20
	}
	if cfg.MaxConsumers == 0 {
		cfg.MaxConsumers = DefaultMaxConsumers
	}
	return cfg
}

// Validate reports a configuration that cannot work.
func (cfg Config) Validate() error {
	switch {
	case cfg.Replicas < 1 || cfg.Replicas > 5:
		return fmt.Errorf("replicas must be 1 to 5, got %d", cfg.Replicas)
	case cfg.EventRetention < time.Minute:
		return fmt.Errorf("event retention %s is too short (minimum 1m)", cfg.EventRetention)
	case cfg.DLQRetention < time.Minute:
		return fmt.Errorf("dead-letter retention %s is too short (minimum 1m)", cfg.DLQRetention)
	case cfg.LogRetention < time.Minute:
		return fmt.Errorf("attempt retention %s is too short (minimum 1m)", cfg.LogRetention)
	case cfg.LogMaxBytes < 1<<20:
		return fmt.Errorf("attempt log size %d bytes is too small (minimum 1 MiB)", cfg.LogMaxBytes)
	case cfg.DuplicateWindow < time.Second || cfg.DuplicateWindow > cfg.EventRetention:
		return fmt.Errorf("duplicate window %s must be between 1s and the event retention", cfg.DuplicateWindow)
	case cfg.MaxConsumers <= ReservedConsumers || cfg.MaxConsumers > maxMaxConsumers:
		return fmt.Errorf("max consumers %d must be between %d (relay keeps %d for its own readers) and %d", cfg.MaxConsumers, ReservedConsumers+1, ReservedConsumers, maxMaxConsumers)
	}
	return nil
}

// EventsConfig is the events stream's definition.
func (cfg Config) EventsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventsStream,
		Description: "relay events: relay.in.<dest>[.<key>] in, stored as relay.in.<dest> or relay.ev.<dest>.<bucket>; typed events relay.type.<type>; a tenant's relay.t.<tenant>.in.<dest>, relay.tev.<tenant>.<dest>.<bucket> and relay.t.<tenant>.type.<type>; subscription marks relay.sub.<dest>; lanes relay.lane.<dest>; fan-out to shared destinations relay.fan",
		Subjects:    []string{InPrefix + ".*", InPrefix + ".*.*", TypePrefix + ".>", TenantPrefix + ".*.in.*", TenantKeyedPrefix + ".*.*.*", TenantTypeFilter, SubPrefix + ".*", LanePrefix + ".*", FanSubject},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      InPrefix + ".*.*",
			Destination: fmt.Sprintf("%s.{{wildcard(1)}}.{{partition(%d,2)}}", KeyedPrefix, Buckets),
		},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.EventRetention,
		MaxBytes:    cfg.EventMaxBytes,
		MaxMsgs:     -1,
		Discard:     jetstream.DiscardNew,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		MaxMsgSize:  cfg.MaxMsgSize,
		AllowDirect: true,

		MaxConsumers: cfg.MaxConsumers,
	}
}

// DLQConfig is the dead-letter stream's definition.
func (cfg Config) DLQConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        DLQStream,
		Description: "relay dead letters: relay.dlq.<dest>, a tenant's relay.tdlq.<tenant>.<dest>",
		Subjects:    []string{DLQPrefix + ".*", DLQTenantPrefix + ".*.*"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.DLQRetention,
		MaxBytes:    -1,
		MaxMsgs:     -1,
		Discard:     jetstream.DiscardNew,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		// Dead letters carry the failure history in headers on top of the event.
		MaxMsgSize:  cfg.MaxMsgSize + 64<<10,
		AllowDirect: true,
	}
}

// DefaultLogMaxBytes is the delivery log's size unless Config.LogMaxBytes
// sets one (or the server's storage is smaller).
const DefaultLogMaxBytes = 1 << 30

// minLogMaxBytes is the smallest size the delivery log is shrunk to
// to fit the server's storage.
const minLogMaxBytes = 1 << 20

// errInsufficientStorage is JetStream's error code for a stream whose
// limits exceed the storage the server or account has left.
const errInsufficientStorage = 10047

// ensureLog is ensureStream for the delivery log. With its size not given,
// a server whose storage is too small for it gets a smaller log: the size
// is halved until the server takes it, and the log then takes a quarter of
// that (at least minLogMaxBytes), so that it does not crowd out the events
// on a small disk.
func ensureLog(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, given bool) error {
	shrunk := false
	for {
		err := ensureStream(ctx, js, sc)
		var apiErr *jetstream.APIError
		switch {
		case err == nil && shrunk:
			sc.MaxBytes = max(sc.MaxBytes/4, minLogMaxBytes)
			return ensureStream(ctx, js, sc)
		case err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errInsufficientStorage:
			return err
		case given:
			return fmt.Errorf("the delivery log's size, %d bytes (--attempt-max-bytes), is more than the NATS server's storage allows: give less: %w", sc.MaxBytes, err)
		case sc.MaxBytes/2 < minLogMaxBytes:
			return fmt.Errorf("the NATS server's storage cannot take even a %d-byte delivery log: %w", sc.MaxBytes, err)
		}
		sc.MaxBytes /= 2
		shrunk = true
	}
}

// LogConfig is the delivery log's definition (see LogStream).
func (cfg Config) LogConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        LogStream,
		Description: "relay delivery log: batches of records of attempts on relay.log.<dest>.<class>, their event ids on relay.logidx.<bucket>",
		Subjects:    []string{LogPrefix + ".*.*", LogTenantPrefix + ".*.*.*", LogIndexPrefix + ".*"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.LogRetention,
		MaxBytes:    cfg.LogMaxBytes,
		MaxMsgs:     -1,
		// A full log drops its oldest records: the log never refuses one.
		Discard:  jetstream.DiscardOld,
		Storage:  jetstream.FileStorage,
		Replicas: cfg.Replicas,
		// A batch's writer publishes it again for up to a minute (and
		// 10s to an answer) while it is not stored, with its own id.
		Duplicates:  2 * time.Minute,
		MaxMsgSize:  1 << 20, // a batch of records
		AllowDirect: true,
	}
}

// ErrIncompatible marks a stream that exists with settings relay cannot change
// in place; retrying does not help.
var ErrIncompatible = errors.New("incompatible stream")

// Ensure creates the streams and buckets relay needs, or updates them when
// their settings differ from cfg. It never deletes or recreates a stream: a
// change JetStream cannot apply in place is returned as an error naming the
// setting.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	given := cfg.LogMaxBytes != 0
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	for _, sc := range []jetstream.StreamConfig{cfg.EventsConfig(), cfg.DLQConfig()} {
		if err := ensureStream(ctx, js, sc); err != nil {
			return err
		}
	}
	if err := ensureLog(ctx, js, cfg.LogConfig(), given); err != nil {
		return err
	}
	kvs := []jetstream.KeyValueConfig{
		{Bucket: DestBucket, Description: "relay destinations", History: 5, Storage: jetstream.FileStorage, Replicas: cfg.Replicas},
		// Live relay replicas, each refreshing its key every 5s.
		{Bucket: ReplicasBucket, Description: "relay replicas alive", History: 1, TTL: 15 * time.Second, Storage: jetstream.MemoryStorage, Replicas: cfg.Replicas},
		// Failure history of events being retried, keyed by destination and
		// event id; entries outlive no event.
		{Bucket: AttemptsBucket, Description: "relay attempt history of events in retry", History: 1, TTL: cfg.EventRetention, Storage: jetstream.FileStorage, Replicas: cfg.Replicas},
		// Work shared by the replicas, one at a time: who does it, and how far
		// it got (the unknown-destination check).
		{Bucket: StateBucket, Description: "relay work done by one replica at a time, and its progress", History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas},
		// The last event settled (delivered or dead-lettered) per partition
		// of an ordered destination. A stream write reaches the server's
		// file at once, where a consumer's acks may not (see
		// relay.partitionMark): after a crash of the server's process it
		// tells which events came back only because their acks were lost.
		// A mark older than the event retention covers no stored event.
		{Bucket: OrderedBucket, Description: "relay: last event settled per ordered partition", History: 1, TTL: cfg.EventRetention, Storage: jetstream.FileStorage, Replicas: cfg.Replicas},
		// The HTTP API's keys: a hash of each, never the key.
		{Bucket: KeysBucket, Description: "relay API keys (hashes)", History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas},
		// The tenants: one record per tenant, keyed by its id.
		{Bucket: TenantsBucket, Description: "relay tenants", History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas},
		// The customer portal's sessions (hashes of their secrets), each
		// expiring with its session (a TTL per key), and each tenant's
		// epoch.
		{Bucket: PortalBucket, Description: "relay customer portal sessions (hashes)", History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas, LimitMarkerTTL: time.Minute},
		// The catalog of event types: description, example and schema.
		{Bucket: EventTypesBucket, Description: "relay event types", History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas},
	}
	for _, kc := range kvs {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			return fmt.Errorf("bucket %s: %w", kc.Bucket, err)
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	if have.Storage != want.Storage {
		return fmt.Errorf("%w: stream %s uses %s storage, relay needs %s: JetStream cannot change this in place; move the data or delete the stream yourself", ErrIncompatible, want.Name, have.Storage, want.Storage)
	}
	if have.Retention != want.Retention {
		return fmt.Errorf("%w: stream %s has %s retention, relay needs %s: JetStream cannot change this in place", ErrIncompatible, want.Name, have.Retention, want.Retention)
	}
	if sameManaged(have, want) {
		return nil
	}
	if err := oldKeyedLayout(ctx, s, want); err != nil {
		return err
	}
	// Keep settings relay does not manage (placement, sources, metadata...).
	upd := have
	upd.Description = want.Description
	upd.Subjects = want.Subjects
	upd.SubjectTransform = want.SubjectTransform
	upd.MaxAge, upd.MaxBytes, upd.MaxMsgs = want.MaxAge, want.MaxBytes, want.MaxMsgs
	upd.Discard = want.Discard
	upd.Replicas = want.Replicas
	upd.Duplicates = want.Duplicates
	upd.MaxMsgSize = want.MaxMsgSize
	upd.AllowDirect = want.AllowDirect
	if want.MaxConsumers > 0 {
		upd.MaxConsumers = want.MaxConsumers
	}
	if _, err := js.UpdateStream(ctx, upd); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMaximumConsumersLimit {
			return fmt.Errorf("update stream %s to relay's settings: its consumer limit %d is above what the NATS account allows: lower --max-consumers or raise the account's consumer limit: %w", want.Name, want.MaxConsumers, err)
		}
		return fmt.Errorf("update stream %s to relay's settings: %w", want.Name, err)
	}
	return nil
}

// oldKeyedSubjects are the subjects of keyed events stored under the layout
// that kept the key token (relay.ev.<dest>.<bucket>.<key>).
const oldKeyedSubjects = KeyedPrefix + ".*.*.*"

// oldKeyedLayout refuses to change the events stream's subject transform
// while it holds keyed events stored under the earlier layout: no consumer
// of relay reads those subjects, so they would never be delivered.
func oldKeyedLayout(ctx context.Context, s jetstream.Stream, want jetstream.StreamConfig) error {
	if want.Name != EventsStream {
		return nil
	}
	m, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(oldKeyedSubjects))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("look for events stored under the earlier keyed layout in stream %s: %w", want.Name, err)
	}
	return fmt.Errorf("%w: stream %s holds keyed events stored under the earlier layout %s.<dest>.<bucket>.<key> (the first at sequence %d, %s); relay stores them as %s.<dest>.<bucket> and would not deliver these: let the relay that stored them deliver them, then remove them with 'nats stream purge %s --subject %q', or delete the stream",
		ErrIncompatible, want.Name, KeyedPrefix, m.Sequence, m.Subject, KeyedPrefix, want.Name, oldKeyedSubjects)
}

func sameManaged(have, want jetstream.StreamConfig) bool {
	return reflect.DeepEqual(have.Subjects, want.Subjects) &&
		reflect.DeepEqual(have.SubjectTransform, want.SubjectTransform) &&
		have.MaxAge == want.MaxAge && have.MaxBytes == want.MaxBytes && have.MaxMsgs == want.MaxMsgs &&
		have.Discard == want.Discard && have.Replicas == want.Replicas &&
		have.Duplicates == want.Duplicates && have.MaxMsgSize == want.MaxMsgSize &&
		have.AllowDirect == want.AllowDirect &&
		(want.MaxConsumers <= 0 || have.MaxConsumers == want.MaxConsumers)
}
