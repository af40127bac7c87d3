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

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/internal/awsapi"
)

// The names of the configuration fields.
const (
	FieldQueueURL        = "queue_url"
	FieldRegion          = awsapi.FieldRegion
	FieldAccessKeyID     = awsapi.FieldAccessKeyID
	FieldSecretAccessKey = awsapi.FieldSecretAccessKey
	FieldSessionToken    = awsapi.FieldSessionToken
	FieldEndpoint        = awsapi.FieldEndpoint
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

// queueNameRE is a queue's name without ".fifo": SQS allows 80 characters
// in all, the suffix included.
var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

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
	return append([]kind.Field{
		{Name: FieldQueueURL, Label: "Queue URL", Type: kind.String, Required: true,
			Help: "the queue's URL, https://sqs.<region>.amazonaws.com/<account>/<name> (a name ending in .fifo is a FIFO queue)"},
	}, awsapi.Fields(awsapi.FieldHelp{
		Region:      "the queue's AWS region, such as eu-west-1; optional when the queue URL's host names it",
		AccessKeyID: "the access key ID of an IAM identity allowed sqs:SendMessage on the queue",
		Endpoint:    "an http(s) base URL to send to instead of AWS's regional endpoint (LocalStack, ElasticMQ, a test server); empty for AWS",
	})...)
}

// Validate checks the fields' meaning together; it connects to nothing.
func (k sqsKind) Validate(c kind.Config) error {
	endpoint := c[FieldEndpoint]
	if err := awsapi.CheckEndpoint(endpoint); err != nil {
		return err
	}
	u, err := parseQueueURL(c[FieldQueueURL], endpoint != "")
	if err != nil {
		return err
	}
	if err := awsapi.CheckRegion(c[FieldRegion]); err != nil {
		return err
	}
	if c[FieldRegion] == "" && regionFromHost(u.Hostname()) == "" {
		return kind.Errorf(FieldRegion, "required: the queue URL's host %q does not name a region (set one such as us-east-1)", u.Hostname())
	}
	return awsapi.CheckCredentials(c)
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
		if i+1 < len(labels) && l == "sqs" && awsapi.IsRegion(labels[i+1]) {
			return labels[i+1]
		}
		if i > 0 && l == "queue" && awsapi.IsRegion(labels[i-1]) {
			return labels[i-1]
		}
	}
	return ""
}
