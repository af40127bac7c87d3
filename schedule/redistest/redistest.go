// Package redistest runs a real redis-server for tests: on a free loopback
// port, in a temporary directory, stopped when the test ends.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/relaydev/relay/stream/streamtest"
)

// Server is a redis-server process.
type Server struct {
	t          testing.TB
	Addr       string // host:port
	Dir        string // its working directory (AOF files)
	appendOnly bool
	replicaOf  string // host:port of its primary, or empty
	cluster    bool
	busPort    string // the cluster bus port, in cluster mode
	cmd        *exec.Cmd
	exited     chan struct{}
}

// URL is the redis:// URL of s.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Options configure the server.
type Options struct {
	// AppendOnly turns on the append-only file with fsync on every write.
	AppendOnly bool
	// ReplicaOf makes the server a replica of this server.
	ReplicaOf *Server
	// Cluster runs the server in cluster mode (see StartCluster).
	Cluster bool
}

// Start runs redis-server until the test ends. It fails the test, with what
// to do, when redis-server is not installed.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed: run 'make deps' (apt-get install -y redis-server)")
	}
	// A port Restart can start the server on again.
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(streamtest.Port(t)))
	s := &Server{t: t, Addr: addr, Dir: dataDir(t, o.AppendOnly), appendOnly: o.AppendOnly, cluster: o.Cluster}
	if o.ReplicaOf != nil {
		s.replicaOf = o.ReplicaOf.Addr
	}
	if o.Cluster {
		// A port of its own: by default the bus takes the port + 10000,
		// which may be in use, or above 65535. Restart reuses it.
		s.busPort = strconv.Itoa(streamtest.Port(t))
	}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

// dataDir is a directory for a server's files, removed when the test ends.
// A server with an append-only file gets one in memory (/dev/shm) where
// there is one: it fsyncs every write, and on a busy disk one fsync can
// outlast a test's wait for a replica (a SIGKILL keeps what was written
// either way).
func dataDir(t testing.TB, appendOnly bool) string {
	if appendOnly {
		if dir, err := os.MkdirTemp("/dev/shm", "redistest-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.Dir, "--save", "", "--daemonize", "no", "--loglevel", "warning",
		"--repl-diskless-sync-delay", "0"} // a replica syncs at once, not after 5s
	if s.appendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"), "--cluster-node-timeout", "2000", "--cluster-port", s.busPort)
	}
	if s.replicaOf != "" {
		host, port, _ := net.SplitHostPort(s.replicaOf)
		args = append(args, "--replicaof", host, port)
	}
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.SysProcAttr = dieWithTest()
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
		select {
		case <-s.exited:
			s.t.Fatalf("redis-server on %s exited at start (is the port taken?)", s.Addr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			// The server that answers must be this one, not another
			// process's on the same port.
			if !strings.Contains(info, "process_id:"+strconv.Itoa(s.cmd.Process.Pid)+"\r\n") {
				s.t.Fatalf("another server answers on %s", s.Addr)
			}
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

// Pause stops the server with SIGSTOP: it holds its connections but
// answers nothing until Resume. A paused replica confirms no writes.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("%s: %v", sig, err)
	}
}

// WaitReplicating waits until the replica s has synchronised with its
// primary and confirms writes: until a WAIT on the primary counts it.
// (Here, for up to about a second after the primary lists a replica
// as online, WAIT can still time out without counting it.)
func (s *Server) WaitReplicating(primary *Server) {
	s.t.Helper()
	ctx := context.Background()
	rc, pc := s.Client(), primary.Client()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ri, rerr := rc.Info(ctx, "replication").Result()
		pi, perr := pc.Info(ctx, "replication").Result()
		if rerr == nil && perr == nil && strings.Contains(ri, "master_link_status:up") &&
			strings.Contains(pi, "connected_slaves:1") && strings.Contains(pi, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s did not start replicating %s within 20s: %v %v\n%s\n%s", s.Addr, primary.Addr, rerr, perr, ri, pi)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		// WAIT counts what this connection wrote: both on one connection.
		pipe := pc.Pipeline()
		pipe.Set(ctx, "{relay}:redistest:probe", "x", 0)
		n := pipe.Do(ctx, "wait", 1, 100)
		_, _ = pipe.Exec(ctx)
		if got, err := n.Int64(); err == nil && got >= 1 {
			pc.Del(ctx, "{relay}:redistest:probe")
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s did not confirm a write of %s within 20s: %v", s.Addr, primary.Addr, n.Err())
		}
	}
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

// Sentinel is a redis-server running as a Sentinel that watches one
// primary, under the name MasterName, and fails it over to a replica
// 500ms after it stops answering (quorum 1).
type Sentinel struct {
	t    testing.TB
	Addr string
	cmd  *exec.Cmd
}

// MasterName is the name a Sentinel started by StartSentinel watches its
// primary under.
const MasterName = "relay-test"

// StartSentinel runs a Sentinel watching primary until the test ends, and
// waits until it knows each of replicas.
func StartSentinel(t testing.TB, primary *Server, replicas ...*Server) *Sentinel {
	t.Helper()
	port := strconv.Itoa(streamtest.Port(t))
	addr := net.JoinHostPort("127.0.0.1", port)
	dir := t.TempDir()
	host, pport, _ := net.SplitHostPort(primary.Addr)
	conf := filepath.Join(dir, "sentinel.conf")
	// A primary is down after 2s without an answer: on a busy machine one
	// late answer to a PING must not fail over a primary that is alive.
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n"+
		"sentinel down-after-milliseconds %s 2000\nsentinel failover-timeout %s 2000\n",
		port, dir, MasterName, host, pport, MasterName, MasterName)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Sentinel{t: t, Addr: addr, cmd: exec.Command("redis-server", conf, "--sentinel", "--loglevel", "warning")}
	s.cmd.SysProcAttr = dieWithTest()
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis sentinel: %v", err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		known := 0
		rs, err := c.Replicas(context.Background(), MasterName).Result()
		for _, r := range replicas {
			for _, m := range rs {
				if m["name"] == r.Addr && !strings.Contains(m["flags"], "down") {
					known++
				}
			}
		}
		if err == nil && known == len(replicas) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis sentinel %s did not come up knowing %d replicas within 20s: %v %v", addr, len(replicas), err, rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the go-redis failover URL of the primary s watches.
func (s *Sentinel) URL() string { return "redis://" + s.Addr + "?master_name=" + MasterName }

// WaitPrimary waits until s names addr as the primary (after a failover).
func (s *Sentinel) WaitPrimary(addr string, within time.Duration) {
	s.t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		got, err := c.GetMasterAddrByName(context.Background(), MasterName).Result()
		if err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == addr {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis sentinel did not name %s the primary within %s: %v %v", addr, within, got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartCluster runs a Redis Cluster of one primary, which serves every
// slot, and one replica of it, and waits until the cluster is up and the
// replica has synchronised.
func StartCluster(t testing.TB) (primary, replica *Server) {
	t.Helper()
	primary = Start(t, Options{Cluster: true})
	replica = Start(t, Options{Cluster: true})
	ctx := context.Background()
	pc, rc := primary.Client(), replica.Client()
	if err := pc.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := rc.Do(ctx, "cluster", "meet", host, port, primary.busPort).Err(); err != nil {
		t.Fatalf("CLUSTER MEET: %v", err)
	}
	id, err := pc.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER MYID: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The replica must know the primary before it can replicate it.
		err = rc.ClusterReplicate(ctx, id).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CLUSTER REPLICATE %s: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		info, err := pc.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not come up within 20s: %v %s", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	replica.WaitReplicating(primary)
	return primary, replica
}

// ClusterURL is the go-redis cluster URL of the nodes.
func ClusterURL(nodes ...*Server) string {
	u := "redis://" + nodes[0].Addr
	for i, n := range nodes[1:] {
		if i == 0 {
			u += "?addr=" + n.Addr
		} else {
			u += "&addr=" + n.Addr
		}
	}
	return u
}
