// Package sqstest is an in-process Amazon SQS for tests: an HTTP server on
// a free loopback port that speaks SendMessage in the AWS JSON 1.0 protocol
// the SDK sends, checks each request's SigV4 signature against its own
// credentials, keeps what it accepted (across Stop and Restart), and can be
// told to fail.
//
// It knows the queues relay-test and relay-test.fifo (CreateQueue adds
// more); a message to any other answers QueueDoesNotExist, as SQS does.
package sqstest

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/kind"
	"github.com/relaydev/relay/kind/internal/awsapi/awstest"
)

// The credentials and region the server checks signatures with.
const (
	AccessKeyID     = "AKIARELAYTEST0000001"
	SecretAccessKey = "relay-test-secret-access-key"
	Region          = "us-east-1"
	// Account is the account in the queue URLs.
	Account = "000000000000"
	// Queue and FIFOQueue are the queues the server starts with.
	Queue     = "relay-test"
	FIFOQueue = "relay-test.fifo"
)

// MaxMessageSize is the most the server's queues take in a message, body
// and attributes together (SQS's default for queues made before 2025).
const MaxMessageSize = 256 << 10

// dedupWindow is how long a FIFO queue remembers a deduplication id.
const dedupWindow = 5 * time.Minute

// Message is a message a queue accepted.
type Message struct {
	Queue string // the queue's name
	// MessageID is the id the server answered; SequenceNumber is a FIFO
	// queue's, "" for a standard one.
	MessageID      string
	SequenceNumber string
	Body           string
	// Attributes are the String message attributes, by name.
	Attributes             map[string]string
	MessageGroupID         string
	MessageDeduplicationID string
}

// Failure is an error answer the server gives instead of handling a
// request, shaped as SQS's JSON protocol answers: the status, a JSON body
// with __type and message, and the query-compatible code in the
// x-amzn-query-error header.
type Failure struct {
	Status int
	// Type is the body's __type, such as com.amazonaws.sqs#RequestThrottled.
	Type string
	// QueryError is the x-amzn-query-error header ("Code;Sender"), "" for
	// none.
	QueryError string
	Message    string
}

// Failures SQS answers.
var (
	// Throttled is SQS throttling the caller: the SDK's error is a
	// *types.RequestThrottled with code RequestThrottled.
	Throttled = Failure{Status: 400, Type: "com.amazonaws.sqs#RequestThrottled",
		QueryError: "RequestThrottled;Sender", Message: "Request is throttled."}
	// Unavailable is SQS unavailable: code ServiceUnavailable.
	Unavailable = Failure{Status: 503, Type: "com.amazon.coral.availability#ServiceUnavailableException",
		QueryError: "ServiceUnavailable;Server", Message: "Service is unavailable. Try again later."}
	// AccessDenied is a request from an identity not allowed to send:
	// code AccessDenied.
	AccessDenied = Failure{Status: 403, Type: "com.amazon.coral.service#AccessDeniedException",
		QueryError: "AccessDenied;Sender", Message: "User is not authorized to perform: sqs:sendmessage"}
	// KMSDisabled is a queue whose KMS key is disabled: code
	// KMS.DisabledException.
	KMSDisabled = Failure{Status: 400, Type: "com.amazonaws.sqs#KmsDisabled",
		QueryError: "KMS.DisabledException;Sender", Message: "The KMS key of the queue is disabled."}
)

var (
	queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}(\.fifo)?$`)
	attrNameRE  = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)
	fifoIDRE    = regexp.MustCompile(`^[!-~]{1,128}$`)
)

// Server is an in-process SQS.
type Server struct {
	t   testing.TB
	svc *awstest.Service
	ln  *awstest.Listener

	mu       sync.Mutex
	queues   map[string]*queue
	messages []Message
	fail     awstest.Queue[Failure]
}

type queue struct {
	seq   uint64
	dedup map[string]dedupEntry
}

type dedupEntry struct {
	id, seq string
	at      time.Time
}

// Start starts a server on a free loopback port, stopped when the test
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, svc: newService(), queues: map[string]*queue{}}
	s.queues[Queue] = &queue{}
	s.queues[FIFOQueue] = &queue{dedup: map[string]dedupEntry{}}
	s.ln = awstest.Listen(t, http.HandlerFunc(s.handle))
	return s
}

// newService is SQS's JSON protocol, with the credentials and the error
// answers of SQS.
func newService() *awstest.Service {
	return &awstest.Service{
		ContentType: "application/x-amz-json-1.0",
		Target:      "AmazonSQS.SendMessage",
		SigningName: "sqs", Region: Region, AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey,
		SerializationType: "com.amazon.coral.service#SerializationException",
		UnknownOperation: awstest.Error{Status: 400, Type: "com.amazon.coral.service#UnknownOperationException",
			QueryError: "InvalidAction;Sender"},
		Refused: map[awstest.Refusal]awstest.Error{
			awstest.MissingSignature: {Status: 403, Type: "com.amazon.coral.service#MissingAuthenticationTokenException",
				QueryError: "MissingAuthenticationToken;Sender", Message: "Request is missing Authentication Token"},
			awstest.InvalidToken: {Status: 403, Type: "com.amazon.coral.service#InvalidClientTokenId",
				QueryError: "InvalidClientTokenId;Sender", Message: "The security token included in the request is invalid."},
			awstest.BadDate: {Status: 400, Type: "com.amazon.coral.service#IncompleteSignatureException",
				QueryError: "IncompleteSignature;Sender", Message: "X-Amz-Date is missing or malformed"},
			awstest.SignatureMismatch: {Status: 403, Type: "com.amazon.coral.service#SignatureDoesNotMatch",
				QueryError: "SignatureDoesNotMatch;Sender",
				Message:    "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."},
		},
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr() }

// Endpoint is the server's base URL, the sqs kind's endpoint field.
func (s *Server) Endpoint() string { return s.ln.Endpoint() }

// QueueURL is the URL of queue name on this server.
func (s *Server) QueueURL(name string) string {
	return s.Endpoint() + "/" + Account + "/" + name
}

// Config is a configuration of the sqs kind reaching the standard queue
// Queue.
func (s *Server) Config() kind.Config { return s.QueueConfig(Queue) }

// FIFOConfig is a configuration reaching the FIFO queue FIFOQueue.
func (s *Server) FIFOConfig() kind.Config { return s.QueueConfig(FIFOQueue) }

// QueueConfig is a configuration reaching queue name, which need not exist.
func (s *Server) QueueConfig(name string) kind.Config {
	c := s.svc.Config(s.Endpoint())
	c["queue_url"] = s.QueueURL(name)
	return c
}

// RequireSessionToken makes the server take only requests signed with
// temporary credentials of session token tok (Config then has it).
func (s *Server) RequireSessionToken(tok string) { s.svc.RequireSessionToken(tok) }

// CreateQueue adds queue name (a FIFO queue when it ends in .fifo).
func (s *Server) CreateQueue(name string) {
	require.Regexp(s.t, queueNameRE, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues[name] == nil {
		q := &queue{}
		if strings.HasSuffix(name, ".fifo") {
			q.dedup = map[string]dedupEntry{}
		}
		s.queues[name] = q
	}
}

// DeleteQueue removes queue name; the messages it took stay in Messages.
func (s *Server) DeleteQueue(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.queues, name)
}

// FailNext makes the server answer the next n requests with f.
func (s *Server) FailNext(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail.Add(n, f)
}

// Messages returns the messages accepted so far, in the order accepted.
func (s *Server) Messages(t testing.TB) []Message {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.messages))
	for i, m := range s.messages {
		m.Attributes = maps.Clone(m.Attributes)
		out[i] = m
	}
	return out
}

// WaitFor waits up to 10 seconds for at least n accepted messages and
// returns them all.
func (s *Server) WaitFor(t testing.TB, n int) []Message {
	t.Helper()
	return awstest.WaitFor(t, n, "SQS messages", func() []Message { return s.Messages(t) })
}

// Stop stops the server: connections are refused until Restart. What it
// accepted is kept. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.ln.Stop() }

// Restart stops the server if it runs and starts it again on the same
// address, with the same queues and messages.
func (s *Server) Restart() {
	s.t.Helper()
	s.ln.Restart()
}

// sendMessageRequest is SendMessage's input in the JSON protocol.
type sendMessageRequest struct {
	QueueUrl               string
	MessageBody            *string
	DelaySeconds           int
	MessageAttributes      map[string]attributeValue
	MessageGroupId         *string
	MessageDeduplicationId *string
}

type attributeValue struct {
	DataType    string
	StringValue *string
	BinaryValue []byte
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, ok := s.svc.ReadRequest(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.fail.Pop(); ok {
		s.svc.WriteError(w, awstest.Error(f))
		return
	}
	if !s.svc.CheckTarget(w, r) {
		return
	}
	var in sendMessageRequest
	if !s.svc.Decode(w, body, &in) {
		return
	}
	out, f, ok := s.send(in)
	if !ok {
		s.svc.WriteError(w, awstest.Error(f))
		return
	}
	s.svc.WriteOutput(w, out)
}

func invalid(msg string) Failure {
	return Failure{Status: 400, Type: "com.amazon.coral.validate#ValidationException",
		QueryError: "InvalidParameterValue;Sender", Message: msg}
}

// send checks and stores one message, s.mu held.
func (s *Server) send(in sendMessageRequest) (map[string]string, Failure, bool) {
	if in.QueueUrl == "" || in.MessageBody == nil {
		return nil, Failure{Status: 400, Type: "com.amazon.coral.validate#ValidationException",
			QueryError: "MissingParameter;Sender", Message: "QueueUrl and MessageBody are required"}, false
	}
	u, err := url.Parse(in.QueueUrl)
	if err != nil {
		return nil, invalid("invalid QueueUrl"), false
	}
	name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
	q := s.queues[name]
	if q == nil || u.Path != "/"+Account+"/"+name {
		return nil, Failure{Status: 400, Type: "com.amazonaws.sqs#QueueDoesNotExist",
			QueryError: "AWS.SimpleQueueService.NonExistentQueue;Sender", Message: "The specified queue does not exist."}, false
	}
	body := *in.MessageBody
	if body == "" {
		return nil, Failure{Status: 400, Type: "com.amazon.coral.validate#ValidationException",
			QueryError: "MissingParameter;Sender", Message: "The request must contain the parameter MessageBody."}, false
	}
	if !validChars(body) {
		return nil, Failure{Status: 400, Type: "com.amazonaws.sqs#InvalidMessageContents",
			Message: "Invalid characters found."}, false
	}
	if len(in.MessageAttributes) > 10 {
		return nil, invalid("Number of message attributes [" + fmt.Sprint(len(in.MessageAttributes)) + "] exceeds the allowed maximum [10]."), false
	}
	size := len(body)
	attrs := make(map[string]string, len(in.MessageAttributes))
	for n, v := range in.MessageAttributes {
		lower := strings.ToLower(n)
		if !attrNameRE.MatchString(n) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") ||
			strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.Contains(n, "..") {
			return nil, invalid("Message attribute name '" + n + "' is invalid."), false
		}
		if v.DataType != "String" || v.StringValue == nil || *v.StringValue == "" || !validChars(*v.StringValue) {
			return nil, invalid("Message attribute '" + n + "' must be a non-empty String (the test server takes no other)."), false
		}
		attrs[n] = *v.StringValue
		size += len(n) + len(v.DataType) + len(*v.StringValue)
	}
	if size > MaxMessageSize {
		return nil, invalid(fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", MaxMessageSize)), false
	}
	m := Message{Queue: name, Body: body, Attributes: attrs, MessageID: awstest.NewID()}
	out := map[string]string{"MD5OfMessageBody": md5Hex([]byte(body))}
	if len(attrs) > 0 {
		out["MD5OfMessageAttributes"] = attributesMD5(attrs)
	}
	if q.dedup != nil {
		if in.MessageGroupId == nil || !fifoIDRE.MatchString(*in.MessageGroupId) {
			return nil, Failure{Status: 400, Type: "com.amazon.coral.validate#ValidationException",
				QueryError: "MissingParameter;Sender", Message: "The request must contain a valid parameter MessageGroupId."}, false
		}
		if in.MessageDeduplicationId == nil || !fifoIDRE.MatchString(*in.MessageDeduplicationId) {
			return nil, invalid("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"), false
		}
		if in.DelaySeconds != 0 {
			return nil, invalid("Value for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."), false
		}
		m.MessageGroupID, m.MessageDeduplicationID = *in.MessageGroupId, *in.MessageDeduplicationId
		now := time.Now()
		if d, ok := q.dedup[m.MessageDeduplicationID]; ok && now.Sub(d.at) < dedupWindow {
			// A duplicate within the window: accepted, not stored again.
			out["MessageId"], out["SequenceNumber"] = d.id, d.seq
			return out, Failure{}, true
		}
		q.seq++
		m.SequenceNumber = fmt.Sprintf("%020d", q.seq)
		q.dedup[m.MessageDeduplicationID] = dedupEntry{id: m.MessageID, seq: m.SequenceNumber, at: now}
		out["SequenceNumber"] = m.SequenceNumber
	}
	out["MessageId"] = m.MessageID
	s.messages = append(s.messages, m)
	return out, Failure{}, true
}

// validChars reports whether s has only the characters SQS takes.
func validChars(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0xD7FF ||
			r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF)
	})
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// attributesMD5 is SQS's MD5OfMessageAttributes of String attributes: the
// MD5 of, for each name in order, the length-prefixed name, data type, a
// transport type byte (1, string) and the length-prefixed value.
func attributesMD5(attrs map[string]string) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	put := func(s string) {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(s)))
		b.WriteString(s)
	}
	for _, n := range names {
		put(n)
		put("String")
		b.WriteByte(1)
		put(attrs[n])
	}
	return md5Hex(b.Bytes())
}
