// Package proxytest runs a real HTTP proxy for tests: Debian's tinyproxy,
// on a free loopback port, with its own configuration and log, stopped
// when the test ends.
package proxytest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/relaydev/relay/stream/streamtest"
)

// Proxy is a tinyproxy process.
type Proxy struct {
	t    testing.TB
	Addr string // host:port
	// User and Password are the credentials it asks for, if any.
	User, Password string
	dir            string
	cmd            *exec.Cmd
	exited         chan struct{}
}

// Options configure the proxy.
type Options struct {
	// User and Password make it ask for Basic credentials (407 without).
	User, Password string
}

// Start runs tinyproxy until the test ends. It fails the test, with what
// to do, when tinyproxy is not installed.
func Start(t testing.TB, o Options) *Proxy {
	t.Helper()
	if _, err := exec.LookPath("tinyproxy"); err != nil {
		t.Fatalf("tinyproxy is not installed: run 'make deps' (apt-get install -y tinyproxy)")
	}
	p := &Proxy{t: t, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(streamtest.Port(t))), User: o.User, Password: o.Password, dir: t.TempDir()}
	_, port, _ := net.SplitHostPort(p.Addr)
	conf := fmt.Sprintf("Port %s\nListen 127.0.0.1\nTimeout 30\nLogFile %q\nLogLevel Connect\nMaxClients 200\nAllow 127.0.0.1\n", port, p.logPath())
	if o.User != "" {
		conf += fmt.Sprintf("BasicAuth %s %s\n", o.User, o.Password)
	}
	if err := os.WriteFile(filepath.Join(p.dir, "tinyproxy.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

func (p *Proxy) logPath() string { return filepath.Join(p.dir, "tinyproxy.log") }

// URL is the proxy's URL, with its credentials.
func (p *Proxy) URL() string {
	if p.User != "" {
		return "http://" + p.User + ":" + p.Password + "@" + p.Addr
	}
	return "http://" + p.Addr
}

// Start starts the proxy (again, after Stop) and waits until it accepts
// connections.
func (p *Proxy) Start() {
	p.t.Helper()
	p.cmd = exec.Command("tinyproxy", "-d", "-c", filepath.Join(p.dir, "tinyproxy.conf"))
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start tinyproxy: %v", err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(p.cmd, p.exited)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.exited:
			log, _ := os.ReadFile(p.logPath())
			p.t.Fatalf("tinyproxy on %s exited at start (is the port taken?): %s", p.Addr, log)
		default:
		}
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("tinyproxy on %s did not accept connections in 10s: %v", p.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the proxy and waits for it to exit.
func (p *Proxy) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

var connectLine = regexp.MustCompile(`Request \(file descriptor \d+\): (\S+) (\S+) HTTP/`)

// Requests returns what the proxy was asked, in order, each as "METHOD
// target" ("CONNECT 127.0.0.1:443"), read from its log.
func (p *Proxy) Requests() []string {
	p.t.Helper()
	f, err := os.Open(p.logPath())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := connectLine.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, m[1]+" "+m[2])
		}
	}
	return out
}
