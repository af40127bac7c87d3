package destination

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// ErrNotFound is returned for a destination that does not exist.
var ErrNotFound = errors.New("destination not found")

// ErrLayoutFixed is returned when an update would change a destination's
// ordering or partition count: moving keys between partitions while events
// are in flight could deliver them out of order.
var ErrLayoutFixed = errors.New("cannot change the partition layout in place")

// ErrExists is returned when adding a destination whose name is taken.
var ErrExists = errors.New("destination already exists")

// Store keeps destinations in a JetStream key-value bucket, so every replica
// sees the same set. With a secret key, signing secrets, configured header
// values and body templates are stored encrypted.
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	sealer *sealer
	// allowClear: Add may store secrets unencrypted beside encrypted ones.
	allowClear bool
	// now is the clock (WithClock).
	now func() time.Time
	// rooms is the last count of the consumers destinations need.
	rooms roomCount
}

// WithClock sets the store's clock: when destinations are created and
// updated, and when a previous secret stops signing. Default time.Now.
func WithClock(now func() time.Time) StoreOption {
	return func(s *Store) error {
		s.now = now
		return nil
	}
}

// StoreOption configures a Store.
type StoreOption func(*Store) error

// WithSecretKey encrypts signing secrets at rest (AES-256-GCM with a key
// derived from material, at least MinKeyLen bytes). Secrets sealed with a
// previous key open too, during a key rotation (see Rekey); they are sealed
// with material when next written.
func WithSecretKey(material []byte, previous ...[]byte) StoreOption {
	return func(s *Store) error {
		if len(material) == 0 {
			if len(previous) > 0 {
				return errors.New("a previous secret key is for a rotation to a new one: give the new key too")
			}
			return nil
		}
		sl, err := newSealer(material, previous...)
		s.sealer = sl
		return err
	}
}

// NewStore opens the destination bucket (stream.Ensure creates it).
func NewStore(ctx context.Context, js jetstream.JetStream, opts ...StoreOption) (*Store, error) {
	kv, err := js.KeyValue(ctx, stream.DestBucket)
	if err != nil {
		return nil, fmt.Errorf("open destination bucket %s (has relay set up the streams? run 'relay run' once): %w", stream.DestBucket, err)
	}
	s := &Store{js: js, kv: kv, now: time.Now}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// WatchAll watches the destinations bucket: every record, then each
// change (see Watch.Apply).
func (s *Store) WatchAll(ctx context.Context) (jetstream.KeyWatcher, error) {
	return s.kv.WatchAll(ctx)
}

// JetStream is the JetStream context the store works in.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Encrypts reports whether the store encrypts secrets.
func (s *Store) Encrypts() bool { return s.sealer != nil }

// encode marshals d with its secrets sealed: the signing secrets, the
// values of its configured headers (an Authorization header, say) and its
// body template.
func (s *Store) encode(d Destination) []byte {
	_ = eachSecret(&d, func(v, aad string) (string, error) { return s.sealer.seal(v, aad), nil })
	b, _ := json.Marshal(d)
	return b
}

// headerAAD binds a sealed header value to its destination and header: it
// cannot be moved to another header or destination.
func headerAAD(dest, header string) string {
	return dest + "/header/" + http.CanonicalHeaderKey(header)
}

// credentialAAD binds a sealed credential of a non-HTTP kind to its
// destination and field.
func credentialAAD(dest, field string) string { return dest + "/credential/" + field }

// bodyTemplateAAD binds a sealed body template to its destination.
func bodyTemplateAAD(dest string) string { return dest + "/body-template" }

// eachSecret calls fn on each value of d that is sealed at rest (its
// signing secrets, the values of its configured headers and its body
// template, which may embed a credential), with what the seal is bound to,
// and keeps what fn returns; where fn fails the value stays as it was. It
// returns the first failure.
func eachSecret(d *Destination, fn func(v, aad string) (string, error)) error {
	var first error
	do := func(v, aad string) string {
		out, err := fn(v, aad)
		if err != nil {
			first = cmp.Or(first, err)
			return v
		}
		return out
	}
	d.Secret = do(d.Secret, d.Name)
	d.PrevSecret = do(d.PrevSecret, d.Name)
	d.SigningKey = do(d.SigningKey, signingKeyAAD(d.Name))
	d.PrevSigningKey = do(d.PrevSigningKey, signingKeyAAD(d.Name))
	if len(d.Headers) > 0 {
		h := make(map[string]string, len(d.Headers)) // d's map may be a caller's too
		for k, v := range d.Headers {
			h[k] = do(v, headerAAD(d.Name, k))
		}
		d.Headers = h
	}
	d.BodyTemplate = do(d.BodyTemplate, bodyTemplateAAD(d.Name))
	if len(d.Credentials) > 0 {
		c := make(map[string]string, len(d.Credentials))
		for k, v := range d.Credentials {
			c[k] = do(v, credentialAAD(d.Name, k))
		}
		d.Credentials = c
	}
	return first
}

// errStoredCorrupt marks a stored destination that is not valid JSON.
var ErrStoredCorrupt = errors.New("stored corrupt")

// decode unmarshals a stored destination and opens its secrets. A secret it
// cannot open stays sealed (Validate then reports ErrSealed); open is false.
func (s *Store) decode(name string, b []byte) (d Destination, open bool, err error) {
	if err := json.Unmarshal(b, &d); err != nil {
		return Destination{}, false, fmt.Errorf("destination %s is %w: %w", name, ErrStoredCorrupt, err)
	}
	open = eachSecret(&d, func(v, aad string) (string, error) { return s.sealer.open(v, aad) }) == nil
	return d, open, nil
}

// ErrWouldStoreInClear is returned by Add, for a store without a secret
// key, when other destinations' secrets are encrypted at rest: the new
// destination's secrets would be the only ones readable in the bucket.
var ErrWouldStoreInClear = errors.New("other destinations' secrets are encrypted at rest, and no secret key was given to encrypt this one's")

// AllowStoringInClear makes Add store a destination's secrets unencrypted
// even when other destinations' are encrypted (see ErrWouldStoreInClear).
func AllowStoringInClear() StoreOption {
	return func(s *Store) error {
		s.allowClear = true
		return nil
	}
}

// sealedDest returns the name of a stored destination with a secret
// encrypted at rest, "" if there is none.
func (s *Store) sealedDest(ctx context.Context) (string, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return "", err
	}
	var found string
	for k := range keys.Keys() {
		if found != "" {
			continue // drain the listing
		}
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			continue // removed meanwhile
		}
		var d Destination
		if json.Unmarshal(e.Value(), &d) != nil {
			continue
		}
		_ = eachSecret(&d, func(v, _ string) (string, error) {
			if isSealed(v) {
				found = k
			}
			return v, nil
		})
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("list destinations: %w", err)
	}
	return found, nil
}

// Add creates d. It fails with ErrExists when the name is taken, with
// ErrNoConsumerRoom when d's consumers would not fit under the events
// stream's consumer limit, and with ErrWouldStoreInClear when the store has
// no secret key, d has secrets (a signing secret, header values, a body
// template), other
// destinations' are encrypted, and AllowStoringInClear was not given.
//
// The room is counted from the stored destinations: two Adds at the same
// moment may both take the last room, and then relay logs the consumer it
// cannot create (and /readyz reports it).
func (s *Store) Add(ctx context.Context, d Destination) (Destination, error) {
	d = d.WithDefaults()
	if err := d.Validate(); err != nil {
		return Destination{}, err
	}
	if s.sealer == nil && !s.allowClear && d.hasSecrets() {
		other, err := s.sealedDest(ctx)
		if err != nil {
			return Destination{}, err
		}
		if other != "" {
			return Destination{}, fmt.Errorf("%w (%s's are, say)", ErrWouldStoreInClear, other)
		}
	}
	info, err := s.eventsInfo(ctx)
	if err != nil {
		return Destination{}, err
	}
	room, err := s.consumerRoom(ctx, info)
	if err != nil {
		return Destination{}, err
	}
	if err := checkRoom(d, room); err != nil {
		if _, gerr := s.kv.Get(ctx, d.Name); gerr == nil {
			return Destination{}, fmt.Errorf("%w: %s (use 'relay dest update')", ErrExists, d.Name)
		}
		return Destination{}, err
	}
	last := info.State.LastSeq
	d.StartSeq = last + 1
	if d.Shared {
		// The shared consumer must be there before the destination: it
		// then delivers every event from StartSeq on.
		if err := EnsureShared(ctx, s.js, d.StartSeq, 0); err != nil {
			return Destination{}, err
		}
	}
	d.Subscriptions = nil
	if len(d.Types) > 0 {
		if _, err := s.kv.Get(ctx, d.Name); err == nil {
			return Destination{}, fmt.Errorf("%w: %s (use 'relay dest update')", ErrExists, d.Name)
		}
		mark, err := s.markSubscription(ctx, d.Name)
		if err != nil {
			return Destination{}, err
		}
		d.subscribe(mark)
	}
	d.Created = s.now().UTC()
	d.Updated = d.Created
	rev, err := s.kv.Create(ctx, d.Name, s.encode(d))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Destination{}, fmt.Errorf("%w: %s (use 'relay dest update')", ErrExists, d.Name)
		}
		return Destination{}, fmt.Errorf("store destination %s: %w", d.Name, err)
	}
	s.added(rev, d.ConsumerCount())
	return d, nil
}

// markSubscription marks a change of dest's subscriptions in the events
// stream, and returns the mark's sequence (see stream.SubPrefix).
func (s *Store) markSubscription(ctx context.Context, dest string) (uint64, error) {
	ack, err := s.js.Publish(ctx, stream.SubMarkSubject(dest), nil)
	if err != nil {
		return 0, fmt.Errorf("mark the subscription change of %s in the events stream: %w", dest, err)
	}
	return ack.Sequence, nil
}

// eventsInfo is the events stream's current state and configuration.
func (s *Store) eventsInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	st, err := s.js.Stream(ctx, stream.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	return info, nil
}

// Update changes an existing destination with fn, retrying on concurrent
// updates. A change of its Types takes effect from a mark it writes in the
// events stream (see Subscription and stream.SubPrefix).
func (s *Store) Update(ctx context.Context, name string, fn func(*Destination) error) (Destination, error) {
	var mark uint64 // of a change of subscriptions, made once
	for range 10 {
		e, err := s.kv.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Destination{}, fmt.Errorf("%w: %s", ErrNotFound, Display(name))
		}
		if err != nil {
			return Destination{}, err
		}
		d, _, err := s.decode(name, e.Value())
		if err != nil {
			return Destination{}, err
		}
		before := d.WithDefaults()
		if err := fn(&d); err != nil {
			return Destination{}, err
		}
		d.Name = name
		d = d.WithDefaults()
		if d.KindName() != before.KindName() {
			return Destination{}, settingErr("kind", fmt.Errorf("%w (%s is %s)", errKindFixed, Display(name), before.KindName()))
		}
		if d.Ordered != before.Ordered || d.Partitions != before.Partitions || d.Shared != before.Shared {
			return Destination{}, fmt.Errorf("%w: ordering, partitions and the shared consumer of %s are fixed; add a new destination with the new layout, send new events there, and remove %s once 'relay stats' shows it drained", ErrLayoutFixed, name, name)
		}
		if err := d.Validate(); err != nil {
			return Destination{}, err
		}
		if typesChanged(before.Types, d.Types) {
			if mark == 0 {
				if mark, err = s.markSubscription(ctx, name); err != nil {
					return Destination{}, err
				}
			}
			d.subscribe(mark)
		}
		d.Updated = s.now().UTC()
		if _, err := s.kv.Update(ctx, name, s.encode(d), e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // changed under us: read again
			}
			return Destination{}, err
		}
		return d, nil
	}
	return Destination{}, fmt.Errorf("destination %s is being changed concurrently; try again", name)
}

// RekeyResult is what Rekey did.
type RekeyResult struct {
	// Resealed are the destinations whose secrets Rekey sealed with the
	// current key: they were sealed with a previous one, or stored in the
	// clear (before a key was set).
	Resealed []string
	// Current are the destinations already sealed with the current key,
	// or without a secret.
	Current []string
	// Failed are the destinations Rekey could not reseal, with why (a
	// secret sealed with a key it was not given, say).
	Failed map[string]error
}

// Rekey seals every destination's secrets with the store's current key,
// after a key rotation: give the store the new key and the old one as a
// previous key (WithSecretKey). It changes nothing else, and does not
// validate the rest of a destination. An expired previous secret (past
// its PrevSecretUntil) is dropped rather than resealed. Destinations it
// cannot open are reported in Failed and left as they are.
func (s *Store) Rekey(ctx context.Context) (RekeyResult, error) {
	if s.sealer == nil {
		return RekeyResult{}, errors.New("rekey needs the secret key to seal with")
	}
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return RekeyResult{}, err
	}
	var names []string
	for k := range keys.Keys() {
		names = append(names, k)
	}
	// The listing ends early, without an error, when ctx does.
	if err := ctx.Err(); err != nil {
		return RekeyResult{}, fmt.Errorf("list destinations: %w", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	res := RekeyResult{Failed: map[string]error{}}
	for _, name := range names {
		resealed, err := s.reseal(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			// removed meanwhile
		case err != nil:
			res.Failed[name] = err
		case resealed:
			res.Resealed = append(res.Resealed, name)
		default:
			res.Current = append(res.Current, name)
		}
	}
	return res, nil
}

// reseal seals the secrets of the stored destination name with the current
// key if one of them is not (a compare-and-set on its revision, retried
// when it changed meanwhile), and reports whether it did.
func (s *Store) reseal(ctx context.Context, name string) (bool, error) {
	for range 10 {
		e, err := s.kv.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, fmt.Errorf("%w: %s", ErrNotFound, Display(name))
		}
		if err != nil {
			return false, err
		}
		var d Destination
		if err := json.Unmarshal(e.Value(), &d); err != nil {
			return false, fmt.Errorf("destination %s is %w: %w", name, ErrStoredCorrupt, err)
		}
		// An expired previous secret no longer signs: drop it.
		stale := d.PrevSecret != "" && !d.PrevSecretUntil.IsZero() && s.now().After(d.PrevSecretUntil)
		if stale {
			d.PrevSecret, d.PrevSecretUntil = "", time.Time{}
		}
		// So does an expired previous signing key.
		if d.PrevSigningKey != "" && !d.PrevSigningKeyUntil.IsZero() && s.now().After(d.PrevSigningKeyUntil) {
			d.PrevSigningKey, d.PrevSigningKeyUntil, stale = "", time.Time{}, true
		}
		err = eachSecret(&d, func(v, aad string) (string, error) {
			if v == "" {
				return v, nil
			}
			plain, current, err := s.sealer.openKey(v, aad)
			stale = stale || err == nil && !current
			return plain, err
		})
		if err != nil {
			return false, err
		}
		if !stale {
			return false, nil
		}
		if _, err := s.kv.Update(ctx, name, s.encode(d), e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // changed under us: read again
			}
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("destination %s is being changed concurrently; try again", name)
}

// Get returns one destination.
func (s *Store) Get(ctx context.Context, name string) (Destination, error) {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Destination{}, fmt.Errorf("%w: %s", ErrNotFound, Display(name))
	}
	if err != nil {
		return Destination{}, err
	}
	d, _, err := s.decode(name, e.Value())
	return d, err
}

// Names returns the names of all destinations, in no particular order.
func (s *Store) Names(ctx context.Context) ([]string, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range keys.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// List returns all destinations, sorted by name.
func (s *Store) List(ctx context.Context) ([]Destination, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []Destination
	for k := range keys.Keys() {
		d, err := s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	sortDests(out)
	return out, nil
}

// Remove deletes a destination and its consumer. Events not yet delivered to
// it stay in the event log until its retention removes them.
func (s *Store) Remove(ctx context.Context, name string) error {
	d, err := s.Get(ctx, name)
	if err != nil {
		return err
	}
	if err := s.kv.Delete(ctx, name); err != nil {
		return err
	}
	for _, c := range d.WithDefaults().ConsumerNames() {
		err := s.js.DeleteConsumer(ctx, stream.EventsStream, c)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("delete consumer %s of %s: %w", c, name, err)
		}
	}
	return nil
}

// Pending returns how many events of dest its consumers have not yet
// acknowledged (waiting or in flight); 0 when it has no consumer yet.
func (s *Store) Pending(ctx context.Context, name string) (uint64, error) {
	d, err := s.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	var n uint64
	if d.Shared {
		// Those of its events after the shared consumer's ack floor (some
		// of them may be acked already).
		c, err := s.js.Consumer(ctx, stream.EventsStream, SharedConsumer)
		switch {
		case err == nil:
			n, err = CountAfter(ctx, s.js, stream.DestFilters(name), max(c.CachedInfo().AckFloor.Stream, d.StartSeq-1))
			if err != nil {
				return 0, err
			}
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return 0, err
		}
	}
	for _, cn := range d.WithDefaults().ConsumerNames() {
		c, err := s.js.Consumer(ctx, stream.EventsStream, cn)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		info := c.CachedInfo()
		n += info.NumPending + uint64(info.NumAckPending)
	}
	return n, nil
}

// Watch is a live copy of every destination, as the destinations bucket
// holds them: the engine's view, fed by Apply. The zero value is empty and
// ready.
type Watch struct {
	mu    sync.RWMutex
	dests map[string]Destination
	// rev is the destinations bucket's revision applied last, gen counts
	// the changes applied, and moved is closed (and replaced) by each.
	rev   uint64
	gen   uint64
	moved chan struct{}
}

// NewWatch returns a watch holding ds (for tests and benchmarks).
func NewWatch(ds ...Destination) *Watch {
	w := &Watch{dests: map[string]Destination{}}
	for _, d := range ds {
		w.dests[d.Name] = d
	}
	return w
}

// ErrStoredInvalid is Apply's error for an entry that does not pass
// Destination.Validate: its events wait until the record is fixed.
var ErrStoredInvalid = errors.New("destination stored invalid")

// invalidError is an entry's validation error, which is ErrStoredInvalid,
// with the validation's text alone.
type invalidError struct{ err error }

func (e invalidError) Error() string   { return e.err.Error() }
func (e invalidError) Unwrap() []error { return []error{ErrStoredInvalid, e.err} }

// Change is what one entry of the destinations bucket did to a Watch.
type Change struct {
	// Before is the destination the entry replaced, if Had.
	Before Destination
	Had    bool
	// After is the destination now, if Put (not removed, not refused).
	After Destination
	Put   bool
}

// Apply takes in e, an entry of the destinations bucket, opened with s's
// key. A put is decoded and validated as 'relay dest add' validates it (a
// record written to the bucket by other means is not trusted) and its
// filter and template compiled; one that fails (ErrSealed, ErrStoredInvalid,
// or a corrupt record) is dropped from the watch, with the error saying why.
func (w *Watch) Apply(s *Store, e jetstream.KeyValueEntry) (Change, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.appliedLocked(e.Revision())
	if w.dests == nil {
		w.dests = map[string]Destination{}
	}
	var ch Change
	ch.Before, ch.Had = w.dests[e.Key()]
	delete(w.dests, e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		return ch, nil
	}
	d, open, err := s.decode(e.Key(), e.Value())
	if err != nil {
		return ch, err
	}
	if !open {
		return ch, ErrSealed
	}
	d = d.WithDefaults()
	if err = d.Validate(); err == nil && d.Name != e.Key() {
		err = fmt.Errorf("it is stored under the key %q but names %q", e.Key(), d.Name)
	}
	if err != nil {
		return ch, invalidError{err}
	}
	if d.Filter != "" {
		// Compiled once per version; Validate compiled it already.
		d.filter, _ = CompileFilter(d.Filter)
	}
	if d.BodyTemplate != "" {
		d.bodyTemplate, _ = CompileBodyTemplate(d.BodyTemplate)
	}
	w.dests[e.Key()] = d
	ch.After, ch.Put = d, true
	return ch, nil
}

// appliedLocked records a change of the bucket at revision rev; w.mu is
// held.
func (w *Watch) appliedLocked(rev uint64) {
	w.rev = max(w.rev, rev)
	w.gen++
	if w.moved != nil {
		close(w.moved)
	}
	w.moved = make(chan struct{})
}

// WaitRev waits until the change at revision rev, or a later one, is
// applied.
func (w *Watch) WaitRev(ctx context.Context, rev uint64) error {
	for {
		w.mu.Lock()
		if w.rev >= rev {
			w.mu.Unlock()
			return nil
		}
		if w.moved == nil {
			w.moved = make(chan struct{})
		}
		moved := w.moved
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-moved:
		}
	}
}

// Get returns destination name, if the watch has it.
func (w *Watch) Get(name string) (Destination, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	d, ok := w.dests[name]
	return d, ok
}

// All returns a copy of every destination the watch has, by name.
func (w *Watch) All() map[string]Destination {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return maps.Clone(w.dests)
}

// View calls fn with the watch's destinations, read-locked, and the count
// of changes applied so far (a cache of what fn derives is good while the
// count is the same). fn must not keep dests or change it.
func (w *Watch) View(fn func(gen uint64, dests map[string]Destination)) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	fn(w.gen, w.dests)
}

// MarkedAt reports whether destination dest's stored record has the
// subscription change marked at stream sequence seq (see stream.SubPrefix),
// and the record's revision.
func (s *Store) MarkedAt(ctx context.Context, dest string, seq uint64) (rev uint64, marked bool, err error) {
	e, err := s.kv.Get(ctx, dest)
	if err != nil {
		return 0, false, err
	}
	d, _, err := s.decode(dest, e.Value())
	if err != nil {
		return 0, false, err
	}
	return e.Revision(), d.marks(seq), nil
}

func sortDests(ds []Destination) {
	slices.SortFunc(ds, func(a, b Destination) int { return strings.Compare(a.Name, b.Name) })
}
