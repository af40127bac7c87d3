// Package pubsubtest runs Google Cloud Pub/Sub's own fake service, the
// client library's cloud.google.com/go/pubsub/v2/pstest, for tests: the
// gRPC Publisher, Subscriber and SchemaService APIs on a free loopback port,
// in plaintext like the Pub/Sub emulator. A test can stop it and restart it
// on the same address with the same topics and messages, and make Publish
// requests fail.
//
// The state and the answers are pstest's (pstest.Server.GServer). This
// package only serves them on a gRPC server of its own, which it can stop
// and start again on the same address: pstest's own listener cannot be
// restarted, so it is left idle until the test ends.
package pubsubtest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relaydev/relay/kind"
)

// The project and topic that Start creates.
const (
	Project = "relay-test"
	Topic   = "events"
)

// Received is a message the server has.
type Received struct {
	// ID is the message id the server gave it.
	ID string
	// Topic is its topic's full name (projects/P/topics/T).
	Topic       string
	Body        []byte
	Attributes  map[string]string
	OrderingKey string
}

// Server is a fake Pub/Sub service. Its methods are safe for concurrent
// use.
type Server struct {
	tb   testing.TB
	addr string
	ps   *pstest.Server
	fail *failures

	life   sync.Mutex // guards the gRPC server's life
	grpc   *grpc.Server
	served chan struct{}
}

// Start starts a server on a free 127.0.0.1 port with topic Topic in
// project Project. t's cleanup stops it and releases pstest's resources.
func Start(t testing.TB) *Server {
	t.Helper()
	fail := &failures{}
	ps := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: fail})
	t.Cleanup(func() { _ = ps.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &Server{tb: t, addr: lis.Addr().String(), ps: ps, fail: fail}
	s.CreateTopic(Topic)
	s.serve(lis)
	t.Cleanup(s.Stop) // before ps.Close: cleanups run last-in first-out
	return s
}

// serve serves pstest's services, and so its state, on lis.
func (s *Server) serve(lis net.Listener) {
	gs := grpc.NewServer()
	pb.RegisterPublisherServer(gs, &s.ps.GServer)
	pb.RegisterSubscriberServer(gs, &s.ps.GServer)
	pb.RegisterSchemaServiceServer(gs, &s.ps.GServer)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	s.grpc, s.served = gs, served
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Config is a pubsub destination's configuration reaching the server's
// topic Topic (as an emulator: plaintext, no credentials).
func (s *Server) Config() kind.Config {
	return kind.Config{
		"project":  Project,
		"topic":    Topic,
		"endpoint": s.addr,
	}
}

// CreateTopic creates topic id in project Project. Creating a topic that
// exists does nothing.
func (s *Server) CreateTopic(id string) {
	s.tb.Helper()
	_, err := s.ps.GServer.CreateTopic(context.Background(), &pb.Topic{Name: topicName(id)})
	if status.Code(err) != codes.AlreadyExists {
		require.NoError(s.tb, err, "create topic %s", id)
	}
}

func topicName(id string) string { return "projects/" + Project + "/topics/" + id }

// Stop stops serving: connections are cut and new ones refused. The topics
// and messages are kept. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.grpc == nil {
		return
	}
	s.grpc.Stop()
	<-s.served
	s.grpc, s.served = nil, nil
}

// Restart serves again on the same address, with the topics and messages
// the server had. Restarting a running server stops it first.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	s.life.Lock()
	defer s.life.Unlock()
	var lis net.Listener
	require.Eventually(s.tb, func() bool {
		var err error
		lis, err = net.Listen("tcp", s.addr)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "listen again on %s", s.addr)
	s.serve(lis)
}

// FailPublish makes the next len(errs) Publish requests fail, in turn,
// with errs (gRPC status errors, such as status.Error(codes.Unavailable,
// "...")) without storing their messages.
func (s *Server) FailPublish(errs ...error) {
	s.fail.mu.Lock()
	defer s.fail.mu.Unlock()
	s.fail.errs = append(s.fail.errs, errs...)
}

// Messages returns every message the server stored, in the order it stored
// them.
func (s *Server) Messages(t testing.TB) []Received {
	t.Helper()
	msgs := s.ps.Messages()
	out := make([]Received, len(msgs))
	for i, m := range msgs {
		out[i] = Received{
			ID:          m.ID,
			Topic:       m.Topic,
			Body:        append([]byte(nil), m.Data...),
			Attributes:  make(map[string]string, len(m.Attributes)),
			OrderingKey: m.OrderingKey,
		}
		for k, v := range m.Attributes {
			out[i].Attributes[k] = v
		}
	}
	return out
}

// WaitFor waits up to 10 seconds for the server to have at least n
// messages and returns them.
func (s *Server) WaitFor(t testing.TB, n int) []Received {
	t.Helper()
	var got []Received
	require.Eventually(t, func() bool {
		got = s.Messages(t)
		return len(got) >= n
	}, 10*time.Second, 10*time.Millisecond, "waiting for %d messages", n)
	return got
}

// failures is a pstest reactor for Publish: while it has errors, each
// request is answered with the next one before pstest looks at it.
type failures struct {
	mu   sync.Mutex
	errs []error
}

func (f *failures) React(any) (handled bool, ret any, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) == 0 {
		return false, nil, nil
	}
	err, f.errs = f.errs[0], f.errs[1:]
	return true, nil, err
}
