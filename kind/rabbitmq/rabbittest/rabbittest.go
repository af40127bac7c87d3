// Package rabbittest runs real RabbitMQ brokers (Debian's rabbitmq-server)
// for tests: each on free loopback ports, with its own Erlang port mapper,
// node name and data directory, so that parallel test binaries do not
// meet. A broker can be killed (kill -9) and started again on the same
// ports with the same data: what it confirmed before is still there.
//
// A broker takes seconds to start: Start gives a test one of its own (to
// stop and restart), Shared gives every test of a binary the same one, each
// test with an exchange and a queue of its own.
package rabbittest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relaydev/relay/kind"
)

const (
	// Username and Password are the broker's user: RabbitMQ's default
	// guest, allowed from anywhere (loopback_users = none).
	Username = "guest"
	Password = "guest"

	// startTimeout bounds a broker's start, waitTimeout a WaitFor.
	startTimeout = 2 * time.Minute
	waitTimeout  = 30 * time.Second
)

// serverPaths are where rabbitmq-server is looked for: Debian's script
// (not /usr/sbin's wrapper, which switches to the rabbitmq user), then
// $PATH.
var serverPaths = []string{"/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server"}

// Received is a message read back from a queue.
type Received struct {
	Body         []byte
	Exchange     string
	RoutingKey   string
	Headers      map[string]any
	MessageID    string
	Type         string
	ContentType  string
	AppID        string
	Timestamp    time.Time
	DeliveryMode uint8
}

// Server is a RabbitMQ broker as a test sees it: the broker, and the
// exchange and queue (a topic exchange bound with "#" to a durable queue)
// that Config, Messages and WaitFor are about.
type Server struct {
	t      testing.TB
	b      *broker
	shared bool
	target *Target
}

// Target is an exchange and the queue bound to it with "#": what one
// destination publishes to, and what arrived there.
type Target struct {
	s        *Server
	Exchange string
	Queue    string

	mu  sync.Mutex
	got []Received
}

// broker is one rabbitmq-server node and its epmd.
type broker struct {
	dir      string
	node     string
	amqpPort int
	distPort int
	epmdPort int
	server   string // rabbitmq-server's path
	epmdPath string
	names    atomic.Int64

	mu      sync.Mutex
	proc    *exec.Cmd // beam.smp (the script execs it), nil when stopped
	stdin   *os.File  // the write end of its stdin: closing it ends the node
	epmd    *exec.Cmd
	logs    *os.File
	started time.Duration // how long the last start took
}

var shared struct {
	once sync.Once
	b    *broker
	err  error
}

// Start starts a broker of the test's own, on free loopback ports,
// stopped and removed at the test's end. Its target is exchange and
// queue "relay".
func Start(t testing.TB) *Server {
	t.Helper()
	b, err := newBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.remove)
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, b: b}
	s.target = s.declare(t, "relay")
	return s
}

// Shared returns the test binary's shared broker, started at the first
// call, with an exchange and a queue of the test's own as its target. It
// cannot be stopped or restarted. It ends with the test binary (its stdin
// closes); StopShared, from TestMain, also removes its files.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() {
		b, err := newBroker()
		if err == nil {
			if err = b.start(); err != nil {
				b.remove()
			}
		}
		shared.b, shared.err = b, err
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	s := &Server{t: t, b: shared.b, shared: true}
	s.target = s.NewTarget(t)
	return s
}

// StopShared kills the shared broker, if one was started, and removes its
// files. Call it once the tests are over (goleak.Cleanup in TestMain).
func StopShared() {
	if shared.b != nil {
		shared.b.remove()
	}
}

// URL is the broker's amqp:// URL, without credentials.
func (s *Server) URL() string { return "amqp://" + s.Addr() }

// Addr is the broker's AMQP address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.b.amqpPort)) }

// StartupTime is how long the broker's last start took, until it accepted
// AMQP connections.
func (s *Server) StartupTime() time.Duration {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.b.started
}

// Config is a rabbitmq destination's configuration for the server's
// target, routing by event type.
func (s *Server) Config() kind.Config { return s.target.Config() }

// Target is the exchange and queue Config, Messages and WaitFor are about.
func (s *Server) Target() *Target { return s.target }

// Messages returns every message that arrived in the target's queue.
func (s *Server) Messages(t testing.TB) []Received { return s.target.Messages(t) }

// WaitFor waits until n messages arrived in the target's queue, and
// returns them all.
func (s *Server) WaitFor(t testing.TB, n int) []Received { return s.target.WaitFor(t, n) }

// NewTarget declares an exchange and a queue of their own, named alike.
func (s *Server) NewTarget(t testing.TB) *Target {
	t.Helper()
	return s.declare(t, "relay-"+strconv.FormatInt(s.b.names.Add(1), 10))
}

// Stop kills the broker (kill -9) and its epmd, as a crash would.
func (s *Server) Stop() {
	s.t.Helper()
	if s.shared {
		s.t.Fatal("rabbittest: the shared broker cannot be stopped: use Start")
	}
	s.b.stop()
}

// Restart starts the broker again (killing it first if it runs) on the
// same ports, with the same node name and data.
func (s *Server) Restart() {
	s.t.Helper()
	if s.shared {
		s.t.Fatal("rabbittest: the shared broker cannot be restarted: use Start")
	}
	s.b.stop()
	if err := s.b.start(); err != nil {
		s.t.Fatal(err)
	}
}

// declare declares a durable topic exchange and a durable queue named
// name, bound with "#".
func (s *Server) declare(t testing.TB, name string) *Target {
	t.Helper()
	err := s.b.with(func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(name, "#", name, false, nil)
	})
	if err != nil {
		t.Fatalf("rabbittest: declare %s: %v", name, err)
	}
	return &Target{s: s, Exchange: name, Queue: name}
}

// Config is a rabbitmq destination's configuration publishing to the
// target's exchange, routing by event type.
func (tg *Target) Config() kind.Config {
	return kind.Config{
		"url":      tg.s.URL(),
		"username": Username,
		"password": Password,
		"exchange": tg.Exchange,
	}
}

// Messages returns every message that arrived in the target's queue: it
// takes (and acknowledges) what the queue holds, and keeps it with what
// it took before.
func (tg *Target) Messages(t testing.TB) []Received {
	t.Helper()
	got, err := tg.drain()
	if err != nil {
		t.Fatalf("rabbittest: read queue %s: %v", tg.Queue, err)
	}
	return got
}

// WaitFor waits until n messages arrived in the target's queue, and
// returns them all (n or more).
func (tg *Target) WaitFor(t testing.TB, n int) []Received {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := tg.drain()
		if err == nil && len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("rabbittest: %d of %d messages in queue %s after %s (last error: %v)", len(got), n, tg.Queue, waitTimeout, err)
		}
		<-tick.C
	}
}

func (tg *Target) drain() ([]Received, error) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	err := tg.s.b.with(func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(tg.Queue, false)
			if err != nil || !ok {
				return err
			}
			tg.got = append(tg.got, Received{
				Body:         d.Body,
				Exchange:     d.Exchange,
				RoutingKey:   d.RoutingKey,
				Headers:      map[string]any(d.Headers),
				MessageID:    d.MessageId,
				Type:         d.Type,
				ContentType:  d.ContentType,
				AppID:        d.AppId,
				Timestamp:    d.Timestamp,
				DeliveryMode: d.DeliveryMode,
			})
			if err := d.Ack(false); err != nil {
				return err
			}
		}
	})
	return append([]Received(nil), tg.got...), err
}

func newBroker() (*broker, error) {
	server := ""
	for _, p := range serverPaths {
		if path, err := exec.LookPath(p); err == nil {
			server = path
			break
		}
	}
	if server == "" {
		return nil, errors.New("rabbitmq-server is not installed: run make deps")
	}
	epmd, err := exec.LookPath("epmd")
	if err != nil {
		return nil, errors.New("epmd (Erlang) is not installed: run make deps")
	}
	dir, err := os.MkdirTemp("", "rabbittest-")
	if err != nil {
		return nil, err
	}
	b := &broker{dir: dir, server: server, epmdPath: epmd}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	b.node = "rabbit-" + hex.EncodeToString(suffix) + "@localhost"
	for _, port := range []*int{&b.amqpPort, &b.distPort, &b.epmdPort} {
		if *port, err = freePort(); err != nil {
			b.remove()
			return nil, err
		}
	}
	files := map[string]string{
		// disk_free_limit: a nearly full disk must not block publishers.
		"rabbitmq.conf":       "loopback_users = none\ndisk_free_limit.absolute = 1MB\nlog.console.level = warning\n",
		"enabled_plugins":     "[].\n",
		"rabbitmq-env.conf":   "",
		"advanced.config":     "[].\n",
		"rabbitmq-server.log": "",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			b.remove()
			return nil, err
		}
	}
	return b, nil
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// env is the broker's environment: the caller's without its RabbitMQ and
// Erlang settings, and the broker's own.
func (b *broker) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "ERL_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(env,
		"HOME="+b.dir, // the Erlang cookie
		"RABBITMQ_NODENAME="+b.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(b.amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(b.distPort),
		"ERL_EPMD_PORT="+strconv.Itoa(b.epmdPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(b.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(b.dir, "log"),
		"RABBITMQ_LOGS=-",
		"RABBITMQ_CONFIG_FILE="+filepath.Join(b.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(b.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(b.dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(b.dir, "rabbitmq-env.conf"),
		// The node must not start an epmd of its own, which would outlive it.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-start_epmd false",
		// The script then execs the VM instead of running it in the
		// background: the process started is the node itself (kill -9 is
		// a crash), and it ends when its stdin closes (when the test
		// binary ends, however it ends).
		"RABBITMQ_ALLOW_INPUT=true",
	)
}

// start starts epmd and the node, and waits until the node accepts AMQP
// connections.
func (b *broker) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	begin := time.Now()
	var err error
	if b.logs == nil {
		if b.logs, err = os.OpenFile(filepath.Join(b.dir, "rabbitmq-server.log"), os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return err
		}
	}

	b.epmd = exec.Command(b.epmdPath, "-port", strconv.Itoa(b.epmdPort))
	b.epmd.Stdout, b.epmd.Stderr = b.logs, b.logs
	// epmd ends with the test binary, however it ends.
	b.epmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := b.epmd.Start(); err != nil {
		b.epmd = nil
		return fmt.Errorf("rabbittest: start epmd: %w", err)
	}
	if err := b.await(b.epmd, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b.epmdPort)), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		b.kill()
		return fmt.Errorf("rabbittest: epmd: %w", err)
	}

	stdin, w, err := os.Pipe()
	if err != nil {
		b.kill()
		return err
	}
	b.proc = exec.Command(b.server)
	b.proc.Dir = b.dir
	b.proc.Env = b.env()
	b.proc.Stdin, b.proc.Stdout, b.proc.Stderr = stdin, b.logs, b.logs
	// No Pdeathsig: the closing stdin ends the node with the test binary.
	b.proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = b.proc.Start()
	stdin.Close()
	if err != nil {
		w.Close()
		b.proc = nil
		b.kill()
		return fmt.Errorf("rabbittest: start rabbitmq-server: %w", err)
	}
	b.stdin = w
	if err := b.await(b.proc, func() error {
		conn, err := b.dial()
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		b.kill()
		return fmt.Errorf("rabbittest: rabbitmq-server %s did not start: %w\n%s", b.node, err, b.logTail())
	}
	b.started = time.Since(begin)
	return nil
}

// await polls ready until it succeeds, cmd's process ends or startTimeout
// passes.
func (b *broker) await(cmd *exec.Cmd, ready func() error) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if exited(cmd.Process.Pid) {
			return fmt.Errorf("%s exited", filepath.Base(cmd.Path))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", startTimeout, err)
		}
		<-tick.C
	}
}

// exited reports whether process pid (a child not yet waited for) ended:
// /proc says it is a zombie. Waiting for it would take a goroutine that
// outlives the tests of the shared broker.
func exited(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may have spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}

// stop kills the node and epmd.
func (b *broker) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.kill()
}

// kill kills (-9) the node's and epmd's process groups, and reaps them.
func (b *broker) kill() {
	for _, cmd := range []*exec.Cmd{b.proc, b.epmd} {
		if cmd == nil {
			continue
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	b.proc, b.epmd = nil, nil
	if b.stdin != nil {
		b.stdin.Close()
		b.stdin = nil
	}
}

// remove kills the broker and removes its files.
func (b *broker) remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.kill()
	if b.logs != nil {
		b.logs.Close()
		b.logs = nil
	}
	os.RemoveAll(b.dir)
}

// dial connects to the node as guest.
func (b *broker) dial() (*amqp.Connection, error) {
	url := "amqp://" + Username + ":" + Password + "@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(b.amqpPort)) + "/"
	return amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
}

// with runs f on a channel of a connection of its own.
func (b *broker) with(f func(ch *amqp.Channel) error) error {
	conn, err := b.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return f(ch)
}

// logTail is the end of the node's output, for a failed start.
func (b *broker) logTail() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "rabbitmq-server.log"))
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}
