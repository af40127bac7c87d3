package stream

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Producers publish to the same subjects as relay's own republishes (a
// retry from Redis, a replay, a typed event's copy all go to
// relay.in.<dest>), so the subject cannot tell relay's messages from a
// producer's. What does is a seal: relay's republishes carry Relay-Seal, an
// HMAC-SHA256 of their dedup id and relay's headers under a secret kept in
// the relay_state bucket, which producers cannot read. Decode trusts
// relay's headers (the attempts made, the origin, the publish time, the
// wait, the type, a fan-out's destinations) only on a message whose seal
// holds; on any other message they are dropped, as if absent.
//
// A producer may set, of relay's headers, Relay-Event-Id and
// Relay-Order-Key only (see ProducerHeader).

// SealSecretKey is the key, in the relay_state bucket, of the secret
// that seals relay's republishes: one for every replica and every CLI run,
// created by the first that needs it.
const SealSecretKey = "header-seal-secret"

// sealLen is the length of a seal as a header value: base64 (URL, no
// padding) of the 32 bytes of an HMAC-SHA256.
const sealLen = 43

// SealHeaderBytes is how many bytes Relay-Seal adds to a message.
const SealHeaderBytes = len(HdrSeal) + sealLen + 4 // "K: V\r\n"

// sealedHeaders are the headers a seal covers, in this order: the dedup id,
// the event id and every header only relay may set.
var sealedHeaders = [...]string{HdrMsgID, HdrEventID, HdrAttempt, HdrOrigin, HdrPublished, HdrNotBefore, HdrType, HdrFanDests}

// Seal seals relay's republishes and checks the seal of a stored message.
// A nil *Seal seals nothing and finds no seal valid: every message is then
// read as a producer's. Safe for concurrent use.
type Seal struct {
	key   []byte
	state sync.Pool // of *sealState
}

// sealState is one HMAC and the buffers of one sealing.
type sealState struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// MinSealKey is the shortest secret NewSeal accepts, in bytes.
const MinSealKey = 32

// NewSeal returns the seal keyed by secret, at least MinSealKey bytes.
func NewSeal(secret []byte) (*Seal, error) {
	if len(secret) < MinSealKey {
		return nil, fmt.Errorf("header seal: a secret of %d bytes is too short; it needs at least %d", len(secret), MinSealKey)
	}
	s := &Seal{key: append([]byte(nil), secret...)}
	s.state.New = func() any { return &sealState{mac: hmac.New(sha256.New, s.key), buf: make([]byte, 0, 256)} }
	return s, nil
}

// LoadSeal returns the seal of relay's republishes, keyed by the secret in
// the relay_state bucket, creating the secret if none exists yet.
func LoadSeal(ctx context.Context, js jetstream.JetStream) (*Seal, error) {
	secret, err := LoadSecret(ctx, js, SealSecretKey, "the header seal's secret")
	if err != nil {
		return nil, err
	}
	return NewSeal(secret)
}

// LoadSecret returns the 32 random bytes stored under key in the relay_state
// bucket, creating them if the key holds none: every replica and CLI run
// that asks gets the same secret. what names the secret in errors.
func LoadSecret(ctx context.Context, js jetstream.JetStream, key, what string) ([]byte, error) {
	kv, err := js.KeyValue(ctx, StateBucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", StateBucket, err)
	}
	for range 3 {
		e, err := kv.Get(ctx, key)
		if err == nil && len(e.Value()) == 32 {
			return e.Value(), nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read %s (%s/%s): %w", what, StateBucket, key, err)
		}
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		if _, err := kv.Create(ctx, key, secret); err == nil {
			return secret, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store %s (%s/%s): %w", what, StateBucket, key, err)
		}
		// Another replica created it first: read theirs.
	}
	return nil, fmt.Errorf("cannot agree on %s with the other replicas (%s/%s)", what, StateBucket, key)
}

// sum computes h's seal into st.sum.
func (s *Seal) sum(st *sealState, h nats.Header) {
	b := st.buf[:0]
	for _, name := range sealedHeaders {
		v := h.Get(name)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	st.mac.Reset()
	_, _ = st.mac.Write(b)
	st.mac.Sum(st.sum[:0])
	if cap(b) <= 4096 {
		st.buf = b
	}
}

// seal sets h's Relay-Seal. A nil s leaves h unsealed.
func (s *Seal) seal(h nats.Header) {
	if s == nil {
		return
	}
	st := s.state.Get().(*sealState)
	s.sum(st, h)
	h[HdrSeal] = []string{base64.RawURLEncoding.EncodeToString(st.sum[:])}
	s.state.Put(st)
}

// Valid reports whether h carries a seal of s over its values: the message
// is one relay published. Always false for a nil s.
func (s *Seal) Valid(h nats.Header) bool {
	v := h.Get(HdrSeal)
	if s == nil || len(v) != sealLen {
		return false
	}
	st := s.state.Get().(*sealState)
	s.sum(st, h)
	var want [sealLen]byte
	base64.RawURLEncoding.Encode(want[:], st.sum[:])
	s.state.Put(st)
	// In constant time, as hmac.Equal, without copying v.
	var diff byte
	for i := range sealLen {
		diff |= want[i] ^ v[i]
	}
	return diff == 0
}

// ProducerHeader reports whether a producer may set header name: any but
// relay's (Relay-*), of which Relay-Event-Id and Relay-Order-Key only.
// Case does not matter.
func ProducerHeader(name string) bool {
	if !hasPrefixFold(name, "relay-") {
		return true
	}
	return strings.EqualFold(name, HdrEventID) || strings.EqualFold(name, HdrKey)
}

// unsealed returns the headers of h that are relay's own and that a
// producer may not set (not ProducerHeader), nil if none: a message
// without a valid seal carrying them did not get them from relay.
func unsealed(h nats.Header) []string {
	var out []string
	for name := range h {
		if !ProducerHeader(name) {
			out = append(out, name)
		}
	}
	return out
}

// without returns a copy of h without the headers named.
func without(h nats.Header, names []string) nats.Header {
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = vs
	}
	for _, n := range names {
		delete(out, n)
	}
	return out
}
