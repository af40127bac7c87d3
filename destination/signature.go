package destination

import (
	"errors"
	"fmt"
	"time"

	"github.com/relaydev/relay/webhook"
)

// How deliveries are signed (Destination.Signature).
const (
	// SignatureHMAC: "v1", HMAC-SHA256 with the destination's secret
	// (whsec_), shared with the receiver.
	SignatureHMAC = "hmac"
	// SignatureEd25519: "v1a", Ed25519 with the destination's signing key
	// (whsk_); the receiver verifies with its public key (whpk_) and
	// cannot sign.
	SignatureEd25519 = "ed25519"
	// SignatureBoth: "v1" and "v1a" on every request, while receivers
	// move from the secret to the public key.
	SignatureBoth = "both"
)

// SignsHMAC reports whether d signs "v1" with its secret (when it has one).
func (d Destination) SignsHMAC() bool {
	return d.Signature == "" || d.Signature == SignatureHMAC || d.Signature == SignatureBoth
}

// SignsEd25519 reports whether d signs "v1a" with its signing key.
func (d Destination) SignsEd25519() bool {
	return d.Signature == SignatureEd25519 || d.Signature == SignatureBoth
}

// signingKeyAAD binds a sealed signing key to its destination.
func signingKeyAAD(dest string) string { return dest + "/signing-key" }

func (d Destination) validateSignature() error {
	switch d.Signature {
	case "", SignatureHMAC, SignatureEd25519, SignatureBoth:
	default:
		return settingErr("signature", fmt.Errorf("signature %q: use %q, %q or %q", d.Signature, SignatureHMAC, SignatureEd25519, SignatureBoth))
	}
	for _, k := range []string{d.SigningKey, d.PrevSigningKey} {
		if isSealed(k) {
			return settingErr("signing-key", ErrSealed)
		}
		if k != "" {
			if err := webhook.ValidateSigningKey(k); err != nil {
				return settingErr("signing-key", fmt.Errorf("%w (omit it to have one generated)", err))
			}
		}
	}
	if d.Signature == SignatureEd25519 && d.Secret != "" {
		return settingErr("secret", errors.New("signature ed25519 signs with a key, not a secret: leave the secret out, or sign both"))
	}
	if d.SignsEd25519() && d.SigningKey == "" {
		return settingErr("signing-key", errors.New("signature "+d.Signature+" signs with an Ed25519 key, and the destination has none (omit it to have one generated)"))
	}
	return nil
}

// PublicKeys are the public keys of d's "v1a" signing keys in force at
// now: the current one first, then the previous one while it still signs
// (a rotation's overlap). None when d does not sign "v1a", or its keys are
// sealed (the store had no key to open them).
func (d Destination) PublicKeys(now time.Time) []PublicKey {
	if !d.SignsEd25519() {
		return nil
	}
	var out []PublicKey
	add := func(sk string, until time.Time) {
		pk, err := webhook.PublicKey(sk)
		if err != nil {
			return
		}
		jwk, _ := webhook.JWKOf(pk)
		out = append(out, PublicKey{Key: pk, ID: jwk.Kid, Until: until})
	}
	add(d.SigningKey, time.Time{})
	if d.PrevSigningKey != "" && now.Before(d.PrevSigningKeyUntil) {
		add(d.PrevSigningKey, d.PrevSigningKeyUntil)
	}
	return out
}

// PublicKey is a public key receivers verify "v1a" with.
type PublicKey struct {
	// Key is "whpk_" and the base64 of the key.
	Key string
	// ID is its JWK thumbprint (RFC 7638), the kid of relay's JWKS.
	ID string
	// Until is when it stops signing: zero for the current key.
	Until time.Time
}

// withSigningKey gives d, signing "v1a", a signing key if it has none.
// It reports whether it generated one.
func (d *Destination) withSigningKey() bool {
	if d.SignsEd25519() && d.SigningKey == "" {
		d.SigningKey = webhook.GenerateSigningKey()
		return true
	}
	return false
}
