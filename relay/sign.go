package relay

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// SecretPrefix starts every Standard Webhooks secret.
const SecretPrefix = "whsec_"

// GenerateSecret returns a new random signing secret: "whsec_" and the base64
// of 32 random bytes.
func GenerateSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics on failure)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ValidateSecret reports a secret that is not a Standard Webhooks signing
// secret relay can use ("whsec_" and the base64 of 24 to 64 bytes).
func ValidateSecret(secret string) error {
	_, err := decodeSecret(secret)
	return err
}

func decodeSecret(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New(`secret must be in the Standard Webhooks format "whsec_<base64>" (omit --secret to have one generated)`)
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("secret: the part after whsec_ is not valid base64: %v", err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("secret: key is %d bytes; use 24 to 64 random bytes", len(key))
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature header value, "v1,<base64
// HMAC-SHA256(key, id.timestamp.body)>", timestamp being Unix seconds.
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	sg, err := signerFor(secret)
	if err != nil {
		return "", err
	}
	return sg.sign(id, timestamp, body), nil
}

// A signer holds a decoded key and reusable HMAC states for it: Sign runs
// once per attempt, and decoding the secret and setting up the HMAC cost
// more than hashing a small body.
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

func sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, timestamp, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a webhook-signature header (one or more space-separated
// signatures) against secret. It is what a receiver does; relay's sink uses it.
func Verify(secret, id string, timestamp int64, body []byte, header string) error {
	key, err := decodeSecret(secret)
	if err != nil {
		return err
	}
	want := sign(key, id, timestamp, body)
	for _, sig := range strings.Fields(header) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("no matching v1 signature")
}
