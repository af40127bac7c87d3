package awstest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/relaydev/relay/kind"
)

// Error is an error answer in an AWS JSON protocol: the status, a JSON
// body with __type and message, and, for a query-compatible service such
// as SQS, the query protocol's code in the x-amzn-query-error header
// ("Code;Sender"; "" for none).
type Error struct {
	Status     int
	Type       string
	QueryError string
	Message    string
}

// Refusal is why Verify refused a request's signature.
type Refusal int

// The refusals.
const (
	// Signed is no refusal: the signature is good.
	Signed Refusal = iota
	// MissingSignature is a request with no AWS4-HMAC-SHA256
	// Authorization header.
	MissingSignature
	// InvalidToken is a request signed with another access key ID, or
	// without the session token the service requires (or with another).
	InvalidToken
	// BadDate is a request whose X-Amz-Date is missing or malformed.
	BadDate
	// SignatureMismatch is a request whose signature is not the one the
	// service's credentials make.
	SignatureMismatch
)

// Service is a fake AWS service's protocol and credentials: what a
// request must be, and the answers to one that is not. Set its exported
// fields before it serves; RequireSessionToken may be called at any time.
type Service struct {
	// ContentType is the protocol's, application/x-amz-json-1.0 or 1.1.
	ContentType string
	// Target is the one operation served, as the X-Amz-Target header
	// names it (AmazonSQS.SendMessage).
	Target string
	// SigningName and Region are what requests must be signed for
	// (sqs, us-east-1); AccessKeyID and SecretAccessKey, with the session
	// token RequireSessionToken sets, what with.
	SigningName     string
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	// SerializationType is the __type of the answer (400) to a body of
	// another content type, or that is not the operation's input.
	SerializationType string
	// UnknownOperation is the answer to a request for another target; its
	// message is written by Service.
	UnknownOperation Error
	// Refused are the answers to a request whose signature is refused,
	// by why.
	Refused map[Refusal]Error

	mu    sync.Mutex
	token string
}

// ClientConfig is an SDK configuration for a client of the service at
// endpoint signing with its access key ID and secret (another secret to
// be refused), without retries, through a transport whose idle
// connections close when the test ends.
func (s *Service) ClientConfig(t testing.TB, endpoint, secret string) aws.Config {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return aws.Config{
		Region:           s.Region,
		Credentials:      credentials.NewStaticCredentialsProvider(s.AccessKeyID, secret, ""),
		HTTPClient:       &http.Client{Transport: tr},
		RetryMaxAttempts: 1,
		BaseEndpoint:     aws.String(endpoint),
	}
}

// RequireSessionToken makes the service take only requests signed with
// temporary credentials of session token tok ("" for none).
func (s *Service) RequireSessionToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = tok
}

// Config is the part of a kind's configuration that reaches the service
// at endpoint: its region, the endpoint and its credentials, the session
// token among them when one is required.
func (s *Service) Config(endpoint string) kind.Config {
	c := kind.Config{
		"region":            s.Region,
		"endpoint":          endpoint,
		"access_key_id":     s.AccessKeyID,
		"secret_access_key": s.SecretAccessKey,
	}
	if tok := s.sessionToken(); tok != "" {
		c["session_token"] = tok
	}
	return c
}

func (s *Service) sessionToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// ReadRequest reads r's body (up to 4 MiB) and checks what every request
// must be: a POST to / of the protocol's content type, signed with the
// service's credentials. It answers w and returns false when r is not.
func (s *Service) ReadRequest(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return nil, false
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		s.WriteError(w, Error{Status: 404, Type: "UnknownOperationException", Message: "POST / only"})
		return nil, false
	}
	if ct := r.Header.Get("Content-Type"); ct != s.ContentType {
		s.WriteError(w, Error{Status: 400, Type: s.SerializationType,
			Message: "Content-Type " + ct + " is not " + s.ContentType})
		return nil, false
	}
	if why := s.Verify(r, body); why != Signed {
		s.WriteError(w, s.Refused[why])
		return nil, false
	}
	return body, true
}

// CheckTarget checks that r calls the operation served, answering w and
// returning false when it calls another.
func (s *Service) CheckTarget(w http.ResponseWriter, r *http.Request) bool {
	if target := r.Header.Get("X-Amz-Target"); target != s.Target {
		e := s.UnknownOperation
		e.Message = "the test server knows only " + s.Target + ", not " + target
		s.WriteError(w, e)
		return false
	}
	return true
}

// Decode reads body, JSON, into in, answering w and returning false when
// it cannot.
func (s *Service) Decode(w http.ResponseWriter, body []byte, in any) bool {
	if err := json.Unmarshal(body, in); err != nil {
		s.WriteError(w, Error{Status: 400, Type: s.SerializationType, Message: err.Error()})
		return false
	}
	return true
}

// Verify checks r's SigV4 signature: the access key, the session token and
// the signature itself, recomputed with the service's credentials over
// the headers r signed and body.
func (s *Service) Verify(r *http.Request, body []byte) Refusal {
	token := s.sessionToken()
	auth := r.Header.Get("Authorization")
	fields, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return MissingSignature
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
	akid, _, _ := strings.Cut(credential, "/")
	if akid != s.AccessKeyID || r.Header.Get("X-Amz-Security-Token") != token {
		return InvalidToken
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return BadDate
	}
	re, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return InvalidToken
	}
	re.Host = r.Host
	re.ContentLength = r.ContentLength
	for h := range strings.SplitSeq(signedHeaders, ";") {
		if h != "host" && h != "content-length" {
			re.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey, SessionToken: token}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, re, hex.EncodeToString(sum[:]), s.SigningName, s.Region, at); err != nil {
		return InvalidToken
	}
	if subtle.ConstantTimeCompare([]byte(re.Header.Get("Authorization")), []byte(auth)) != 1 {
		return SignatureMismatch
	}
	return Signed
}

// WriteError answers e, with a new request id.
func (s *Service) WriteError(w http.ResponseWriter, e Error) {
	w.Header().Set("Content-Type", s.ContentType)
	w.Header().Set("X-Amzn-RequestId", NewID())
	if e.QueryError != "" {
		w.Header().Set("X-Amzn-Query-Error", e.QueryError)
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": e.Type, "message": e.Message})
}

// WriteOutput answers out, an operation's output, with status 200 and a
// new request id.
func (s *Service) WriteOutput(w http.ResponseWriter, out any) {
	w.Header().Set("Content-Type", s.ContentType)
	w.Header().Set("X-Amzn-RequestId", NewID())
	_ = json.NewEncoder(w).Encode(out)
}

// NewID is a random UUID, as AWS's message, event and request ids.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Queue is a queue of failures a server is told to give, first in first
// out. Its zero value is empty; it is not safe for concurrent use.
type Queue[T any] struct{ items []T }

// Add puts n copies of v at the queue's end.
func (q *Queue[T]) Add(n int, v T) {
	for range n {
		q.items = append(q.items, v)
	}
}

// Pop takes the queue's first item; false when it is empty.
func (q *Queue[T]) Pop() (T, bool) {
	var v T
	if len(q.items) == 0 {
		return v, false
	}
	v, q.items = q.items[0], q.items[1:]
	return v, true
}
