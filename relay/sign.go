package relay

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	return sign(key, id, timestamp, body), nil
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
