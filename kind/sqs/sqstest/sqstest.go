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
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/kind"
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
	t    testing.TB
	addr string

	life sync.Mutex // guards srv and done
	srv  *http.Server
	done chan struct{}

	mu       sync.Mutex
	token    string
	queues   map[string]*queue
	messages []Message
	fail     []Failure
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &Server{t: t, addr: ln.Addr().String(), queues: map[string]*queue{}}
	s.queues[Queue] = &queue{}
	s.queues[FIFOQueue] = &queue{dedup: map[string]dedupEntry{}}
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

// Endpoint is the server's base URL, the sqs kind's endpoint field.
func (s *Server) Endpoint() string { return "http://" + s.addr }

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
	c := kind.Config{
		"queue_url":         s.QueueURL(name),
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
	for range n {
		s.fail = append(s.fail, f)
	}
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
	require.Eventually(t, func() bool { return len(s.Messages(t)) >= n }, 10*time.Second, 10*time.Millisecond,
		"waiting for %d SQS messages", n)
	return s.Messages(t)
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
// address, with the same queues and messages.
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
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		writeError(w, Failure{Status: 404, Type: "UnknownOperationException", Message: "POST / only"})
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.0" {
		writeError(w, Failure{Status: 400, Type: "com.amazon.coral.service#SerializationException",
			Message: "Content-Type " + ct + " is not application/x-amz-json-1.0"})
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
	if target := r.Header.Get("X-Amz-Target"); target != "AmazonSQS.SendMessage" {
		writeError(w, Failure{Status: 400, Type: "com.amazon.coral.service#UnknownOperationException",
			QueryError: "InvalidAction;Sender", Message: "the test server knows only AmazonSQS.SendMessage, not " + target})
		return
	}
	var in sendMessageRequest
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, Failure{Status: 400, Type: "com.amazon.coral.service#SerializationException", Message: err.Error()})
		return
	}
	out, f, ok := s.send(in)
	if !ok {
		writeError(w, f)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-RequestId", newID())
	_ = json.NewEncoder(w).Encode(out)
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
	m := Message{Queue: name, Body: body, Attributes: attrs, MessageID: newID()}
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

// verify checks r's SigV4 signature: the access key, the session token and
// the signature itself, recomputed with the server's credentials over the
// headers r signed.
func (s *Server) verify(r *http.Request, body []byte) (Failure, bool) {
	s.mu.Lock()
	token := s.token
	s.mu.Unlock()
	auth := r.Header.Get("Authorization")
	fields, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return Failure{Status: 403, Type: "com.amazon.coral.service#MissingAuthenticationTokenException",
			QueryError: "MissingAuthenticationToken;Sender", Message: "Request is missing Authentication Token"}, false
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
	refused := Failure{Status: 403, Type: "com.amazon.coral.service#InvalidClientTokenId",
		QueryError: "InvalidClientTokenId;Sender", Message: "The security token included in the request is invalid."}
	akid, _, _ := strings.Cut(credential, "/")
	if akid != AccessKeyID || r.Header.Get("X-Amz-Security-Token") != token {
		return refused, false
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return Failure{Status: 400, Type: "com.amazon.coral.service#IncompleteSignatureException",
			QueryError: "IncompleteSignature;Sender", Message: "X-Amz-Date is missing or malformed"}, false
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
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, re, hex.EncodeToString(sum[:]), "sqs", Region, at); err != nil {
		return refused, false
	}
	if subtle.ConstantTimeCompare([]byte(re.Header.Get("Authorization")), []byte(auth)) != 1 {
		return Failure{Status: 403, Type: "com.amazon.coral.service#SignatureDoesNotMatch",
			QueryError: "SignatureDoesNotMatch;Sender",
			Message:    "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."}, false
	}
	return Failure{}, true
}

func writeError(w http.ResponseWriter, f Failure) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-RequestId", newID())
	if f.QueryError != "" {
		w.Header().Set("X-Amzn-Query-Error", f.QueryError)
	}
	w.WriteHeader(f.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": f.Type, "message": f.Message})
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

// newID is a random UUID, as SQS's message and request ids.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
