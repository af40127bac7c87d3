// Package eventbridgetest is an in-process Amazon EventBridge for tests:
// an HTTP server on a free loopback port that speaks PutEvents in the AWS
// JSON 1.1 protocol the SDK sends, checks each request's SigV4 signature
// against its own credentials, keeps the events it accepted (across Stop
// and Restart), and can be told to fail a call or an entry.
//
// It knows the event buses default and relay-test (CreateBus adds more);
// an entry for any other fails with ResourceNotFoundException. (AWS itself
// has been seen to accept events for a bus that does not exist, and drop
// them.)
package eventbridgetest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/internal/awsapi/awstest"
)

// The credentials and region the server checks signatures with.
const (
	AccessKeyID     = "AKIARELAYTEST0000002"
	SecretAccessKey = "relay-test-secret-access-key"
	Region          = "us-east-1"
	// Account is the account in the event bus ARNs.
	Account = "000000000000"
	// Bus is the custom event bus the server starts with, besides default.
	Bus = "relay-test"
)

// Event is an entry an event bus accepted.
type Event struct {
	// ID is the event id the server answered.
	ID string
	// Bus is the event bus's name (an ARN given is read to its name).
	Bus        string
	Source     string
	DetailType string
	// Detail is the entry's detail, a JSON object.
	Detail    string
	Time      time.Time // zero when the entry had none
	Resources []string
}

// Failure is an error answer the server gives to a whole call instead of
// handling it, shaped as EventBridge's JSON protocol answers: the status
// and a JSON body with __type and message.
type Failure struct {
	Status  int
	Type    string
	Message string
}

// Failures EventBridge answers to a call.
var (
	// Throttled is the caller throttled: the SDK's error is a
	// *types.ThrottlingException.
	Throttled = Failure{Status: 400, Type: "ThrottlingException", Message: "Rate exceeded"}
	// Internal is EventBridge failing: a *types.InternalException.
	Internal = Failure{Status: 500, Type: "InternalException", Message: "An internal error occurred."}
	// AccessDenied is an identity not allowed events:PutEvents.
	AccessDenied = Failure{Status: 400, Type: "AccessDeniedException",
		Message: "User is not authorized to perform: events:PutEvents"}
)

// EntryFailure is an entry's failure in a 200 answer (FailedEntryCount).
type EntryFailure struct {
	Code    string
	Message string
}

// Entry failures EventBridge documents.
var (
	EntryThrottled     = EntryFailure{Code: "ThrottlingException", Message: "Rate exceeded"}
	EntryInternal      = EntryFailure{Code: "InternalFailure", Message: "The request processing has failed because of an unknown error."}
	EntryNotAuthorized = EntryFailure{Code: "NotAuthorizedForSourceException",
		Message: "Not authorized for the source."}
)

// Server is an in-process EventBridge.
type Server struct {
	t   testing.TB
	svc *awstest.Service
	ln  *awstest.Listener

	mu          sync.Mutex
	buses       map[string]bool
	events      []Event
	fail        awstest.Queue[Failure]
	failEntries awstest.Queue[EntryFailure]
}

// Start starts a server on a free loopback port, stopped when the test
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, svc: newService(), buses: map[string]bool{"default": true, Bus: true}}
	s.ln = awstest.Listen(t, http.HandlerFunc(s.handle))
	return s
}

// newService is EventBridge's JSON protocol, with the credentials and the
// error answers of EventBridge.
func newService() *awstest.Service {
	return &awstest.Service{
		ContentType: "application/x-amz-json-1.1",
		Target:      "AWSEvents.PutEvents",
		SigningName: "events", Region: Region, AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey,
		SerializationType: "SerializationException",
		UnknownOperation:  awstest.Error{Status: 400, Type: "UnknownOperationException"},
		Refused: map[awstest.Refusal]awstest.Error{
			awstest.MissingSignature: {Status: 403, Type: "MissingAuthenticationTokenException", Message: "Missing Authentication Token"},
			awstest.InvalidToken: {Status: 403, Type: "UnrecognizedClientException",
				Message: "The security token included in the request is invalid."},
			awstest.BadDate: {Status: 400, Type: "IncompleteSignatureException", Message: "X-Amz-Date is missing or malformed"},
			awstest.SignatureMismatch: {Status: 403, Type: "InvalidSignatureException",
				Message: "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."},
		},
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr() }

// Endpoint is the server's base URL, the eventbridge kind's endpoint field.
func (s *Server) Endpoint() string { return s.ln.Endpoint() }

// BusARN is the ARN of event bus name on this server.
func (s *Server) BusARN(name string) string {
	return "arn:aws:events:" + Region + ":" + Account + ":event-bus/" + name
}

// Config is a configuration of the eventbridge kind reaching the event bus
// Bus.
func (s *Server) Config() kind.Config { return s.BusConfig(Bus) }

// BusConfig is a configuration reaching event bus name, which need not
// exist.
func (s *Server) BusConfig(name string) kind.Config {
	c := s.svc.Config(s.Endpoint())
	c["event_bus"] = name
	return c
}

// RequireSessionToken makes the server take only requests signed with
// temporary credentials of session token tok (Config then has it).
func (s *Server) RequireSessionToken(tok string) { s.svc.RequireSessionToken(tok) }

// CreateBus adds event bus name.
func (s *Server) CreateBus(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buses[name] = true
}

// FailNext makes the server answer the next n calls with f.
func (s *Server) FailNext(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail.Add(n, f)
}

// FailEntriesNext makes the server fail the next n entries with f, in
// answers of status 200 that count them in FailedEntryCount.
func (s *Server) FailEntriesNext(n int, f EntryFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failEntries.Add(n, f)
}

// Events returns the events accepted so far, in the order accepted.
func (s *Server) Events(t testing.TB) []Event {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Event, len(s.events))
	copy(out, s.events)
	return out
}

// WaitFor waits up to 10 seconds for at least n accepted events and
// returns them all.
func (s *Server) WaitFor(t testing.TB, n int) []Event {
	t.Helper()
	return awstest.WaitFor(t, n, "EventBridge events", func() []Event { return s.Events(t) })
}

// Stop stops the server: connections are refused until Restart. What it
// accepted is kept. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.ln.Stop() }

// Restart stops the server if it runs and starts it again on the same
// address, with the same buses and events.
func (s *Server) Restart() {
	s.t.Helper()
	s.ln.Restart()
}

// putEventsRequest is PutEvents's input in the JSON protocol.
type putEventsRequest struct {
	Entries    []requestEntry
	EndpointId *string
}

type requestEntry struct {
	EventBusName *string
	Source       *string
	DetailType   *string
	Detail       *string
	Time         *json.Number // epoch seconds
	Resources    []string
	TraceHeader  *string
}

type resultEntry struct {
	EventId      string `json:",omitempty"`
	ErrorCode    string `json:",omitempty"`
	ErrorMessage string `json:",omitempty"`
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, ok := s.svc.ReadRequest(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.fail.Pop(); ok {
		s.svc.WriteError(w, awstest.Error{Status: f.Status, Type: f.Type, Message: f.Message})
		return
	}
	if !s.svc.CheckTarget(w, r) {
		return
	}
	var in putEventsRequest
	if !s.svc.Decode(w, body, &in) {
		return
	}
	if len(in.Entries) < 1 || len(in.Entries) > 10 {
		s.svc.WriteError(w, awstest.Error{Status: 400, Type: "ValidationException",
			Message: "1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length between 1 and 10"})
		return
	}
	if in.EndpointId != nil {
		s.svc.WriteError(w, awstest.Error{Status: 400, Type: "ValidationException", Message: "the test server has no global endpoints"})
		return
	}
	out := struct {
		FailedEntryCount int
		Entries          []resultEntry
	}{}
	for _, e := range in.Entries {
		res := s.put(e)
		if res.ErrorCode != "" {
			out.FailedEntryCount++
		}
		out.Entries = append(out.Entries, res)
	}
	s.svc.WriteOutput(w, out)
}

// put checks and stores one entry, s.mu held.
func (s *Server) put(e requestEntry) resultEntry {
	if f, ok := s.failEntries.Pop(); ok {
		return resultEntry{ErrorCode: f.Code, ErrorMessage: f.Message}
	}
	if e.Source == nil || e.DetailType == nil || e.Detail == nil {
		return resultEntry{ErrorCode: "InvalidArgument", ErrorMessage: "Parameters Source, DetailType and Detail are required."}
	}
	if *e.Source == "" || len(*e.Source) > 256 || strings.HasPrefix(strings.ToLower(*e.Source), "aws.") {
		return resultEntry{ErrorCode: "InvalidArgument", ErrorMessage: "Parameter Source is not valid."}
	}
	if *e.DetailType == "" || len(*e.DetailType) > 128 {
		return resultEntry{ErrorCode: "InvalidArgument", ErrorMessage: "Parameter DetailType is not valid."}
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(*e.Detail), &obj); err != nil || obj == nil {
		return resultEntry{ErrorCode: "MalformedDetail", ErrorMessage: "Detail is malformed."}
	}
	bus := "default"
	if e.EventBusName != nil && *e.EventBusName != "" {
		bus = *e.EventBusName
		if arn, ok := strings.CutPrefix(bus, "arn:aws:events:"+Region+":"+Account+":event-bus/"); ok {
			bus = arn
		}
	}
	if !s.buses[bus] {
		return resultEntry{ErrorCode: "ResourceNotFoundException", ErrorMessage: "Event bus " + bus + " does not exist."}
	}
	ev := Event{ID: awstest.NewID(), Bus: bus, Source: *e.Source, DetailType: *e.DetailType, Detail: *e.Detail, Resources: e.Resources}
	if e.Time != nil {
		sec, err := e.Time.Float64()
		if err != nil {
			return resultEntry{ErrorCode: "InvalidArgument", ErrorMessage: "Parameter Time is not valid."}
		}
		ev.Time = time.Unix(0, int64(sec*float64(time.Second))).UTC()
	}
	s.events = append(s.events, ev)
	return resultEntry{EventId: ev.ID}
}
