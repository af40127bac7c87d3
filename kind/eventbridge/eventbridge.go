// Package eventbridge is relay's Amazon EventBridge destination kind: each
// event becomes one PutEvents entry on an event bus, its detail a JSON
// envelope of the event's metadata and body.
//
// The publisher signs requests with static keys (access_key_id and
// secret_access_key, optionally a session_token): relay does not lend its
// own AWS identity (environment, shared files, instance role) to the
// destinations its users configure. Every request goes through relay's
// HTTP client (kind.Env.HTTPClient), so the address guard and the egress
// proxy apply.
package eventbridge

import (
	"regexp"
	"strings"
	"unicode"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/internal/awsapi"
)

// The names of the configuration fields.
const (
	FieldEventBus        = "event_bus"
	FieldRegion          = awsapi.FieldRegion
	FieldAccessKeyID     = awsapi.FieldAccessKeyID
	FieldSecretAccessKey = awsapi.FieldSecretAccessKey
	FieldSessionToken    = awsapi.FieldSessionToken
	FieldEndpoint        = awsapi.FieldEndpoint
	FieldSource          = "source"
	FieldDetailType      = "detail_type"
)

// UntypedDetailType is the detail-type of an event without a type when
// the destination sets no detail_type.
const UntypedDetailType = "event"

// Limits EventBridge puts on an entry's fields.
const (
	maxSource     = 256
	maxDetailType = 128
	maxBusName    = 256
)

var (
	// busNameRE is an event bus's name (partner buses have slashes).
	busNameRE = regexp.MustCompile(`^[/.\-_A-Za-z0-9]{1,256}$`)
	// busARNRE is an event bus's ARN; its 1st group is the region.
	busARNRE = regexp.MustCompile(`^arn:aws[a-z-]*:events:([a-z0-9-]+):[0-9]{12}:event-bus/[/.\-_A-Za-z0-9]{1,256}$`)
)

// New returns the eventbridge kind.
func New() kind.Kind { return ebKind{} }

type ebKind struct{}

// Name is "eventbridge".
func (ebKind) Name() string { return "eventbridge" }

// Title is the kind's name for people.
func (ebKind) Title() string { return "Amazon EventBridge" }

// Description says what a destination of the kind does.
func (ebKind) Description() string {
	return "Puts each event on an Amazon EventBridge event bus, as an entry whose detail holds the event's metadata and body."
}

// Fields describe the configuration.
func (ebKind) Fields() []kind.Field {
	fields := []kind.Field{
		{Name: FieldEventBus, Label: "Event bus", Type: kind.String, Default: "default",
			Help: "the event bus's name or ARN (arn:aws:events:<region>:<account>:event-bus/<name>)"},
	}
	fields = append(fields, awsapi.Fields(awsapi.FieldHelp{
		Region:      "the event bus's AWS region, such as eu-west-1; optional when event_bus is an ARN",
		AccessKeyID: "the access key ID of an IAM identity allowed events:PutEvents on the event bus",
		Endpoint:    "an http(s) base URL to send to instead of AWS's regional endpoint (LocalStack, a test server); empty for AWS",
	})...)
	return append(fields, []kind.Field{
		{Name: FieldSource, Label: "Source", Type: kind.String, Default: "relay",
			Help: "the entries' source, which rules match on (up to 256 characters, not starting with aws.)"},
		{Name: FieldDetailType, Label: "Detail type", Type: kind.String,
			Help: "the entries' detail-type; empty for each event's type (\"" + UntypedDetailType + "\" for an event without one)"},
	}...)
}

// Validate checks the fields' meaning together; it connects to nothing.
func (k ebKind) Validate(c kind.Config) error {
	bus := kind.Get(k, c, FieldEventBus)
	var busRegion string
	if strings.HasPrefix(bus, "arn:") {
		m := busARNRE.FindStringSubmatch(bus)
		if m == nil {
			return kind.Errorf(FieldEventBus, "%q is not an event bus ARN such as arn:aws:events:us-east-1:123456789012:event-bus/orders", bus)
		}
		busRegion = m[1]
	} else if !busNameRE.MatchString(bus) {
		return kind.Errorf(FieldEventBus, "%q is not an event bus name: 1-%d characters A-Z, a-z, 0-9, '.', '-', '_' or '/'", bus, maxBusName)
	}
	r := c[FieldRegion]
	if err := awsapi.CheckRegion(r); err != nil {
		return err
	}
	switch {
	case r != "" && busRegion != "" && r != busRegion:
		return kind.Errorf(FieldRegion, "%s differs from the event bus ARN's region %s: leave region empty or make them agree", r, busRegion)
	case r == "" && busRegion == "":
		return kind.Errorf(FieldRegion, "required unless event_bus is an ARN: the event bus's region, such as us-east-1")
	}
	if err := awsapi.CheckEndpoint(c[FieldEndpoint]); err != nil {
		return err
	}
	source := kind.Get(k, c, FieldSource)
	switch {
	case len(source) > maxSource || strings.ContainsFunc(source, notPrintable):
		return kind.Errorf(FieldSource, "must be 1-%d printable characters", maxSource)
	case strings.HasPrefix(strings.ToLower(source), "aws."):
		return kind.Errorf(FieldSource, "sources starting with aws. are AWS's own: choose another, such as com.example.orders")
	}
	if dt := c[FieldDetailType]; len(dt) > maxDetailType || strings.ContainsFunc(dt, notPrintable) {
		return kind.Errorf(FieldDetailType, "must be at most %d printable characters", maxDetailType)
	}
	return awsapi.CheckCredentials(c)
}

// Ordered is false: EventBridge delivers to its targets in no set order.
func (ebKind) Ordered(kind.Config) bool { return false }

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

// busRegion is the region of an event bus ARN, "" for a name.
func busRegion(bus string) string {
	if m := busARNRE.FindStringSubmatch(bus); m != nil {
		return m[1]
	}
	return ""
}
