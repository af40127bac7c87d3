// Package pubsub is relay's Google Cloud Pub/Sub destination kind: each
// event is published as one message to a topic, with the event's metadata
// in the message's attributes and, when ordering is on, its order key as
// the message's ordering key.
//
// It uses the v2 client (cloud.google.com/go/pubsub/v2) over gRPC; every
// connection goes through relay's Env.Dial.
package pubsub

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/relaydev/relay/kind"
)

// The configuration's fields.
const (
	FieldProject     = "project"
	FieldTopic       = "topic"
	FieldCredentials = "credentials_json"
	FieldEndpoint    = "endpoint"
	FieldOrdering    = "ordering"
)

// New returns the Pub/Sub kind.
func New() kind.Kind { return pubsubKind{} }

type pubsubKind struct{}

func (pubsubKind) Name() string  { return "pubsub" }
func (pubsubKind) Title() string { return "Google Cloud Pub/Sub" }
func (pubsubKind) Description() string {
	return "Publishes each event as a message to a Google Cloud Pub/Sub topic, with its metadata in the message's attributes."
}

func (pubsubKind) Fields() []kind.Field {
	return []kind.Field{
		{
			Name:     FieldProject,
			Label:    "Project ID",
			Help:     "the Google Cloud project id that owns the topic, e.g. my-project",
			Type:     kind.String,
			Required: true,
		},
		{
			Name:     FieldTopic,
			Label:    "Topic ID",
			Help:     "the Pub/Sub topic's id within the project, e.g. orders (not its full projects/.../topics/... name)",
			Type:     kind.String,
			Required: true,
		},
		{
			Name:  FieldCredentials,
			Label: "Service account key (JSON)",
			Help: "the JSON key file of a service account allowed to publish to the topic (roles/pubsub.publisher); " +
				"when empty, the relay host's Application Default Credentials are used, or none with endpoint set",
			Type:      kind.Text,
			Sensitive: true,
		},
		{
			Name:  FieldEndpoint,
			Label: "Endpoint",
			Help: "host:port of the Pub/Sub API instead of pubsub.googleapis.com:443, e.g. a regional endpoint " +
				"or an emulator at localhost:8085; without credentials_json it is reached in plaintext without " +
				"authentication, as the emulator expects",
			Type: kind.String,
		},
		{
			Name:  FieldOrdering,
			Label: "Ordering",
			Help: "publish each event's order key as the message's ordering key, so that subscriptions with " +
				"message ordering receive one key's events in the order relay delivers them",
			Type:    kind.Bool,
			Default: "true",
		},
	}
}

// Google Cloud's naming rules: a project id is 6 to 30 lowercase letters,
// digits and hyphens, starting with a letter and not ending with a hyphen
// (older projects may have a domain prefix, example.com:my-project); a
// topic id is 3 to 255 letters, digits and - _ . ~ + %, starting with a
// letter and not with "goog".
var (
	projectRE = regexp.MustCompile(`^([a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
	topicRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._~+%-]{2,254}$`)
)

func (k pubsubKind) Validate(c kind.Config) error {
	project := c[FieldProject]
	if !projectRE.MatchString(project) {
		return kind.Errorf(FieldProject, "%q is not a Google Cloud project id (6 to 30 lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen)", project)
	}
	topic := c[FieldTopic]
	if strings.HasPrefix(topic, "projects/") {
		return kind.Errorf(FieldTopic, "%q is a full topic name: give only the topic id (what follows topics/) and the project in %s", topic, FieldProject)
	}
	if !topicRE.MatchString(topic) {
		return kind.Errorf(FieldTopic, "%q is not a Pub/Sub topic id (3 to 255 letters, digits and - _ . ~ + %%, starting with a letter)", topic)
	}
	if strings.HasPrefix(strings.ToLower(topic), "goog") {
		return kind.Errorf(FieldTopic, "%q starts with \"goog\", which Pub/Sub reserves", topic)
	}
	if v := c[FieldEndpoint]; v != "" {
		if err := checkEndpoint(v); err != nil {
			return err
		}
	}
	if v := c[FieldCredentials]; v != "" {
		if err := checkServiceAccount([]byte(v)); err != nil {
			return err
		}
	}
	return nil
}

func checkEndpoint(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" || strings.ContainsAny(host, "/ ") {
		return kind.Errorf(FieldEndpoint, "%q is not a host:port such as localhost:8085 or us-east1-pubsub.googleapis.com:443", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return kind.Errorf(FieldEndpoint, "%q has no port between 1 and 65535", v)
	}
	return nil
}

// serviceAccount is the part of a service account key file relay reads.
type serviceAccount struct {
	Type        string `json:"type"`
	ClientEmail string `json:"client_email"`
	PrivateKey  string `json:"private_key"`
}

// checkServiceAccount accepts only a service account key: other credential
// files (external accounts, impersonation) name URLs and files that the
// client library would fetch or read, which a destination's configuration
// must not be able to choose. Its errors never quote the key.
func checkServiceAccount(b []byte) error {
	var sa serviceAccount
	if err := json.Unmarshal(b, &sa); err != nil {
		return kind.Errorf(FieldCredentials, "is not JSON: a service account key file, as the Cloud console downloads it, is expected")
	}
	if sa.Type != "service_account" {
		return kind.Errorf(FieldCredentials, "has type %q: only a service account key (type service_account) is accepted", sa.Type)
	}
	if sa.ClientEmail == "" {
		return kind.Errorf(FieldCredentials, "has no client_email")
	}
	block, _ := pem.Decode([]byte(sa.PrivateKey))
	if block == nil {
		return kind.Errorf(FieldCredentials, "has no PEM private_key")
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
			return kind.Errorf(FieldCredentials, "has a private_key that is not an RSA private key")
		}
	}
	return nil
}

// Ordered reports whether ordering is on: Pub/Sub then keeps the order of
// the messages published with one ordering key, and relay publishes one
// key's events one at a time.
// AmbientCredentials reports whether c publishes with Application Default
// Credentials (no credentials_json, and no endpoint: an emulator needs
// none), relay's own identity on the host (kind.Ambient).
func (k pubsubKind) AmbientCredentials(c kind.Config) (bool, string) {
	return c[FieldCredentials] == "" && c[FieldEndpoint] == "", FieldCredentials
}

func (k pubsubKind) Ordered(c kind.Config) bool {
	on, _ := strconv.ParseBool(kind.Get(k, c, FieldOrdering))
	return on
}

func (k pubsubKind) Open(c kind.Config, env kind.Env) (kind.Publisher, error) {
	return open(settings{
		project:     c[FieldProject],
		topic:       c[FieldTopic],
		credentials: []byte(c[FieldCredentials]),
		endpoint:    c[FieldEndpoint],
		ordering:    k.Ordered(c),
	}, env), nil
}
