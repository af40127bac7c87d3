//go:build linux

package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/relaydev/relay/destination"
)

// startAPIProc runs 'relay run --api-addr' with args against e's server,
// with a publish key, and returns it with the API's base URL (…/v1), the
// address of /healthz and the key.
func startAPIProc(t *testing.T, e *env, args ...string) (p *proc, base, ops, key string) {
	t.Helper()
	code, out := e.relayCLI("api-key", "create", "--name", "svc", "--scope", "publish")
	require.Equal(t, 0, code, out)
	key = regexp.MustCompile(`relay_[0-9a-f]{16}_\S+`).FindString(out)
	require.NotEmpty(t, key, out)
	p = startProc(t, append([]string{"--nats-url", e.url, "run", "--api-addr", "127.0.0.1:0"}, args...)...)
	eventually(t, 20*time.Second, func() bool {
		m, o := apiURLRE.FindStringSubmatch(p.output()), faultOpsAddrRE.FindStringSubmatch(p.output())
		if m != nil && o != nil {
			base, ops = m[1], o[1]
		}
		return m != nil && o != nil && p.logged("relay running")
	}, "relay serves the API:\n%s", p.output())
	return p, base, ops, key
}

// openFiles counts the descriptors process pid holds.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	require.NoError(t, err)
	return len(fds)
}

// getOnce sends one GET for path on c and reads the whole answer from br,
// leaving c open (keep-alive); it fails the test unless the answer is a
// 200 that came within the connection's deadline.
func getOnce(t *testing.T, c net.Conn, br *bufio.Reader, path string) {
	t.Helper()
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: relay\r\n\r\n", path)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Idle keep-alive connections to the API, far more than --api-max-conns
// and than relay's open-files limit allows, take down neither the API nor
// the rest of relay: relay closes the longest idle to accept new ones, its
// descriptors stay within the cap, and a publish and /healthz are answered
// while the client holds them all. Without the cap relay ran out of
// descriptors ('accept4: too many open files'), and stopped answering both.
func TestIdleAPIConnectionsDoNotExhaustRelaysDescriptors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t, nil)
	e.addDest(destination.Destination{Name: "held-open", URL: s.URL})
	const maxConns, held = 20, 300
	p, base, ops, key := startAPIProc(t, e, "--api-max-conns", strconv.Itoa(maxConns))
	pid := p.cmd.Process.Pid
	// A hard limit, as 'ulimit -n 256' sets it: relay cannot raise it, and
	// the connections held below would take every descriptor it allows.
	require.NoError(t, unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 256, Max: 256}, nil))
	before := openFiles(t, pid)
	require.Greater(t, before+held, 256, "the connections held must be more than the limit allows")

	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	most := 0
	for i := range held {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
		getOnce(t, c, bufio.NewReader(c), "/v1/openapi.json")
		most = max(most, openFiles(t, pid))
		if i%50 == 0 {
			t.Logf("%d connections held, relay has %d descriptors open", i+1, openFiles(t, pid))
		}
	}
	// The cap, and the one connection accepted while relay closes an idle
	// one for it; a few more for what relay opens meanwhile.
	require.LessOrEqual(t, most, before+maxConns+1+5, "relay's descriptors with %d connections held (%d before)", held, before)

	client := &http.Client{Timeout: 30 * time.Second}
	req, err := http.NewRequest("POST", base+"/events", strings.NewReader(`{"dest":"held-open","data":{"while":"held"}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "evt-held-1")
	resp, err := client.Do(req)
	require.NoError(t, err, "a publish while %d idle connections are held", held)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	resp, err = client.Get("http://" + ops + "/healthz")
	require.NoError(t, err, "/healthz while %d idle connections are held", held)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	eventually(t, 20*time.Second, func() bool { return s.delivered()["evt-held-1"] == 1 }, "delivered")
	require.False(t, p.logged("too many open files"), "relay ran out of descriptors:\n%s", p.output())
}

// A sign-in form that stalls half-way is answered 408 and its connection
// closed once --api-body-timeout has passed; a keep-alive connection with
// no request is closed after --api-idle-timeout. Before, relay waited for
// both for ever.
func TestAPIServerCutsStalledAndIdleConnections(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, base, _, _ := startAPIProc(t, e, "--api-body-timeout", "1s", "--api-idle-timeout", "1s")
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
		return c, bufio.NewReader(c)
	}
	closedByRelay := func(br *bufio.Reader, what string) {
		t.Helper()
		_, err := br.ReadByte()
		require.Error(t, err)
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%s: relay did not close the connection within a minute", what)
	}

	c, br := dial()
	// 10 of the 100 bytes announced, then nothing.
	_, err := io.WriteString(c, "POST /ui/login HTTP/1.1\r\nHost: relay\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nkey=relay_")
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no answer to a stalled sign-in form")
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	require.Contains(t, string(page), "did not arrive in time")
	closedByRelay(br, "a stalled sign-in form")

	c, br = dial()
	getOnce(t, c, br, "/ui/login")
	closedByRelay(br, "an idle connection")
}
