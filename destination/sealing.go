package destination

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

// ErrSealed is returned for a destination whose secrets are encrypted when no
// (or a different) key was given.
var ErrSealed = errors.New("the destination's secrets (signing secret, header values, body template) are encrypted at rest and no matching key was given (set RELAY_SECRET_KEY or --secret-key-file)")

// sealer encrypts destination secrets with AES-256-GCM under a key derived
// from the operator's key material (SHA-256 of it). It opens secrets sealed
// with its previous keys too (a key rotation), and seals with the current
// one only.
type sealer struct {
	aead cipher.AEAD
	prev []cipher.AEAD
}

// MinKeyLen is the least key material accepted, in bytes.
const MinKeyLen = 16

func newSealer(material []byte, previous ...[]byte) (*sealer, error) {
	aead, err := newAEAD("secret key", material)
	if err != nil {
		return nil, err
	}
	s := &sealer{aead: aead}
	for _, p := range previous {
		a, err := newAEAD("previous secret key", p)
		if err != nil {
			return nil, err
		}
		s.prev = append(s.prev, a)
	}
	return s, nil
}

func newAEAD(what string, material []byte) (cipher.AEAD, error) {
	if len(material) < MinKeyLen {
		return nil, fmt.Errorf("%s: %d bytes is too short; use at least %d random bytes (e.g. openssl rand -base64 32)", what, len(material), MinKeyLen)
	}
	k := sha256.Sum256(material)
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
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
	plain, _, err := s.openKey(v, name)
	return plain, err
}

// openKey opens v and reports whether it is sealed with the current key
// (false for a secret stored in the clear, or sealed with a previous key).
func (s *sealer) openKey(v, name string) (plain string, current bool, err error) {
	raw, ok := strings.CutPrefix(v, sealedPrefix)
	if !ok {
		return v, false, nil // stored before a key was set
	}
	if s == nil {
		return "", false, ErrSealed
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", false, fmt.Errorf("secret of %s is stored corrupt", name)
	}
	for i, a := range append([]cipher.AEAD{s.aead}, s.prev...) {
		pt, err := a.Open(nil, b[:a.NonceSize()], b[a.NonceSize():], []byte(name))
		if err == nil {
			return string(pt), i == 0, nil
		}
	}
	return "", false, ErrSealed
}

func isSealed(v string) bool { return strings.HasPrefix(v, sealedPrefix) }
