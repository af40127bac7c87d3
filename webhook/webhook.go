// Package webhook signs and verifies webhooks in the Standard Webhooks
// format (https://www.standardwebhooks.com), as relay sends them: the
// headers webhook-id, webhook-timestamp and webhook-signature, the last
// one or more space-separated signatures of "id.timestamp.body" in either
// scheme:
//
//   - "v1,<base64 HMAC-SHA256>" under a shared "whsec_<base64>" secret;
//   - "v1a,<base64 Ed25519>" under a "whsk_<base64>" signing key that only
//     the sender holds, verified with its "whpk_<base64>" public key.
//
// A header holds two signatures of a kind while a key rotates (the old
// key's and the new one's), and both kinds while a destination moves from
// one scheme to the other.
//
// A receiver calls VerifyRequest with its secret or public key, the
// request's headers and its raw body, before it parses the body; or
// JWKS.VerifyRequest, which fetches the public keys from relay's JSON Web
// Key Set and keeps them fresh. The package imports only the standard
// library, so a receiver links nothing else.
package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every Standard Webhooks secret.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a request's timestamp may be from the
// receiver's clock, either way, as the Standard Webhooks libraries allow:
// a request replayed later than that is refused.
const DefaultTolerance = 5 * time.Minute

// Why a request does not verify. VerifyRequest's errors match one of
// these with errors.Is.
var (
	// ErrMissingHeader: a webhook-* header is missing or empty.
	ErrMissingHeader = errors.New("webhook: missing header")
	// ErrTimestamp: webhook-timestamp is not a Unix time in seconds, or is
	// further from now than the tolerance.
	ErrTimestamp = errors.New("webhook: timestamp")
	// ErrNoMatchingSignature: no signature of the header matches the body
	// under the key. The error that wraps it says which scheme it looked
	// for (v1 under a secret, v1a under a public key).
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
	// ErrSecret: the secret is not "whsec_" and the base64 of 24 to 64
	// bytes.
	ErrSecret = errors.New("not a Standard Webhooks secret")
)

// GenerateSecret returns a new random signing secret: "whsec_" and the
// base64 of 32 random bytes.
func GenerateSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics on failure)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ValidateSecret reports a secret that is not a Standard Webhooks signing
// secret ("whsec_" and the base64 of 24 to 64 bytes).
func ValidateSecret(secret string) error {
	_, err := decodeSecret(secret)
	return err
}

func decodeSecret(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf(`%w: it must be "whsec_<base64>"`, ErrSecret)
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: the part after whsec_ is not valid base64 (%v)", ErrSecret, err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("%w: its key is %d bytes, not 24 to 64", ErrSecret, len(key))
	}
	return key, nil
}

// Sign returns the webhook-signature header value of a request: "v1," and
// the base64 of HMAC-SHA256(key, id.timestamp.body), timestamp being Unix
// seconds.
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	sg, err := signerFor(secret)
	if err != nil {
		return "", err
	}
	return sg.sign(id, timestamp, body), nil
}

// Verify checks signatures, a webhook-signature header (one or more
// space-separated signatures), against key: a "whsec_" secret checks the
// v1 (HMAC) signatures, a "whpk_" public key the v1a (Ed25519) ones, and
// the signatures of the other scheme are ignored. It checks the signature
// only: VerifyRequest also checks the timestamp.
func Verify(key, id string, timestamp int64, body []byte, signatures string) error {
	if strings.HasPrefix(key, PublicKeyPrefix) {
		pub, err := decodePublicKey(key)
		if err != nil {
			return err
		}
		return verifyV1a([]ed25519.PublicKey{pub}, id, timestamp, body, signatures, errNoV1aUnderKey)
	}
	if !strings.HasPrefix(key, SecretPrefix) {
		return errKeyKind(key)
	}
	sg, err := signerFor(key)
	if err != nil {
		return err
	}
	want := sg.sign(id, timestamp, body)
	for _, sig := range strings.Fields(signatures) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	if !hasScheme(signatures, "v1,") {
		return errNoV1InHeader
	}
	return errNoV1UnderSecret
}

// The ways ErrNoMatchingSignature comes back, made once: a receiver that
// is sent forged requests should not pay for formatting the refusal.
var (
	errNoV1InHeader    = fmt.Errorf("%w: the header has no v1 signature (v1a ones verify with a whpk_ public key)", ErrNoMatchingSignature)
	errNoV1UnderSecret = fmt.Errorf("%w: no v1 signature matches the secret", ErrNoMatchingSignature)
	errNoV1aInHeader   = fmt.Errorf("%w: the header has no v1a signature (v1 ones verify with a whsec_ secret)", ErrNoMatchingSignature)
	errNoV1aUnderKey   = fmt.Errorf("%w: no v1a signature verifies under the public key", ErrNoMatchingSignature)
)

// errKeyKind is the error for a key that is neither a secret nor a public
// key: it matches both ErrSecret and ErrPublicKey.
func errKeyKind(key string) error {
	hint := ""
	if strings.HasPrefix(key, SigningKeyPrefix) {
		hint = " (a whsk_ signing key signs: verify with its whpk_ public key)"
	}
	return fmt.Errorf(`%w, and %w: the key must be a secret, "whsec_<base64>" (v1, HMAC), or a public key, "whpk_<base64>" (v1a, Ed25519)%s`, ErrSecret, ErrPublicKey, hint)
}

// hasScheme reports whether signatures holds one that starts with prefix
// ("v1," or "v1a,").
func hasScheme(signatures, prefix string) bool {
	for _, sig := range strings.Fields(signatures) {
		if strings.HasPrefix(sig, prefix) {
			return true
		}
	}
	return false
}

// VerifyRequest checks a request a receiver got: its webhook-* headers h,
// its raw body, the timestamp within tolerance of now (DefaultTolerance
// if tolerance is 0), and a signature under key, a "whsec_" secret (v1)
// or a "whpk_" public key (v1a), as Verify. Receivers should answer 401
// when it fails, and may use webhook-id to drop a request they have
// already processed (relay delivers at least once).
func VerifyRequest(key string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs, err := requestHeaders(h, now, tolerance)
	if err != nil {
		return err
	}
	return Verify(key, id, ts, body, sigs)
}

// requestHeaders returns a request's webhook-id, webhook-timestamp and
// webhook-signature, once it has checked that they are there and that
// the timestamp is within tolerance of now.
func requestHeaders(h http.Header, now time.Time, tolerance time.Duration) (id string, timestamp int64, signatures string, err error) {
	id, ts, signatures := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	for _, v := range [...]struct{ name, value string }{{HeaderID, id}, {HeaderTimestamp, ts}, {HeaderSignature, signatures}} {
		if v.value == "" {
			return "", 0, "", fmt.Errorf("%w: %s", ErrMissingHeader, v.name)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", 0, "", fmt.Errorf("%w: %q is not a Unix time in seconds", ErrTimestamp, ts)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return "", 0, "", fmt.Errorf("%w: %s is %s from now, more than the tolerance of %s", ErrTimestamp, ts, d.Round(time.Second), tolerance)
	}
	return id, sec, signatures, nil
}

// A signer holds a decoded key and reusable HMAC states for it: a sender
// signs once per request, and decoding the secret and setting up the HMAC
// cost more than hashing a small body.
type signer struct {
	macs sync.Pool // of hash.Hash, HMAC-SHA256 keyed
}

// signers caches a signer per secret, up to maxSigners (then it starts
// over), so that rotated-out secrets do not pile up.
var (
	signersMu sync.RWMutex
	signers   = map[string]*signer{}
)

const maxSigners = 4096

func signerFor(secret string) (*signer, error) {
	signersMu.RLock()
	sg := signers[secret]
	signersMu.RUnlock()
	if sg != nil {
		return sg, nil
	}
	key, err := decodeSecret(secret)
	if err != nil {
		return nil, err
	}
	sg = &signer{}
	sg.macs.New = func() any { return hmac.New(sha256.New, key) }
	signersMu.Lock()
	defer signersMu.Unlock()
	if len(signers) >= maxSigners {
		clear(signers)
	}
	signers[secret] = sg
	return sg, nil
}

func (sg *signer) sign(id string, timestamp int64, body []byte) string {
	m := sg.macs.Get().(hash.Hash)
	defer sg.macs.Put(m)
	m.Reset()
	// id.timestamp. in one write (one buffer for the usual id lengths).
	var buf [128]byte
	b := append(buf[:0], id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, timestamp, 10)
	b = append(b, '.')
	m.Write(b)
	m.Write(body)
	var out [3 + 44]byte // "v1," and the base64 of 32 bytes
	copy(out[:], "v1,")
	base64.StdEncoding.Encode(out[3:], m.Sum(buf[:0]))
	return string(out[:])
}
