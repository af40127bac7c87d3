package webhook

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// The prefixes of Standard Webhooks' asymmetric keys (signature scheme
// "v1a", Ed25519): a sender signs with a "whsk_" signing key, a receiver
// verifies with its "whpk_" public key and cannot sign.
const (
	SigningKeyPrefix = "whsk_"
	PublicKeyPrefix  = "whpk_"
)

var (
	// ErrSigningKey: not "whsk_" and the base64 of an Ed25519 private key
	// (64 bytes, seed and public key) or seed (32 bytes).
	ErrSigningKey = errors.New("not a Standard Webhooks signing key")
	// ErrPublicKey: not "whpk_" and the base64 of an Ed25519 public key
	// (32 bytes).
	ErrPublicKey = errors.New("not a Standard Webhooks public key")
)

// GenerateSigningKey returns a new Ed25519 signing key: "whsk_" and the
// base64 of the 64-byte private key (seed and public key, as Go and the
// Svix server keep it).
func GenerateSigningKey() string {
	_, priv, _ := ed25519.GenerateKey(rand.Reader) // never fails
	return SigningKeyPrefix + base64.StdEncoding.EncodeToString(priv)
}

// ValidateSigningKey reports a value that is not a signing key.
func ValidateSigningKey(key string) error {
	_, err := decodeSigningKey(key)
	return err
}

func decodeSigningKey(key string) (ed25519.PrivateKey, error) {
	raw, ok := strings.CutPrefix(key, SigningKeyPrefix)
	if !ok {
		return nil, fmt.Errorf(`%w: it must be "whsk_<base64>"`, ErrSigningKey)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: the part after whsk_ is not valid base64 (%v)", ErrSigningKey, err)
	}
	switch len(b) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(b), nil
	case ed25519.PrivateKeySize:
		priv := ed25519.NewKeyFromSeed(b[:ed25519.SeedSize])
		if subtle.ConstantTimeCompare(priv[ed25519.SeedSize:], b[ed25519.SeedSize:]) != 1 {
			return nil, fmt.Errorf("%w: its last 32 bytes are not the public key of its first 32", ErrSigningKey)
		}
		return priv, nil
	}
	return nil, fmt.Errorf("%w: its key is %d bytes, not 32 (a seed) or 64", ErrSigningKey, len(b))
}

// PublicKey returns the public key of a signing key: "whpk_" and the
// base64 of its 32 bytes.
func PublicKey(signingKey string) (string, error) {
	priv, err := decodeSigningKey(signingKey)
	if err != nil {
		return "", err
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)), nil
}

// ValidatePublicKey reports a value that is not a public key.
func ValidatePublicKey(key string) error {
	_, err := decodePublicKey(key)
	return err
}

func decodePublicKey(key string) (ed25519.PublicKey, error) {
	raw, ok := strings.CutPrefix(key, PublicKeyPrefix)
	if !ok {
		return nil, fmt.Errorf(`%w: it must be "whpk_<base64>"`, ErrPublicKey)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: the part after whpk_ is not valid base64 (%v)", ErrPublicKey, err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: its key is %d bytes, not 32", ErrPublicKey, len(b))
	}
	return ed25519.PublicKey(b), nil
}

// SignEd25519 returns the "v1a" signature of a request, as in the
// webhook-signature header: "v1a," and the base64 of the Ed25519
// signature of "id.timestamp.body", timestamp being Unix seconds.
func SignEd25519(signingKey, id string, timestamp int64, body []byte) (string, error) {
	priv, err := privateKeyFor(signingKey)
	if err != nil {
		return "", err
	}
	return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, signedContent(id, timestamp, body))), nil
}

// signedContent is "id.timestamp.body".
func signedContent(id string, timestamp int64, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(body)+22)
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, timestamp, 10)
	b = append(b, '.')
	return append(b, body...)
}

// verifyV1a returns nil when one of the header's v1a signatures verifies
// under one of keys, else an error matching ErrNoMatchingSignature:
// errNoV1aInHeader when the header has no v1a signature, miss otherwise.
func verifyV1a(keys []ed25519.PublicKey, id string, timestamp int64, body []byte, signatures string, miss error) error {
	var content []byte
	seen := false
	for _, field := range strings.Fields(signatures) {
		b64, ok := strings.CutPrefix(field, "v1a,")
		if !ok {
			continue
		}
		seen = true
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) != ed25519.SignatureSize {
			continue
		}
		if content == nil {
			content = signedContent(id, timestamp, body)
		}
		for _, k := range keys {
			if ed25519.Verify(k, content, sig) {
				return nil
			}
		}
	}
	if !seen {
		return errNoV1aInHeader
	}
	return miss
}

// privateKeys caches decoded signing keys (deriving the public half is a
// scalar multiplication), up to maxSigners.
var (
	privateKeysMu sync.RWMutex
	privateKeys   = map[string]ed25519.PrivateKey{}
)

func privateKeyFor(key string) (ed25519.PrivateKey, error) {
	privateKeysMu.RLock()
	priv := privateKeys[key]
	privateKeysMu.RUnlock()
	if priv != nil {
		return priv, nil
	}
	priv, err := decodeSigningKey(key)
	if err != nil {
		return nil, err
	}
	privateKeysMu.Lock()
	defer privateKeysMu.Unlock()
	if len(privateKeys) >= maxSigners {
		clear(privateKeys)
	}
	privateKeys[key] = priv
	return priv, nil
}

// JWK is a public key as a JSON Web Key (RFC 8037): kty OKP, crv Ed25519.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	// X is the public key, base64url without padding.
	X string `json:"x"`
	// Kid is the key's RFC 7638 thumbprint: the same key always has the
	// same id, whoever computes it.
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
}

// JWKSet is a JSON Web Key Set (RFC 7517).
type JWKSet struct {
	Keys []JWK `json:"keys"`
}

// JWKOf returns a public key ("whpk_...") as a JWK for signatures
// (use sig, alg EdDSA), its kid its thumbprint.
func JWKOf(publicKey string) (JWK, error) {
	pub, err := decodePublicKey(publicKey)
	if err != nil {
		return JWK{}, err
	}
	x := base64.RawURLEncoding.EncodeToString(pub)
	// RFC 7638: the required members, in lexicographic order, no spaces.
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`))
	return JWK{Kty: "OKP", Crv: "Ed25519", X: x, Kid: base64.RawURLEncoding.EncodeToString(sum[:]), Use: "sig", Alg: "EdDSA"}, nil
}

// PublicKeyOfJWK returns a JWK's key as "whpk_...": an error for a JWK
// that is not an Ed25519 public key.
func PublicKeyOfJWK(k JWK) (string, error) {
	if k.Kty != "OKP" || k.Crv != "Ed25519" {
		return "", fmt.Errorf("%w: the JWK is kty %q, crv %q, not OKP and Ed25519", ErrPublicKey, k.Kty, k.Crv)
	}
	b, err := base64.RawURLEncoding.DecodeString(k.X)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return "", fmt.Errorf("%w: the JWK's x is not the base64url of 32 bytes", ErrPublicKey)
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(b), nil
}
