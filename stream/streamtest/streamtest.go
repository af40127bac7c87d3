// Package streamtest runs an embedded NATS server with relay's streams for
// tests: on a free loopback port, in a temporary directory, stopped when the
// test ends.
package streamtest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
)

// Server is a running embedded server and a JetStream client of it.
type Server struct {
	URL string
	JS  jetstream.JetStream
}

// Start starts the server, connects to it and sets up relay's streams and
// buckets (stream.Ensure with the defaults).
func Start(t testing.TB) Server {
	t.Helper()
	s, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1, Mappings: stream.Mappings()})
	if err != nil {
		t.Fatalf("start embedded NATS: %v", err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect to embedded NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	if err := stream.Ensure(context.Background(), js, stream.Config{}); err != nil {
		t.Fatalf("set up relay's streams: %v", err)
	}
	return Server{URL: s.ClientURL(), JS: js}
}
