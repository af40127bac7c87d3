// Package redistest runs a real redis-server for tests: on a free loopback
// port, in a temporary directory, stopped when the test ends.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process.
type Server struct {
	t          testing.TB
	Addr       string // host:port
	Dir        string // its working directory (AOF files)
	appendOnly bool
	cmd        *exec.Cmd
	exited     chan struct{}
}

// URL is the redis:// URL of s.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Options configure the server.
type Options struct {
	// AppendOnly turns on the append-only file with fsync on every write.
	AppendOnly bool
}

// Start runs redis-server until the test ends. It fails the test, with what
// to do, when redis-server is not installed.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed: run 'make deps' (apt-get install -y redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{t: t, Addr: addr, Dir: t.TempDir(), appendOnly: o.AppendOnly}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.Dir, "--save", "", "--daemonize", "no", "--loglevel", "warning"}
	if s.appendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.exited)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer within 10s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL (nothing is flushed but what the AOF
// already has) and waits for it to exit. Killing a stopped server is a no-op.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Restart starts the server again on the same port and directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Client returns a client of s closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// String describes s.
func (s *Server) String() string {
	return fmt.Sprintf("redis-server %s (aof=%s)", s.Addr, strconv.FormatBool(s.appendOnly))
}
