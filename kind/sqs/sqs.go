// Package sqs is relay's Amazon SQS destination kind: each event becomes one
// SendMessage to a standard or FIFO queue, its metadata in message
// attributes.
//
// The publisher signs requests with static keys (access_key_id and
// secret_access_key, optionally a session_token): relay does not lend its
// own AWS identity (environment, shared files, instance role) to the
// destinations its users configure. Every request goes through relay's
// HTTP client (kind.Env.HTTPClient), so the address guard and the egress
// proxy apply.
package sqs

import (
	"net/url"
	"regexp"
	"strings"
	"unicode"

	"github.com/relaydev/relay/kind"
)

// The names of the configuration fields.
const (
	FieldQueueURL        = "queue_url"
	FieldRegion          = "region"
	FieldAccessKeyID     = "access_key_id"
	FieldSecretAccessKey = "secret_access_key"
	FieldSessionToken    = "session_token"
	FieldEndpoint        = "endpoint"
)

// The names of the message attributes relay sets on every message (a
// String attribute each; those whose value is empty are left out).
const (
	AttrID          = "webhook-id"
	AttrTimestamp   = "webhook-timestamp"
	AttrSignature   = "webhook-signature"
	AttrEventType   = "relay-event-type"
	AttrTenant      = "relay-tenant"
	AttrDestination = "relay-destination"
	AttrContentType = "content-type"
)

// fifoSuffix ends the name (and so the URL) of every FIFO queue.
const fifoSuffix = ".fifo"

var (
	// queueNameRE is a queue's name without ".fifo": SQS allows 80
	// characters in all, the suffix included.
	queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	// regionRE is an AWS region's shape (us-east-1, us-gov-west-1,
	// cn-north-1, eu-central-2...).
	regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
)

// New returns the sqs kind.
func New() kind.Kind { return sqsKind{} }

type sqsKind struct{}

// Name is "sqs".
func (sqsKind) Name() string { return "sqs" }

// Title is the kind's name for people.
func (sqsKind) Title() string { return "Amazon SQS" }

// Description says what a destination of the kind does.
func (sqsKind) Description() string {
	return "Sends each event as a message to an Amazon SQS queue (standard or FIFO), its metadata in message attributes."
}

// Fields describe the configuration.
func (sqsKind) Fields() []kind.Field {
	return []kind.Field{
		{Name: FieldQueueURL, Label: "Queue URL", Type: kind.String, Required: true,
			Help: "the queue's URL, https://sqs.<region>.amazonaws.com/<account>/<name> (a name ending in .fifo is a FIFO queue)"},
		{Name: FieldRegion, Label: "Region", Type: kind.String,
			Help: "the queue's AWS region, such as eu-west-1; optional when the queue URL's host names it"},
		{Name: FieldAccessKeyID, Label: "Access key ID", Type: kind.String, Required: true,
			Help: "the access key ID of an IAM identity allowed sqs:SendMessage on the queue"},
		{Name: FieldSecretAccessKey, Label: "Secret access key", Type: kind.String, Required: true, Sensitive: true,
			Help: "the secret access key of that access key ID"},
		{Name: FieldSessionToken, Label: "Session token", Type: kind.String, Sensitive: true,
			Help: "the session token, for temporary credentials only"},
		{Name: FieldEndpoint, Label: "Endpoint", Type: kind.String,
			Help: "an http(s) base URL to send to instead of AWS's regional endpoint (LocalStack, ElasticMQ, a test server); empty for AWS"},
	}
}

// Validate checks the fields' meaning together; it connects to nothing.
func (k sqsKind) Validate(c kind.Config) error {
	endpoint := c[FieldEndpoint]
	if endpoint != "" {
		if err := checkEndpoint(endpoint); err != nil {
			return err
		}
	}
	u, err := parseQueueURL(c[FieldQueueURL], endpoint != "")
	if err != nil {
		return err
	}
	if r := c[FieldRegion]; r != "" {
		if !regionRE.MatchString(r) {
			return kind.Errorf(FieldRegion, "%q is not an AWS region such as us-east-1", r)
		}
	} else if regionFromHost(u.Hostname()) == "" {
		return kind.Errorf(FieldRegion, "required: the queue URL's host %q does not name a region (set one such as us-east-1)", u.Hostname())
	}
	for _, f := range []string{FieldAccessKeyID, FieldSecretAccessKey, FieldSessionToken} {
		if strings.ContainsFunc(c[f], unicode.IsSpace) {
			return kind.Errorf(f, "has a space in it: paste the value alone")
		}
	}
	return nil
}

// Ordered is true for a FIFO queue: the events of one key share a message
// group, which SQS keeps in order. A standard queue keeps no order.
func (sqsKind) Ordered(c kind.Config) bool { return isFIFO(c[FieldQueueURL]) }

func isFIFO(queueURL string) bool {
	return strings.HasSuffix(strings.TrimRight(queueURL, "/"), fifoSuffix)
}

// parseQueueURL checks a queue URL: https (or http with a custom
// endpoint), a host, and a path of an account and a legal queue name.
func parseQueueURL(raw string, customEndpoint bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, kind.Errorf(FieldQueueURL, "%q is not a queue URL such as https://sqs.us-east-1.amazonaws.com/123456789012/orders", raw)
	}
	if u.Scheme == "http" && !customEndpoint {
		return nil, kind.Errorf(FieldQueueURL, "must be an https URL (http only with a custom endpoint)")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, kind.Errorf(FieldQueueURL, "must have no user, query or fragment: https://sqs.<region>.amazonaws.com/<account>/<name>")
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 2 || parts[0] == "" {
		return nil, kind.Errorf(FieldQueueURL, "the path %q is not /<account>/<queue name>", u.Path)
	}
	name := parts[1]
	base := strings.TrimSuffix(name, fifoSuffix)
	if !queueNameRE.MatchString(base) || len(name) > 80 {
		return nil, kind.Errorf(FieldQueueURL, "%q is not a queue name: 1-80 characters A-Z, a-z, 0-9, '-' or '_' (a FIFO queue's ending in .fifo)", name)
	}
	return u, nil
}

// regionFromHost reads the region in an SQS host name: sqs.<region>.
// amazonaws.com (and its .cn, dual-stack api.aws, VPC endpoint and
// LocalStack forms), <region>.queue.amazonaws.com, or queue.amazonaws.com
// (us-east-1). It returns "" when the host names none.
func regionFromHost(host string) string {
	host = strings.ToLower(host)
	if host == "queue.amazonaws.com" {
		return "us-east-1"
	}
	labels := strings.Split(host, ".")
	for i, l := range labels {
		if i+1 < len(labels) && l == "sqs" && regionRE.MatchString(labels[i+1]) {
			return labels[i+1]
		}
		if i > 0 && l == "queue" && regionRE.MatchString(labels[i-1]) {
			return labels[i-1]
		}
	}
	return ""
}

// checkEndpoint checks a custom endpoint: an http(s) base URL.
func checkEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return kind.Errorf(FieldEndpoint, "%q is not an http(s) URL such as http://localhost:4566", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return kind.Errorf(FieldEndpoint, "must have no user, query or fragment")
	}
	return nil
}
