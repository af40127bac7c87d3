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
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/kind"
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
	t    testing.TB
	addr string

	life sync.Mutex // guards srv and done
	srv  *http.Server
	done chan struct{}

	mu          sync.Mutex
	token       string
	buses       map[string]bool
	events      []Event
	fail        []Failure
	failEntries []EntryFailure
}

// Start starts a server on a free loopback port, stopped when the test
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &Server{t: t, addr: ln.Addr().String(), buses: map[string]bool{"default": true, Bus: true}}
	s.serve(ln)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	s.life.Lock()
	s.srv, s.done = srv, done
	s.life.Unlock()
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Endpoint is the server's base URL, the eventbridge kind's endpoint field.
func (s *Server) Endpoint() string { return "http://" + s.addr }

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
	c := kind.Config{
		"event_bus":         name,
		"region":            Region,
		"endpoint":          s.Endpoint(),
		"access_key_id":     AccessKeyID,
		"secret_access_key": SecretAccessKey,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" {
		c["session_token"] = s.token
	}
	return c
}

// RequireSessionToken makes the server take only requests signed with
// temporary credentials of session token tok (Config then has it).
func (s *Server) RequireSessionToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = tok
}

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
	for range n {
		s.fail = append(s.fail, f)
	}
}

// FailEntriesNext makes the server fail the next n entries with f, in
// answers of status 200 that count them in FailedEntryCount.
func (s *Server) FailEntriesNext(n int, f EntryFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failEntries = append(s.failEntries, f)
	}
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
	require.Eventually(t, func() bool { return len(s.Events(t)) >= n }, 10*time.Second, 10*time.Millisecond,
		"waiting for %d EventBridge events", n)
	return s.Events(t)
}

// Stop stops the server: connections are refused until Restart. What it
// accepted is kept. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.life.Lock()
	srv, done := s.srv, s.done
	s.srv, s.done = nil, nil
	s.life.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	<-done
}

// Restart stops the server if it runs and starts it again on the same
// address, with the same buses and events.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var ln net.Listener
	require.Eventually(s.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", s.addr)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "listening again on %s", s.addr)
	s.serve(ln)
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
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		writeError(w, Failure{Status: 404, Type: "UnknownOperationException", Message: "POST / only"})
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
		writeError(w, Failure{Status: 400, Type: "SerializationException",
			Message: "Content-Type " + ct + " is not application/x-amz-json-1.1"})
		return
	}
	if f, ok := s.verify(r, body); !ok {
		writeError(w, f)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fail) > 0 {
		f := s.fail[0]
		s.fail = s.fail[1:]
		writeError(w, f)
		return
	}
	if target := r.Header.Get("X-Amz-Target"); target != "AWSEvents.PutEvents" {
		writeError(w, Failure{Status: 400, Type: "UnknownOperationException",
			Message: "the test server knows only AWSEvents.PutEvents, not " + target})
		return
	}
	var in putEventsRequest
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, Failure{Status: 400, Type: "SerializationException", Message: err.Error()})
		return
	}
	if len(in.Entries) < 1 || len(in.Entries) > 10 {
		writeError(w, Failure{Status: 400, Type: "ValidationException",
			Message: "1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length between 1 and 10"})
		return
	}
	if in.EndpointId != nil {
		writeError(w, Failure{Status: 400, Type: "ValidationException", Message: "the test server has no global endpoints"})
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
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", newID())
	_ = json.NewEncoder(w).Encode(out)
}

// put checks and stores one entry, s.mu held.
func (s *Server) put(e requestEntry) resultEntry {
	if len(s.failEntries) > 0 {
		f := s.failEntries[0]
		s.failEntries = s.failEntries[1:]
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
	ev := Event{ID: newID(), Bus: bus, Source: *e.Source, DetailType: *e.DetailType, Detail: *e.Detail, Resources: e.Resources}
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

// verify checks r's SigV4 signature: the access key, the session token and the signature
// itself, recomputed with the server's credentials over the headers r
// signed.
func (s *Server) verify(r *http.Request, body []byte) (Failure, bool) {
	s.mu.Lock()
	token := s.token
	s.mu.Unlock()
	auth := r.Header.Get("Authorization")
	fields, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return Failure{Status: 403, Type: "MissingAuthenticationTokenException", Message: "Missing Authentication Token"}, false
	}
	var credential, signedHeaders string
	for f := range strings.SplitSeq(fields, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch k {
		case "Credential":
			credential = v
		case "SignedHeaders":
			signedHeaders = v
		}
	}
	refused := Failure{Status: 403, Type: "UnrecognizedClientException",
		Message: "The security token included in the request is invalid."}
	akid, _, _ := strings.Cut(credential, "/")
	if akid != AccessKeyID || r.Header.Get("X-Amz-Security-Token") != token {
		return refused, false
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return Failure{Status: 400, Type: "IncompleteSignatureException", Message: "X-Amz-Date is missing or malformed"}, false
	}
	re, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return refused, false
	}
	re.Host = r.Host
	re.ContentLength = r.ContentLength
	for h := range strings.SplitSeq(signedHeaders, ";") {
		if h != "host" && h != "content-length" {
			re.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey, SessionToken: token}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, re, hex.EncodeToString(sum[:]), "events", Region, at); err != nil {
		return refused, false
	}
	if subtle.ConstantTimeCompare([]byte(re.Header.Get("Authorization")), []byte(auth)) != 1 {
		return Failure{Status: 403, Type: "InvalidSignatureException",
			Message: "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."}, false
	}
	return Failure{}, true
}

func writeError(w http.ResponseWriter, f Failure) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", newID())
	w.WriteHeader(f.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": f.Type, "message": f.Message})
}

// newID is a random UUID, as EventBridge's event and request ids.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
