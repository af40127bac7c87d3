package relay

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// sealedPrefix marks a secret encrypted at rest.
const sealedPrefix = "enc:v1:"

// ErrSealed is returned for a destination whose secret is encrypted when no
// (or a different) key was given.
var ErrSealed = errors.New("the destination's secret is encrypted at rest and no matching key was given (set RELAY_SECRET_KEY or --secret-key-file)")

// sealer encrypts destination secrets with AES-256-GCM under a key derived
// from the operator's key material (SHA-256 of it).
type sealer struct{ aead cipher.AEAD }

// MinKeyLen is the least key material accepted, in bytes.
const MinKeyLen = 16

func newSealer(material []byte) (*sealer, error) {
	if len(material) < MinKeyLen {
		return nil, fmt.Errorf("secret key: %d bytes is too short; use at least %d random bytes (e.g. openssl rand -base64 32)", len(material), MinKeyLen)
	}
	k := sha256.Sum256(material)
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(plain, name string) string {
	if plain == "" || s == nil {
		return plain
	}
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	// The destination name is authenticated too: a sealed secret cannot be
	// copied to another destination.
	ct := s.aead.Seal(nonce, nonce, []byte(plain), []byte(name))
	return sealedPrefix + base64.StdEncoding.EncodeToString(ct)
}

func (s *sealer) open(v, name string) (string, error) {
	raw, ok := strings.CutPrefix(v, sealedPrefix)
	if !ok {
		return v, nil // stored before a key was set
	}
	if s == nil {
		return "", ErrSealed
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", fmt.Errorf("secret of %s is stored corrupt", name)
	}
	pt, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], []byte(name))
	if err != nil {
		return "", ErrSealed
	}
	return string(pt), nil
}

func isSealed(v string) bool { return strings.HasPrefix(v, sealedPrefix) }
