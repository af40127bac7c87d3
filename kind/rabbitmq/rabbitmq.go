// Package rabbitmq is relay's RabbitMQ destination kind: it publishes each
// event to an exchange of a RabbitMQ broker over AMQP 0-9-1, with publisher
// confirms, and answers once the broker has confirmed (or refused) the
// message.
//
// A message is published with the mandatory flag, so a message no queue is
// bound for comes back (basic.return, 312 NO_ROUTE) and is answered as a
// permanent failure instead of being dropped silently. The body is the
// event's body unchanged; the event's id, type, timestamp and content type
// go in the message's own properties, and every relay attribute in its
// headers.
package rabbitmq

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"strconv"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relaydev/relay/kind"
)

// The configuration's field names.
const (
	FieldURL        = "url"
	FieldUsername   = "username"
	FieldPassword   = "password"
	FieldVhost      = "vhost"
	FieldExchange   = "exchange"
	FieldRoutingKey = "routing_key"
	FieldPersistent = "persistent"
	FieldTLSCA      = "tls_ca"
)

// maxName is the longest exchange name, routing key or virtual host AMQP
// carries: a short string of at most 255 bytes.
const maxName = 255

var fields = []kind.Field{
	{
		Name:     FieldURL,
		Label:    "Broker URL",
		Help:     "amqp://host:port, or amqps://host:port for TLS (ports default to 5672 and 5671); no credentials or virtual host in it: they have fields of their own",
		Type:     kind.String,
		Required: true,
	},
	{
		Name:     FieldUsername,
		Label:    "Username",
		Help:     "the RabbitMQ user relay logs in as (PLAIN)",
		Type:     kind.String,
		Required: true,
	},
	{
		Name:      FieldPassword,
		Label:     "Password",
		Help:      "the user's password",
		Type:      kind.String,
		Required:  true,
		Sensitive: true,
	},
	{
		Name:    FieldVhost,
		Label:   "Virtual host",
		Help:    "the virtual host the exchange is in",
		Type:    kind.String,
		Default: "/",
	},
	{
		Name:  FieldExchange,
		Label: "Exchange",
		Help:  "the exchange to publish to; empty for RabbitMQ's default exchange, which routes to the queue named by the routing key (routing_key is then required)",
		Type:  kind.String,
	},
	{
		Name:  FieldRoutingKey,
		Label: "Routing key",
		Help:  "the routing key of every message; empty to route by the event's type (order.created)",
		Type:  kind.String,
	},
	{
		Name:    FieldPersistent,
		Label:   "Persistent",
		Help:    "publish persistent messages (delivery mode 2), which a durable queue keeps across broker restarts",
		Type:    kind.Bool,
		Default: "true",
	},
	{
		Name:  FieldTLSCA,
		Label: "TLS CA certificate",
		Help:  "PEM certificate(s) of the authority that signed the broker's certificate (amqps only); empty to use the system's roots",
		Type:  kind.Text,
	},
}

type rabbitKind struct{}

// New returns the RabbitMQ kind.
func New() kind.Kind { return rabbitKind{} }

// Name is "rabbitmq".
func (rabbitKind) Name() string { return "rabbitmq" }

// Title is "RabbitMQ".
func (rabbitKind) Title() string { return "RabbitMQ" }

// Description says what a RabbitMQ destination does.
func (rabbitKind) Description() string {
	return "Publishes each event to a RabbitMQ exchange (AMQP 0-9-1) and waits for the broker's publisher confirm."
}

// Fields describe the configuration.
func (rabbitKind) Fields() []kind.Field { return fields }

// Validate checks the URL, the names and the TLS authority. It connects to
// nothing.
func (k rabbitKind) Validate(c kind.Config) error {
	if _, err := brokerURL(c[FieldURL]); err != nil {
		return err
	}
	for _, name := range []string{FieldVhost, FieldExchange, FieldRoutingKey} {
		if err := checkName(name, kind.Get(k, c, name)); err != nil {
			return err
		}
	}
	if c[FieldExchange] == "" && c[FieldRoutingKey] == "" {
		return kind.Errorf(FieldRoutingKey, "required when exchange is empty: RabbitMQ's default exchange routes to the queue the routing key names, so set it to the queue's name")
	}
	if c[FieldTLSCA] != "" {
		u, _ := url.Parse(c[FieldURL])
		if u.Scheme != "amqps" {
			return kind.Errorf(FieldTLSCA, "needs an amqps:// url: a CA certificate only verifies a TLS connection")
		}
		if _, err := certPool(c[FieldTLSCA]); err != nil {
			return err
		}
	}
	return nil
}

// Ordered is true: relay sends one key's events one at a time, each
// confirmed before the next, and RabbitMQ keeps the order of the messages
// it confirmed in every queue they are routed to.
func (rabbitKind) Ordered(kind.Config) bool { return true }

// Open returns a publisher for c. It connects to nothing: the first Publish
// does, through env.Dial.
func (k rabbitKind) Open(c kind.Config, env kind.Env) (kind.Publisher, error) {
	addr, err := brokerURL(c[FieldURL])
	if err != nil {
		return nil, err
	}
	config := amqp.Config{
		Vhost:      kind.Get(k, c, FieldVhost),
		Properties: amqp.NewConnectionProperties(),
	}
	config.Properties.SetClientConnectionName("relay")
	if addr.Scheme == "amqps" {
		config.TLSClientConfig = &tls.Config{ServerName: addr.Hostname(), MinVersion: tls.VersionTLS12}
		if ca := c[FieldTLSCA]; ca != "" {
			if config.TLSClientConfig.RootCAs, err = certPool(ca); err != nil {
				return nil, err
			}
		}
	}
	persistent, _ := strconv.ParseBool(kind.Get(k, c, FieldPersistent))
	return newPublisher(publisherOptions{
		url:        addr.String(),
		config:     config,
		username:   c[FieldUsername],
		password:   c[FieldPassword],
		exchange:   c[FieldExchange],
		routingKey: c[FieldRoutingKey],
		persistent: persistent,
		dial:       env.Dial,
	}), nil
}

// brokerURL checks the url field and returns it normalised: the scheme,
// host and port, and nothing else.
func brokerURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, credentials included: say less.
		return nil, kind.Errorf(FieldURL, "is not a URL such as amqp://rabbitmq.example.com:5672")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return nil, kind.Errorf(FieldURL, "must start with amqp:// or amqps://")
	}
	if u.User != nil {
		return nil, kind.Errorf(FieldURL, "must not carry credentials: put them in username and password")
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, kind.Errorf(FieldURL, "has no host: write amqp://host:port")
	}
	if u.Path != "" && u.Path != "/" {
		return nil, kind.Errorf(FieldURL, "must not name a virtual host (%q): put it in vhost", u.Path)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, kind.Errorf(FieldURL, "must not have query parameters or a fragment: the connection's settings are fields of their own")
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, kind.Errorf(FieldURL, "port %q is not between 1 and 65535", port)
	}
	return &url.URL{Scheme: u.Scheme, Host: net.JoinHostPort(u.Hostname(), port), Path: "/"}, nil
}

// checkName checks an AMQP short string: at most 255 bytes of UTF-8
// without control characters.
func checkName(field, v string) error {
	if len(v) > maxName {
		return kind.Errorf(field, "is %d bytes long: AMQP allows at most %d", len(v), maxName)
	}
	if !utf8.ValidString(v) {
		return kind.Errorf(field, "is not valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return kind.Errorf(field, "has a control character")
		}
	}
	return nil
}

// certPool parses the tls_ca field's PEM certificates.
func certPool(text string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	rest := []byte(text)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, kind.Errorf(FieldTLSCA, "has a certificate that does not parse: %v", err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, kind.Errorf(FieldTLSCA, "has no PEM certificate (-----BEGIN CERTIFICATE-----)")
	}
	return pool, nil
}
