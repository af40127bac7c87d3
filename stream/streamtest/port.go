package streamtest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Port returns a free loopback TCP port for a server that a test stops and
// starts again on the same port. Ports the kernel hands out (a listener on
// port 0, a client's source port) come from its ephemeral range, and any of
// those sockets can take the port while the server is down; Port picks one
// below that range, which only a socket asking for it by number gets. A
// port is not handed out twice while its test runs, in this process or in
// another test binary running beside it (reserve: a lock held until the
// test ends).
func Port(t testing.TB) int {
	t.Helper()
	lo, hi := 20000, ephemeralLow()
	if hi-lo < 1000 {
		lo = 10000
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if portsGiven[p] {
			continue
		}
		release, ok := reserve(p)
		if !ok {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			release()
			continue
		}
		ln.Close()
		portsGiven[p] = true
		t.Cleanup(func() {
			release()
			portsMu.Lock()
			delete(portsGiven, p)
			portsMu.Unlock()
		})
		return p
	}
	t.Fatalf("no free port in %d-%d", lo, hi-1)
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 10000+1000 {
		return 32768
	}
	return n
}
