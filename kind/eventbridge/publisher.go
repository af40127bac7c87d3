package eventbridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseb "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/internal/awsapi"
)

// Envelope is the detail of the entry relay puts for an event: a JSON
// object with the event's metadata and its body.
type Envelope struct {
	// ID is the event id (webhook-id): the receiver's idempotency key.
	ID string `json:"id"`
	// Type is the event's type, left out when it has none.
	Type string `json:"type,omitempty"`
	// Tenant is the destination's tenant, left out for none.
	Tenant string `json:"tenant,omitempty"`
	// Destination is the destination's name.
	Destination string `json:"destination"`
	// Timestamp and Signature are webhook-timestamp (Unix seconds) and
	// webhook-signature; Signature is left out when the destination signs
	// nothing.
	Timestamp int64  `json:"timestamp"`
	Signature string `json:"signature,omitempty"`
	// ContentType is the body's media type.
	ContentType string `json:"content_type,omitempty"`
	// Data is the body: itself (compacted) when it is JSON, else a JSON
	// string of it when it is UTF-8 text. DataBase64 is the body in
	// standard base64 when it is neither (then Data is left out).
	Data       json.RawMessage `json:"data,omitempty"`
	DataBase64 string          `json:"data_base64,omitempty"`
}

// EntryError is EventBridge's refusal of the entry in a PutEvents answer
// (FailedEntryCount 1): its ErrorCode and ErrorMessage.
type EntryError struct {
	Code    string
	Message string
}

// Error says that EventBridge refused the event, with its code and message.
func (e *EntryError) Error() string {
	return "EventBridge refused the event: " + e.Code + ": " + e.Message
}

// retryEntryCodes are the entry error codes that may pass; EventBridge
// documents every other one as not retryable.
var retryEntryCodes = map[string]bool{
	"ThrottlingException": true, "InternalFailure": true, "InternalException": true,
}

// Open returns a publisher for c. It connects to nothing: the first
// Publish does.
func (k ebKind) Open(c kind.Config, env kind.Env) (kind.Publisher, error) {
	bus := kind.Get(k, c, FieldEventBus)
	region := c[FieldRegion]
	if region == "" {
		region = busRegion(bus)
	}
	conn, cfg := awsapi.Open(c, region, env, codes)
	return &publisher{Publisher: conn, client: awseb.NewFromConfig(cfg),
		bus: bus, source: kind.Get(k, c, FieldSource), detailType: c[FieldDetailType]}, nil
}

// publisher puts each event with one PutEvents call of one entry.
type publisher struct {
	*awsapi.Publisher // Close, and the calls' context
	client            *awseb.Client
	bus               string
	source            string
	detailType        string // "" for the event's type
}

// Publish puts m and returns once EventBridge answered with an event id.
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	if p.Closed() {
		return kind.Retry("", kind.ErrClosed)
	}
	detailType := p.detailType
	if detailType == "" {
		detailType = m.Type
		if detailType == "" {
			detailType = UntypedDetailType
		}
		if utf8.RuneCountInString(detailType) > maxDetailType {
			return kind.Permanent("InvalidArgument", fmt.Errorf(
				"the event type is longer than EventBridge's %d characters of detail-type: set the destination's detail_type", maxDetailType))
		}
	}
	detail, err := envelope(m)
	if err != nil {
		return kind.Permanent("MalformedDetail", err)
	}
	entry := types.PutEventsRequestEntry{
		EventBusName: aws.String(p.bus),
		Source:       aws.String(p.source),
		DetailType:   aws.String(detailType),
		Detail:       aws.String(detail),
		Time:         aws.Time(time.Unix(m.Timestamp, 0)),
	}
	out, ans, ok := awsapi.Call(ctx, p.Publisher, p.client.PutEvents, &awseb.PutEventsInput{Entries: []types.PutEventsRequestEntry{entry}})
	if !ok {
		return ans
	}
	if len(out.Entries) != 1 {
		return kind.Retry("", fmt.Errorf("EventBridge answered %d entries for 1 (%d failed)", len(out.Entries), out.FailedEntryCount))
	}
	e := out.Entries[0]
	if code := aws.ToString(e.ErrorCode); code != "" || out.FailedEntryCount > 0 {
		err := &EntryError{Code: code, Message: aws.ToString(e.ErrorMessage)}
		if retryEntryCodes[code] || code == "" {
			return kind.Retry(code, err)
		}
		return kind.Permanent(code, err)
	}
	return kind.Delivered("event id " + aws.ToString(e.EventId))
}

// envelope is m's entry detail, an Envelope in JSON.
func envelope(m kind.Message) (string, error) {
	env := Envelope{ID: m.ID, Type: m.Type, Tenant: m.Tenant, Destination: m.Dest,
		Timestamp: m.Timestamp, Signature: m.Signature, ContentType: m.ContentType}
	switch {
	case json.Valid(m.Body):
		env.Data = m.Body
	case utf8.Valid(m.Body):
		s, err := json.Marshal(string(m.Body))
		if err != nil {
			return "", err
		}
		env.Data = s
	default:
		env.DataBase64 = base64.StdEncoding.EncodeToString(m.Body)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		return "", fmt.Errorf("the event cannot be put in an EventBridge detail: %w", err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// codes class EventBridge's own error codes for failed calls, besides
// those every AWS service answers, which awsapi.Codes.Classify knows. Retry are the failures that
// may pass: a limit exceeded, EventBridge failing or unavailable.
//
// Permanent are the failures the same event and configuration cannot get
// past: the identity is not authorized, the bus is missing, the request
// is invalid, or the operation is disabled.
var codes = awsapi.Codes{Retry: map[string]bool{
	"LimitExceededException": true, "InternalException": true, "ServiceUnavailableException": true,
}, Permanent: map[string]bool{
	"MissingAuthenticationTokenException": true, "NotAuthorized": true,
	"ResourceNotFoundException": true, "SerializationException": true, "OperationDisabledException": true,
}}
