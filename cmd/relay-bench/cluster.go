package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
)

// Scenario (r)'s NATS cluster: three "relay-bench nats-node" processes,
// each an embedded nats-server (embedded.Start, as 'relay run
// --cluster-name' embeds it) with JetStream, file storage in a directory
// of its own, and routes to the other two.

// clusterName is the NATS cluster's name.
const clusterName = "relay-bench"

// nodeReadyWithin bounds a node's start: recovering its store, joining the
// cluster and catching up with its streams.
const nodeReadyWithin = 2 * time.Minute

// natsNode is one node of the cluster.
type natsNode struct {
	name      string
	args      []string // its command line: started again with the same directory and ports
	url       string   // nats://127.0.0.1:<client port>
	statsAddr string   // its /varz and /healthz (see runNATSNode)
	p         *proc    // the running process; guarded by natsCluster.mu
	starts    int
	logs      []string // the log of each start
}

// natsCluster is the three nodes, started and stopped by the bench.
type natsCluster struct {
	nodes   []*natsNode
	logDir  string
	hc      *http.Client
	mu      sync.Mutex
	retired float64 // CPU seconds of node processes that ended (killed, stopped)
}

// startCluster starts three nodes with their data in dir/<name> and waits
// until each is healthy (JetStream with a meta leader).
func startCluster(ctx context.Context, dir, logDir string) (c *natsCluster, err error) {
	c = &natsCluster{logDir: logDir, hc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	defer func() {
		if err != nil {
			c.close()
			c = nil
		}
	}()
	const size = 3
	var clientAddrs, clusterAddrs, statsAddrs []string
	for range size {
		for _, l := range []*[]string{&clientAddrs, &clusterAddrs, &statsAddrs} {
			a, err := freeAddr()
			if err != nil {
				return c, err
			}
			*l = append(*l, a)
		}
	}
	routes := make([]string, size)
	for i, a := range clusterAddrs {
		routes[i] = "nats://" + a
	}
	for i := range size {
		name := "r" + strconv.Itoa(i)
		_, port, _ := net.SplitHostPort(clientAddrs[i])
		_, cport, _ := net.SplitHostPort(clusterAddrs[i])
		c.nodes = append(c.nodes, &natsNode{
			name: name, url: "nats://" + clientAddrs[i], statsAddr: statsAddrs[i],
			args: []string{"nats-node", "-name", name, "-dir", filepath.Join(dir, name), "-port", port, "-cluster-port", cport,
				"-routes", strings.Join(routes, ","), "-stats-addr", statsAddrs[i]},
		})
	}
	// All three first: none is healthy before the others are up.
	outs := make([]io.Reader, size)
	for i := range c.nodes {
		if outs[i], err = c.launch(i); err != nil {
			return c, err
		}
	}
	for i := range c.nodes {
		if err := c.ready(ctx, i, outs[i]); err != nil {
			return c, err
		}
	}
	return c, nil
}

// launch starts node i's process.
func (c *natsCluster) launch(i int) (io.Reader, error) {
	n := c.nodes[i]
	logName := "nats-" + n.name + ".log"
	if n.starts > 0 {
		logName = fmt.Sprintf("nats-%s-restart%d.log", n.name, n.starts)
	}
	n.starts++
	n.logs = append(n.logs, filepath.Join(c.logDir, logName))
	p, stdout, err := startChild("NATS node "+n.name, n.logs[len(n.logs)-1], n.args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	n.p = p
	c.mu.Unlock()
	return stdout, nil
}

// ready waits until node i prints its client URL: it is healthy.
func (c *natsCluster) ready(ctx context.Context, i int, stdout io.Reader) error {
	n := c.nodes[i]
	p := c.proc(i)
	line, err := firstLine(ctx, p, stdout, nodeReadyWithin+10*time.Second)
	if err != nil {
		return err
	}
	if line != n.url {
		return unexpectedLine(p, line, "its client URL "+n.url)
	}
	return nil
}

// start starts node i again, with the same directory and ports, and waits
// until it is healthy: it has recovered its store and caught up with the
// cluster.
func (c *natsCluster) start(ctx context.Context, i int) error {
	if p := c.proc(i); p != nil && !p.exited() {
		return fmt.Errorf("NATS node %s is running", c.nodes[i].name)
	}
	out, err := c.launch(i)
	if err != nil {
		return err
	}
	return c.ready(ctx, i, out)
}

func (c *natsCluster) proc(i int) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].p
}

// kill SIGKILLs node i (or, with term set, stops it with SIGTERM) and
// waits until it has exited.
func (c *natsCluster) kill(i int, term bool) error {
	p := c.proc(i)
	if p == nil || p.exited() {
		return fmt.Errorf("NATS node %s is not running", c.nodes[i].name)
	}
	c.mu.Lock()
	cpu, _ := p.sample()
	c.mu.Unlock()
	var err error
	if term {
		err = p.stop(30 * time.Second)
	} else {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			err = fmt.Errorf("%s did not die after SIGKILL", p.name)
		}
	}
	c.mu.Lock()
	c.retired += cpu
	c.mu.Unlock()
	return err
}

// close stops every node still running (SIGTERM, then SIGKILL).
func (c *natsCluster) close() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		if p := c.proc(i); p != nil && !p.exited() {
			wg.Go(func() {
				if err := c.kill(i, true); err != nil {
					fmt.Fprintln(os.Stderr, "relay-bench:", err)
				}
			})
		}
	}
	wg.Wait()
}

// urls is the nodes' client URLs, comma-separated, as --nats-url takes them.
func (c *natsCluster) urls() string {
	u := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		u[i] = n.url
	}
	return strings.Join(u, ",")
}

// index is the index of the node named name, -1 if none is.
func (c *natsCluster) index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// cpu is the CPU seconds the nodes' processes have used, those that ended
// included.
func (c *natsCluster) cpu() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := c.retired
	for _, n := range c.nodes {
		if n.p != nil && !n.p.exited() {
			cpu, _ := n.p.sample()
			sum += cpu
		}
	}
	return sum
}

// nodeStats is what a node's /varz answers.
type nodeStats struct {
	InMsgs     int64  `json:"in_msgs"`
	OutMsgs    int64  `json:"out_msgs"`
	MetaLeader string `json:"meta_leader"`
	// Clients are the names of the client connections to this node.
	Clients []string `json:"clients"`
}

func (c *natsCluster) varz(ctx context.Context, i int) (nodeStats, error) {
	var st nodeStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.nodes[i].statsAddr+"/varz", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// msgs is the messages into and out of the three nodes (clients and
// routes), 0 if a node cannot tell.
func (c *natsCluster) msgs() int64 {
	var sum int64
	for i := range c.nodes {
		st, err := c.varz(context.Background(), i)
		if err != nil {
			return 0
		}
		sum += st.InMsgs + st.OutMsgs
	}
	return sum
}

// metaLeader is the JetStream meta group's leader as the first node that
// answers sees it.
func (c *natsCluster) metaLeader(ctx context.Context) string {
	for i := range c.nodes {
		if p := c.proc(i); p == nil || p.exited() {
			continue
		}
		if st, err := c.varz(ctx, i); err == nil {
			return st.MetaLeader
		}
	}
	return ""
}

// placement says which clients are connected to which node: a delivery
// or an ack between a client and a consumer leader on another node crosses
// a route, which the NATS figures include.
func (c *natsCluster) placement(ctx context.Context) string {
	var parts []string
	for i, n := range c.nodes {
		st, err := c.varz(ctx, i)
		if err != nil {
			parts = append(parts, n.name+": ?")
			continue
		}
		parts = append(parts, n.name+": "+cmp.Or(strings.Join(st.Clients, ", "), "none"))
	}
	return "clients by node: " + strings.Join(parts, "; ")
}

// logs are the log files of every node's every start.
func (c *natsCluster) logs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.logs...)
	}
	return out
}

// nodeLogLayout is the time at the start of a node's log lines
// (log.LstdFlags|log.Lmicroseconds, local time).
const nodeLogLayout = "2006/01/02 15:04:05.000000"

// firstLogAfter is the time of the earliest line of the logs at paths
// that contains needle and was written after after.
func firstLogAfter(paths []string, needle string, after time.Time) (time.Time, bool) {
	var first time.Time
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if len(line) < len(nodeLogLayout) || !strings.Contains(line, needle) {
				continue
			}
			t, err := time.ParseInLocation(nodeLogLayout, line[:len(nodeLogLayout)], time.Local)
			if err != nil || !t.After(after) {
				continue
			}
			if first.IsZero() || t.Before(first) {
				first = t
			}
		}
	}
	return first, !first.IsZero()
}

// healthy reports whether every node runs and its /healthz answers 200:
// it has a meta leader and is current with its streams and consumers.
func (c *natsCluster) healthy(ctx context.Context) (bool, error) {
	for i, n := range c.nodes {
		if p := c.proc(i); p == nil || p.exited() {
			return false, fmt.Errorf("node %s is not running", n.name)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.statsAddr+"/healthz", nil)
		if err != nil {
			return false, err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return false, err
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("node %s: %s", n.name, strings.TrimSpace(string(msg)))
		}
	}
	return true, nil
}

// connectCluster connects to the cluster as relay does: reconnecting
// forever, to any node.
func connectCluster(urls, name string) (*nats.Conn, error) {
	return nats.Connect(urls, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
}

// ensureR3 sets up relay's streams and buckets with 3 replicas, retrying
// while the cluster settles (a meta leader just elected may not answer yet).
func ensureR3(ctx context.Context, js jetstream.JetStream) error {
	return waitFor(ctx, nil, time.Minute, 200*time.Millisecond, "relay's streams set up with 3 replicas", func(ctx context.Context) (bool, error) {
		err := stream.Ensure(ctx, js, relayStreams(3))
		return err == nil, err
	})
}

// runNATSNode is the hidden "nats-node" subcommand: one node of scenario
// (r)'s cluster. It prints its client URL on the first line of stdout once
// healthy (nats-server's /healthz: JetStream has a meta leader and this node
// is current with its streams and consumers), serves /varz (its message
// counts and the meta leader) and /healthz on -stats-addr, and runs until
// SIGTERM/SIGINT or until its stdin closes (the bench went away). Started
// again with the same -dir and ports, it recovers its store and rejoins.
func runNATSNode(args []string) error {
	fs := flag.NewFlagSet("relay-bench nats-node", flag.ContinueOnError)
	name := fs.String("name", "", "server name, unique in the cluster")
	dir := fs.String("dir", "", "data directory (JetStream in <dir>/jetstream)")
	port := fs.Int("port", 0, "client port on 127.0.0.1")
	cport := fs.Int("cluster-port", 0, "cluster port on 127.0.0.1")
	routes := fs.String("routes", "", "the cluster URLs of every node, comma-separated")
	statsAddr := fs.String("stats-addr", "", "loopback address to serve /varz and /healthz on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *dir == "" || *port < 1 || *cport < 1 || *routes == "" || *statsAddr == "" {
		return errors.New("-name, -dir, -port, -cluster-port, -routes and -stats-addr are required")
	}
	if host, _, err := net.SplitHostPort(*statsAddr); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("-stats-addr %q: give a loopback address", *statsAddr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	lg := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	s, err := embedded.StartContext(ctx, embedded.Config{
		DataDir: *dir, Host: "127.0.0.1", Port: *port, Name: *name,
		ClusterName: clusterName, ClusterPort: *cport, Routes: strings.Split(*routes, ","),
		Logf: lg.Printf,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	ln, err := net.Listen("tcp", *statsAddr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /varz", func(w http.ResponseWriter, _ *http.Request) {
		v, err := s.Varz(nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		st := nodeStats{InMsgs: v.InMsgs, OutMsgs: v.OutMsgs}
		if v.JetStream.Meta != nil {
			st.MetaLeader = v.JetStream.Meta.Leader
		}
		if cz, err := s.Connz(&server.ConnzOptions{Limit: 1000}); err == nil {
			for _, ci := range cz.Conns {
				st.Clients = append(st.Clients, cmp.Or(ci.Name, "(unnamed)"))
			}
			slices.Sort(st.Clients)
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := s.Healthz(nil)
		w.WriteHeader(h.StatusCode)
		fmt.Fprintln(w, h.Status, h.Error)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	deadline := time.Now().Add(nodeReadyWithin)
	for {
		h := s.Healthz(nil)
		if h.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy within %s: %s %s", nodeReadyWithin, h.Status, h.Error)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	lg.Printf("healthy: %s", s.ClientURL())
	fmt.Println(s.ClientURL())
	<-ctx.Done()
	return nil
}
