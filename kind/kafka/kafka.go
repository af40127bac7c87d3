// Package kafka is relay's Apache Kafka destination kind: each event becomes
// one record produced to a topic, confirmed by every in-sync replica
// (acks=all) through an idempotent producer.
//
// The record's value is the event's body unchanged; its headers carry the
// Standard Webhooks metadata (webhook-id, webhook-timestamp,
// webhook-signature), relay's own (relay-event-type, relay-tenant,
// relay-destination) and the body's content-type. The record's key is
// chosen by the key field: the event's order key by default, so that the
// events of one key land in one partition, in the order relay delivers them.
//
// The producer is github.com/twmb/franz-go's kgo client. Every connection it
// opens goes through the Env's Dial, TLS included.
package kafka

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"strconv"
	"strings"

	"github.com/relaydev/relay/kind"
)

// Field names.
const (
	FieldBrokers       = "brokers"
	FieldTopic         = "topic"
	FieldKey           = "key"
	FieldSASLMechanism = "sasl_mechanism"
	FieldSASLUsername  = "sasl_username"
	FieldSASLPassword  = "sasl_password"
	FieldTLS           = "tls"
	FieldTLSCA         = "tls_ca"
	FieldClientID      = "client_id"
)

// Values of the key field: what becomes the record's key, hence its
// partition.
const (
	// KeyOrderKey keys a record by the event's order key (none when the
	// event has none): one key's events share a partition and keep relay's
	// order.
	KeyOrderKey = "order_key"
	// KeyEventID keys a record by the event's id: events spread over the
	// partitions, with no order between them.
	KeyEventID = "event_id"
	// KeyTenant keys a record by the destination's tenant (none when it
	// has none): one tenant's events share a partition.
	KeyTenant = "tenant"
	// KeyNone sends records without a key: the producer spreads them.
	KeyNone = "none"
)

// Values of the sasl_mechanism field.
const (
	SASLNone        = ""
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// DefaultClientID is the client id the producer presents to the brokers
// when client_id is left out.
const DefaultClientID = "relay"

// maxTopicLen is Kafka's limit on a topic name's length.
const maxTopicLen = 249

// maxClientIDLen bounds client_id: Kafka itself takes any string, but the
// id shows in the brokers' logs, metrics and quotas.
const maxClientIDLen = 255

var fields = []kind.Field{
	{
		Name:     FieldBrokers,
		Label:    "Bootstrap brokers",
		Help:     "comma-separated host:port addresses of one or more brokers, e.g. kafka-1:9092,kafka-2:9092; the others are discovered from them",
		Type:     kind.String,
		Required: true,
	},
	{
		Name:     FieldTopic,
		Label:    "Topic",
		Help:     "the topic records are produced to; it must exist (relay does not create topics)",
		Type:     kind.String,
		Required: true,
	},
	{
		Name:    FieldKey,
		Label:   "Record key",
		Help:    "what becomes each record's key, hence its partition: order_key (the event's order key: one key's events keep their order), event_id, tenant, or none",
		Type:    kind.Enum,
		Values:  []string{KeyOrderKey, KeyEventID, KeyTenant, KeyNone},
		Default: KeyOrderKey,
	},
	{
		Name:   FieldSASLMechanism,
		Label:  "SASL mechanism",
		Help:   "how the producer authenticates: empty for none, plain, scram-sha-256 or scram-sha-512",
		Type:   kind.Enum,
		Values: []string{SASLNone, SASLPlain, SASLScramSHA256, SASLScramSHA512},
	},
	{
		Name:  FieldSASLUsername,
		Label: "SASL username",
		Help:  "the SASL user (with sasl_mechanism)",
		Type:  kind.String,
	},
	{
		Name:      FieldSASLPassword,
		Label:     "SASL password",
		Help:      "the SASL user's password (with sasl_mechanism)",
		Type:      kind.String,
		Sensitive: true,
	},
	{
		Name:    FieldTLS,
		Label:   "TLS",
		Help:    "connect to the brokers over TLS, verifying their certificates",
		Type:    kind.Bool,
		Default: "false",
	},
	{
		Name:  FieldTLSCA,
		Label: "TLS CA certificates",
		Help:  "PEM certificates of the authorities the brokers' certificates are checked against, instead of the system's (with tls=true)",
		Type:  kind.Text,
	},
	{
		Name:    FieldClientID,
		Label:   "Client id",
		Help:    "the client id the producer presents to the brokers (their logs, metrics and quotas name it)",
		Type:    kind.String,
		Default: DefaultClientID,
	},
}

// Kind is the Apache Kafka destination kind.
type Kind struct{}

// New returns the Apache Kafka kind.
func New() kind.Kind { return Kind{} }

// Name is "kafka".
func (Kind) Name() string { return "kafka" }

// Title is "Apache Kafka".
func (Kind) Title() string { return "Apache Kafka" }

// Description says what a Kafka destination does.
func (Kind) Description() string {
	return "Produces each event as a record to a Kafka topic, confirmed by all in-sync replicas."
}

// Fields describe a Kafka destination's configuration.
func (Kind) Fields() []kind.Field { return append([]kind.Field(nil), fields...) }

// Validate checks the brokers' addresses, the topic's name, that SASL has
// its credentials (and credentials a mechanism), and that tls_ca holds PEM
// certificates and comes with tls. It connects to nothing.
func (k Kind) Validate(c kind.Config) error {
	if _, err := parseBrokers(c[FieldBrokers]); err != nil {
		return err
	}
	if err := validTopic(c[FieldTopic]); err != nil {
		return err
	}
	mech := c[FieldSASLMechanism]
	switch {
	case mech != SASLNone && c[FieldSASLUsername] == "":
		return kind.Errorf(FieldSASLUsername, "required with sasl_mechanism %s", mech)
	case mech != SASLNone && c[FieldSASLPassword] == "":
		return kind.Errorf(FieldSASLPassword, "required with sasl_mechanism %s", mech)
	case mech == SASLNone && c[FieldSASLUsername] != "":
		return kind.Errorf(FieldSASLMechanism, "required with sasl_username: set plain, scram-sha-256 or scram-sha-512")
	case mech == SASLNone && c[FieldSASLPassword] != "":
		return kind.Errorf(FieldSASLMechanism, "required with sasl_password: set plain, scram-sha-256 or scram-sha-512")
	}
	if ca := c[FieldTLSCA]; ca != "" {
		if on, _ := strconv.ParseBool(kind.Get(k, c, FieldTLS)); !on {
			return kind.Errorf(FieldTLSCA, "is set but tls is not: set tls=true to use it")
		}
		if _, err := parseCA(ca); err != nil {
			return err
		}
	}
	if id := c[FieldClientID]; len(id) > maxClientIDLen {
		return kind.Errorf(FieldClientID, "is %d characters long; at most %d are allowed", len(id), maxClientIDLen)
	}
	return nil
}

// Ordered reports whether records are keyed by the event's order key: one
// key's events then share a partition, and acks=all with the idempotent
// producer keeps them in the order relay sends them.
func (k Kind) Ordered(c kind.Config) bool {
	return kind.Get(k, c, FieldKey) == KeyOrderKey
}

// parseBrokers splits the brokers field into host:port addresses.
func parseBrokers(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, kind.Errorf(FieldBrokers, "required: comma-separated host:port addresses such as kafka-1:9092,kafka-2:9092")
	}
	var addrs []string
	for a := range strings.SplitSeq(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, kind.Errorf(FieldBrokers, "has an empty address: expected comma-separated host:port addresses such as kafka-1:9092,kafka-2:9092")
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || strings.ContainsAny(host, "/ @") {
			return nil, kind.Errorf(FieldBrokers, "%q is not a host:port address such as kafka-1:9092", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, kind.Errorf(FieldBrokers, "%q has no valid port: expected a number from 1 to 65535", a)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// validTopic applies Kafka's rules to a topic name: 1 to 249 characters
// among ASCII letters, digits, '.', '_' and '-', not "." or "..", and not
// one of Kafka's internal topics (whose names begin with "__").
func validTopic(t string) error {
	switch {
	case t == "":
		return kind.Errorf(FieldTopic, "required (the topic records are produced to)")
	case t == "." || t == "..":
		return kind.Errorf(FieldTopic, `cannot be "." or ".."`)
	case len(t) > maxTopicLen:
		return kind.Errorf(FieldTopic, "is %d characters long; Kafka allows at most %d", len(t), maxTopicLen)
	case strings.HasPrefix(t, "__"):
		return kind.Errorf(FieldTopic, `%q begins with "__", which marks Kafka's internal topics`, t)
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return kind.Errorf(FieldTopic, "%q has %q: Kafka topic names take only ASCII letters, digits, '.', '_' and '-'", t, r)
		}
	}
	return nil
}

// parseCA reads tls_ca's PEM certificates into a pool.
func parseCA(v string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	rest := []byte(v)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, kind.Errorf(FieldTLSCA, "has a PEM block of type %s: expected only CERTIFICATE blocks", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, kind.Errorf(FieldTLSCA, "certificate %d does not parse: %v", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return nil, kind.Errorf(FieldTLSCA, "is not PEM: expected one or more -----BEGIN CERTIFICATE----- blocks")
	}
	return pool, nil
}
