// Package image tests relay's OCI image (Containerfile here) under podman:
// 'make image-test' builds the image and runs these tests with RELAY_IMAGE
// set; without it they are skipped, so 'make test' does not run them.
package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/stream/streamtest"
	"github.com/relaydev/relay/webhook"
)

// nonRoot is the image's USER.
const nonRoot = 65532

// imageRef is the image under test, or the test is skipped.
func imageRef(t *testing.T) string {
	t.Helper()
	ref := os.Getenv("RELAY_IMAGE")
	if ref == "" {
		t.Skip("RELAY_IMAGE not set: 'make image-test' builds the image and runs these tests")
	}
	return ref
}

// podman runs podman with the settings that work on these machines (runc,
// cgroupfs; CONTAINERS_CONF comes from the Makefile) and returns its
// trimmed output.
func podman(args ...string) (string, error) {
	cmd := exec.Command("podman", append([]string{"--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func mustPodman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podman(args...)
	require.NoError(t, err)
	return out
}

func eventually(t *testing.T, within time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNowf(t, "condition not met in time", msg, args...)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func randName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// gateway is the host's address on the default podman network, which
// containers know as host.containers.internal: a server listening there is
// reachable from the containers and from nowhere else.
func gateway(t *testing.T, network string) string {
	t.Helper()
	var subnets []struct {
		Gateway string `json:"gateway"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustPodman(t, "network", "inspect", network, "--format", "{{json .Subnets}}")), &subnets))
	require.NotEmpty(t, subnets)
	return subnets[0].Gateway
}

// sink is a webhook receiver on the host that verifies each delivery's
// signature and answers 503 while failing is set.
type sink struct {
	secret  string
	failing atomic.Bool
	tries   atomic.Int64
	mu      sync.Mutex
	got     map[string]int // webhook-id: verified deliveries answered 200
	bad     []string       // why requests were refused
	url     string
}

func startSink(t *testing.T, host string) *sink {
	t.Helper()
	s := &sink{secret: webhook.GenerateSecret(), got: map[string]int{}}
	var ln net.Listener
	// The bridge, and so its address, exists once a container runs on it.
	eventually(t, 60*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
		return err == nil
	}, "listen on %s", host)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.tries.Add(1)
		if err := webhook.VerifyRequest(s.secret, r.Header, body, time.Now(), 0); err != nil {
			s.mu.Lock()
			s.bad = append(s.bad, err.Error())
			s.mu.Unlock()
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if s.failing.Load() {
			http.Error(w, "failing", http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		s.got[r.Header.Get(webhook.HeaderID)]++
		s.mu.Unlock()
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	// Containers resolve host.containers.internal to the gateway.
	s.url = "http://host.containers.internal:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	return s
}

// delivered reports whether every id got a verified delivery, and no
// request failed verification.
func (s *sink) delivered(t *testing.T, ids []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Empty(t, s.bad, "deliveries that failed verification")
	for _, id := range ids {
		if s.got[id] == 0 {
			return false
		}
	}
	return true
}

// publisher connects to url and returns a function that publishes an event
// with the given id for destination hooks, again while publishes fail (a
// node may be down or the cluster electing): the id makes a repeat a
// duplicate.
func publisher(t *testing.T, url string) func(id string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	prod, err := publish.NewProducer(context.Background(), js)
	require.NoError(t, err)
	return func(id string) {
		t.Helper()
		var err error
		eventually(t, 120*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = prod.Publish(ctx, publish.Event{Dest: "hooks", ID: id, Data: []byte(`{"id":"` + id + `"}`)})
			return err == nil
		}, "publish %s: %v", id, err)
	}
}

// node is a relay container with its embedded NATS server on a named
// volume, its NATS and metrics ports published on 127.0.0.1.
type node struct {
	t          *testing.T
	image      string
	name       string
	volume     string
	network    string // empty: podman's default network
	natsPort   int
	metrics    int
	extraFlags []string
	env        []string // NAME=VALUE for the container
}

// run starts the container and waits until relay is ready.
func (n *node) run() {
	n.t.Helper()
	n.start()
	n.waitReady()
}

func (n *node) start() {
	n.t.Helper()
	args := []string{"run", "-d", "--name", n.name,
		"-p", fmt.Sprintf("127.0.0.1:%d:4222", n.natsPort),
		"-p", fmt.Sprintf("127.0.0.1:%d:9464", n.metrics),
		"-v", n.volume + ":/data"}
	if n.network != "" {
		args = append(args, "--network", n.network)
	}
	for _, e := range n.env {
		args = append(args, "-e", e)
	}
	args = append(args, n.image, "run")
	mustPodman(n.t, append(args, n.extraFlags...)...)
}

func (n *node) waitReady() {
	n.t.Helper()
	eventually(n.t, 120*time.Second, func() bool { return n.ok("/readyz") }, "%s ready; logs:\n%s", n.name, n.logs())
}

func (n *node) ok(path string) bool {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", n.metrics, path))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (n *node) logs() string {
	out, _ := podman("logs", n.name)
	return out
}

// kill sends SIGKILL to the container's process and removes the container
// (the volume stays).
func (n *node) kill() {
	n.t.Helper()
	mustPodman(n.t, "kill", "--signal", "KILL", n.name)
	eventually(n.t, 60*time.Second, func() bool {
		out, err := podman("inspect", "--format", "{{.State.Running}}", n.name)
		return err == nil && out == "false"
	}, "%s stopped", n.name)
	mustPodman(n.t, "rm", "-f", n.name)
}

// uid is the real uid of the container's main process, read from the
// host's /proc.
func (n *node) uid() int {
	n.t.Helper()
	pid := mustPodman(n.t, "inspect", "--format", "{{.State.Pid}}", n.name)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(n.t, err)
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Uid:" {
			uid, err := strconv.Atoi(f[1])
			require.NoError(n.t, err)
			return uid
		}
	}
	n.t.Fatalf("no Uid line in /proc/%s/status", pid)
	return -1
}

// The image runs 'relay run' as a non-root user on a named volume; a host
// destination gets signed deliveries; killed with SIGKILL and started again
// on the same volume, relay delivers every event published before the kill.
func TestSingleNodeSurvivesKillOnItsVolume(t *testing.T) {
	image := imageRef(t)
	n := &node{t: t, image: image, name: randName("relay-img"), volume: randName("relay-vol"),
		natsPort: streamtest.Port(t), metrics: streamtest.Port(t)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", n.name, n.logs())
		}
		_, _ = podman("rm", "-f", n.name)
		_, _ = podman("volume", "rm", "-f", n.volume)
	})
	mustPodman(t, "volume", "create", n.volume)

	// Deliveries go to the host on the podman bridge, which relay's policy
	// treats as private: allow that one address.
	gw := gateway(t, "podman")
	n.extraFlags = []string{"--allow-net", gw + "/32"}
	n.run()
	require.True(t, n.ok("/healthz"), "/healthz")
	require.Equal(t, nonRoot, n.uid(), "uid of relay in the container")

	s := startSink(t, gw)
	mustPodman(t, "exec", n.name, "relay", "dest", "add", "hooks", "--url", s.url, "--secret", s.secret,
		"--backoff-base", "1s", "--backoff-max", "2s", "--max-attempts", "1000", "--breaker-threshold", "-1")

	pub := publisher(t, fmt.Sprintf("nats://127.0.0.1:%d", n.natsPort))

	pub("first")
	eventually(t, 60*time.Second, func() bool { return s.delivered(t, []string{"first"}) }, "signed delivery of the first event")

	// The destination fails: events wait in the container's JetStream.
	s.failing.Store(true)
	ids := []string{"first"}
	for i := range 20 {
		id := fmt.Sprintf("before-kill-%d", i)
		pub(id)
		ids = append(ids, id)
	}
	tries := s.tries.Load()
	eventually(t, 60*time.Second, func() bool { return s.tries.Load() > tries }, "attempts while failing")
	n.kill()

	s.failing.Store(false)
	n.run()
	require.Equal(t, nonRoot, n.uid(), "uid of relay in the restarted container")
	eventually(t, 120*time.Second, func() bool { return s.delivered(t, ids) }, "every event published before the kill delivered")
}

// Three containers on a podman network whose embedded NATS servers form a
// cluster through routes, streams R3: a destination on the host gets every
// event published while one container is killed with SIGKILL and started
// again on its volume.
func TestThreeNodeClusterLosesNothingWhenANodeIsKilled(t *testing.T) {
	image := imageRef(t)
	network := randName("relay-net")
	mustPodman(t, "network", "create", network)
	t.Cleanup(func() { _, _ = podman("network", "rm", "-f", network) })

	nodes := make([]*node, 3)
	var routes []string
	base := randName("relay-c")
	for i := range nodes {
		nodes[i] = &node{t: t, image: image, name: fmt.Sprintf("%s-%d", base, i+1), volume: randName("relay-vol"),
			network: network, natsPort: streamtest.Port(t), metrics: streamtest.Port(t)}
		routes = append(routes, "--routes", fmt.Sprintf("nats://%s:6222", nodes[i].name))
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if t.Failed() {
				t.Logf("logs of %s:\n%s", n.name, n.logs())
			}
			_, _ = podman("rm", "-f", n.name)
			_, _ = podman("volume", "rm", "-f", n.volume)
		}
	})
	gw := gateway(t, network)
	for _, n := range nodes {
		n.extraFlags = append([]string{"--server-name", n.name, "--cluster-name", "relay", "--replicas", "3",
			"--allow-net", gw + "/32"}, routes...)
		// The routes authenticate, as the chart and docs/deploy.md set them up.
		n.env = []string{"RELAY_CLUSTER_SECRET=image-test-cluster-secret-0123"}
		mustPodman(t, "volume", "create", n.volume)
		n.start()
	}
	for _, n := range nodes {
		n.waitReady()
	}

	s := startSink(t, gw)
	mustPodman(t, "exec", nodes[0].name, "relay", "dest", "add", "hooks", "--url", s.url, "--secret", s.secret,
		"--backoff-base", "1s", "--backoff-max", "2s", "--max-attempts", "1000", "--breaker-threshold", "-1")
	var urls []string
	for _, n := range nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.natsPort))
	}
	pub := publisher(t, strings.Join(urls, ","))

	var ids []string
	publishSome := func(phase string, k int) {
		for i := range k {
			id := fmt.Sprintf("%s-%d", phase, i)
			pub(id)
			ids = append(ids, id)
		}
	}
	publishSome("before", 30)
	eventually(t, 120*time.Second, func() bool { return s.delivered(t, ids) }, "delivered before the kill")

	// Kill a node while events are in flight, publish while it is down,
	// then start it again on its volume.
	publishSome("during", 30)
	nodes[0].kill()
	publishSome("down", 30)
	nodes[0].run()
	publishSome("after", 30)
	eventually(t, 180*time.Second, func() bool { return s.delivered(t, ids) }, "every event delivered")
}
