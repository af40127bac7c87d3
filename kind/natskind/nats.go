// Package natskind is relay's NATS destination kind: each event becomes one
// message published to a subject, by default into a JetStream stream that
// acknowledges it.
//
// With jetstream=true (the default) a message is delivered when the stream
// that captures the subject has stored it and answered with its sequence.
// The message carries the event id as Nats-Msg-Id, so the stream drops a
// re-publish of the same event within its duplicate window: a retry after a
// lost ack is confirmed with the first copy's sequence instead of being
// stored twice. With jetstream=false the message is a core NATS publish,
// confirmed only as far as the server receiving it (a PING/PONG after it):
// subscribers that are slow, absent or disconnected never see it, and relay
// cannot tell. That is at-most-once at the far end.
//
// The message's data is the event's body unchanged; its headers carry the
// Standard Webhooks metadata (webhook-id, webhook-timestamp,
// webhook-signature), relay's own (relay-event-type, relay-tenant,
// relay-destination), the body's content-type and Nats-Msg-Id.
//
// The client is github.com/nats-io/nats.go and its jetstream package. Every
// connection it opens goes through the Env's Dial (TLS runs over it), and
// it reconnects by itself, forever, when the server comes back.
package natskind

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
	"github.com/relaydev/relay/kind"
)

// Field names.
const (
	FieldURL            = "url"
	FieldSubject        = "subject"
	FieldJetStream      = "jetstream"
	FieldExpectedStream = "expected_stream"
	FieldCredentials    = "credentials"
	FieldNKeySeed       = "nkey_seed"
	FieldToken          = "token"
	FieldUsername       = "username"
	FieldPassword       = "password"
	FieldTLSCA          = "tls_ca"
	FieldTLSCert        = "tls_cert"
	FieldTLSKey         = "tls_key"
)

// DefaultPort is the port of a URL that names none.
const DefaultPort = "4222"

// maxStreamNameLen bounds expected_stream: the server keeps each stream in
// a directory named after it.
const maxStreamNameLen = 255

var fields = []kind.Field{
	{
		Name:     FieldURL,
		Label:    "Server URL",
		Help:     "nats://host:4222 or tls://host:4222; several, comma-separated, for a cluster (the others are discovered from them). No credentials in it: use the credential fields",
		Type:     kind.String,
		Required: true,
	},
	{
		Name:     FieldSubject,
		Label:    "Subject",
		Help:     "the subject messages are published to, such as orders.created: dot-separated tokens, no wildcards (* or >) or spaces; with JetStream a stream must capture it",
		Type:     kind.String,
		Required: true,
	},
	{
		Name:    FieldJetStream,
		Label:   "JetStream",
		Help:    "true: publish into the JetStream stream that captures the subject and wait for its ack (stored, deduplicated by event id); false: core NATS publish, confirmed only as received by the server (at most once for subscribers)",
		Type:    kind.Bool,
		Default: "true",
	},
	{
		Name:  FieldExpectedStream,
		Label: "Expected stream",
		Help:  "with JetStream, the name of the stream that must store the messages: one captured by another stream is refused",
		Type:  kind.String,
	},
	{
		Name:      FieldCredentials,
		Label:     "Credentials file",
		Help:      "the content of a .creds file (user JWT and nkey seed), for decentralized (JWT) authentication",
		Type:      kind.Text,
		Sensitive: true,
	},
	{
		Name:      FieldNKeySeed,
		Label:     "NKey seed",
		Help:      "a user nkey seed (SU...), for nkey authentication",
		Type:      kind.String,
		Sensitive: true,
	},
	{
		Name:      FieldToken,
		Label:     "Token",
		Help:      "an authentication token",
		Type:      kind.String,
		Sensitive: true,
	},
	{
		Name:  FieldUsername,
		Label: "Username",
		Help:  "a user name, with password",
		Type:  kind.String,
	},
	{
		Name:      FieldPassword,
		Label:     "Password",
		Help:      "the user's password, with username",
		Type:      kind.String,
		Sensitive: true,
	},
	{
		Name:  FieldTLSCA,
		Label: "TLS CA certificates",
		Help:  "PEM certificates of the CAs the server's certificate is checked against, instead of the system's",
		Type:  kind.Text,
	},
	{
		Name:  FieldTLSCert,
		Label: "TLS client certificate",
		Help:  "a PEM client certificate (chain) presented to a server that asks for one, with tls_key",
		Type:  kind.Text,
	},
	{
		Name:      FieldTLSKey,
		Label:     "TLS client key",
		Help:      "the PEM private key of tls_cert",
		Type:      kind.Text,
		Sensitive: true,
	},
}

// natsKind is the NATS kind.
type natsKind struct{}

// New returns the NATS kind.
func New() kind.Kind { return natsKind{} }

// Name implements [kind.Kind].
func (natsKind) Name() string { return "nats" }

// Title implements [kind.Kind].
func (natsKind) Title() string { return "NATS" }

// Description implements [kind.Kind].
func (natsKind) Description() string {
	return "Publishes each event as a message on a NATS subject, by default stored by a JetStream stream that acknowledges it."
}

// Fields implements [kind.Kind].
func (natsKind) Fields() []kind.Field { return fields }

// Ordered implements [kind.Kind]. A JetStream stream stores the messages of
// a subject in the order they are acknowledged, and relay publishes one
// key's events one at a time, each acked before the next. A core publish is
// confirmed only as received by the server: what subscribers get is not
// confirmed (a slow or disconnected subscriber misses messages), so no
// order is promised.
func (k natsKind) Ordered(c kind.Config) bool {
	js, _ := strconv.ParseBool(kind.Get(k, c, FieldJetStream))
	return js
}

// Validate implements [kind.Kind].
func (k natsKind) Validate(c kind.Config) error {
	if _, err := parseURLs(c[FieldURL]); err != nil {
		return err
	}
	if err := validSubject(c[FieldSubject]); err != nil {
		return err
	}
	js, _ := strconv.ParseBool(kind.Get(k, c, FieldJetStream))
	if s := c[FieldExpectedStream]; s != "" {
		if !js {
			return kind.Errorf(FieldExpectedStream, "needs jetstream=true (a core publish reaches no stream it could check)")
		}
		if err := validStreamName(s); err != nil {
			return err
		}
	}
	if err := validAuth(c); err != nil {
		return err
	}
	_, err := tlsConfig(c)
	return err
}

// parseURLs splits the url field into the servers' URLs, checking each.
func parseURLs(v string) ([]string, error) {
	var out []string
	for raw := range strings.SplitSeq(v, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			return nil, kind.Errorf(FieldURL, "has an empty entry: expected comma-separated URLs such as nats://host:4222")
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, kind.Errorf(FieldURL, "%q is not a URL such as nats://host:4222 or tls://host:4222", raw)
		}
		if u.Scheme != "nats" && u.Scheme != "tls" {
			return nil, kind.Errorf(FieldURL, "%q: the scheme must be nats:// or tls://", raw)
		}
		if u.User != nil {
			return nil, kind.Errorf(FieldURL, "has credentials in it: put them in the username/password, token, nkey_seed or credentials fields, which are kept secret")
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, kind.Errorf(FieldURL, "%q: expected only a scheme, a host and a port, such as nats://host:4222", raw)
		}
		if u.Hostname() == "" {
			return nil, kind.Errorf(FieldURL, "%q has no host", raw)
		}
		port := u.Port()
		if port == "" {
			port = DefaultPort
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, kind.Errorf(FieldURL, "%q: the port must be a number from 1 to 65535", raw)
		}
		out = append(out, u.Scheme+"://"+net.JoinHostPort(u.Hostname(), port))
	}
	return out, nil
}

// validSubject checks that s is a literal subject a message can be
// published to.
func validSubject(s string) error {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return kind.Errorf(FieldSubject, "%q has an empty token: expected dot-separated tokens such as orders.created, without a leading, trailing or double dot", s)
		}
		for _, r := range tok {
			switch {
			case r == '*' || r == '>':
				return kind.Errorf(FieldSubject, "%q has a wildcard (%c): a message is published to a literal subject", s, r)
			case r <= ' ' || r == 0x7f:
				return kind.Errorf(FieldSubject, "%q has a space or a control character", s)
			}
		}
	}
	if strings.HasPrefix(s, "$JS.API.") || strings.HasPrefix(s, "$SYS.") || strings.HasPrefix(s, "_INBOX.") {
		return kind.Errorf(FieldSubject, "%q is a subject the system uses (its JetStream API, system account or replies)", s)
	}
	return nil
}

// validStreamName checks a JetStream stream's name.
func validStreamName(s string) error {
	if len(s) > maxStreamNameLen {
		return kind.Errorf(FieldExpectedStream, "is longer than %d characters", maxStreamNameLen)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return r <= ' ' || r == 0x7f || strings.ContainsRune(".*>/\\", r)
	}); i >= 0 {
		return kind.Errorf(FieldExpectedStream, "%q is not a stream name: no spaces, dots, wildcards (* or >) or slashes", s)
	}
	return nil
}

// validAuth checks the credential fields: one way to authenticate at most,
// each well formed. Errors never quote a secret.
func validAuth(c kind.Config) error {
	var set []string
	for _, f := range []string{FieldCredentials, FieldNKeySeed, FieldToken, FieldUsername} {
		if c[f] != "" {
			set = append(set, f)
		}
	}
	if len(set) > 1 {
		return kind.Errorf(set[1], "cannot be used with %s: choose one way to authenticate", set[0])
	}
	if c[FieldPassword] != "" && c[FieldUsername] == "" {
		return kind.Errorf(FieldUsername, "required with password")
	}
	if c[FieldUsername] != "" && c[FieldPassword] == "" {
		return kind.Errorf(FieldPassword, "required with username")
	}
	if v := c[FieldCredentials]; v != "" {
		if _, _, err := parseCreds(v); err != nil {
			return kind.Errorf(FieldCredentials, "%s", err)
		}
	}
	if v := c[FieldNKeySeed]; v != "" {
		if _, err := userNKey(v); err != nil {
			return kind.Errorf(FieldNKeySeed, "%s", err)
		}
	}
	return nil
}

// parseCreds returns the user JWT and seed of a .creds file's content.
func parseCreds(v string) (jwt, seed string, _ error) {
	const expected = "is not a NATS .creds file (expected a -----BEGIN NATS USER JWT----- block and a -----BEGIN USER NKEY SEED----- block)"
	jwt, err := nkeys.ParseDecoratedJWT([]byte(v))
	if err != nil || jwt == "" || strings.ContainsAny(jwt, " \t\r\n") {
		return "", "", fmt.Errorf("%s", expected)
	}
	kp, err := nkeys.ParseDecoratedUserNKey([]byte(v))
	if err != nil {
		return "", "", fmt.Errorf("%s", expected)
	}
	defer kp.Wipe()
	s, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("%s", expected)
	}
	return jwt, string(s), nil
}

// userNKey checks a user nkey seed and returns its public key.
func userNKey(seed string) (string, error) {
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(seed)))
	if err != nil {
		return "", fmt.Errorf("is not an nkey seed")
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("is not a user nkey seed (one starting with SU)")
	}
	return pub, nil
}

// tlsConfig is the TLS configuration of c's tls fields, nil when none is
// set (the client then uses the system's CAs for a server that wants TLS).
func tlsConfig(c kind.Config) (*tls.Config, error) {
	ca, cert, key := c[FieldTLSCA], c[FieldTLSCert], c[FieldTLSKey]
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return nil, kind.Errorf(FieldTLSCA, "has no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)")
		}
		cfg.RootCAs = pool
	}
	switch {
	case cert != "" && key == "":
		return nil, kind.Errorf(FieldTLSKey, "required with tls_cert")
	case cert == "" && key != "":
		return nil, kind.Errorf(FieldTLSCert, "required with tls_key")
	case cert != "":
		pair, err := tls.X509KeyPair([]byte(cert), []byte(key))
		if err != nil {
			// The error may quote neither, but says which is wrong.
			return nil, kind.Errorf(FieldTLSCert, "with tls_key is not a PEM certificate and its private key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
