package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clkTck is sysconf(_SC_CLK_TCK), the unit of utime and stime in
// /proc/<pid>/stat. It is 100 on every Linux architecture Go supports.
const clkTck = 100

// proc is a child process: relay, the sink or redis-server.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	stdin   io.WriteCloser
	done    chan struct{} // closed when the process has exited
	waitErr error
	// last CPU and peak RSS read while it ran (the numbers vanish with it)
	lastCPU float64
	lastHWM int64
	// metrics is relay's --metrics-addr (relay processes only).
	metrics string
}

// startProc starts name with args, stderr (and stdout unless captured) to
// logPath. The child is killed if the bench dies (Pdeathsig) and its stdin
// is a pipe that closes when the bench exits.
func startProc(name, logPath string, env []string, captureStdout bool, path string, args ...string) (*proc, io.Reader, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stderr = f
	var stdout io.Reader
	if captureStdout {
		stdout, err = cmd.StdoutPipe()
		if err != nil {
			f.Close()
			return nil, nil, err
		}
	} else {
		cmd.Stdout = f
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, logFile: f, stdin: stdin, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, stdout, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError says how p ended, with the tail of its log.
func (p *proc) exitError() error {
	return fmt.Errorf("%s exited early (%v); last lines of %s:\n%s", p.name, p.waitErr, p.logPath, tail(p.logPath, 15))
}

// sample reads p's CPU seconds and peak RSS now, and remembers them.
func (p *proc) sample() (cpu float64, hwmKB int64) {
	if c, err := procCPU(p.pid()); err == nil {
		p.lastCPU = c
	}
	if h, err := procHWM(p.pid()); err == nil {
		p.lastHWM = h
	}
	return p.lastCPU, p.lastHWM
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs. It reports an
// unclean exit of a process that was asked to stop only when it did not
// stop at all.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	p.sample()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s exited with %v after SIGTERM (see %s)", p.name, p.waitErr, p.logPath)
		}
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed it", p.name, grace)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) did not die after SIGKILL", p.name, p.pid())
	}
}

// procCPU is utime+stime of pid in seconds.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

func parseStatCPU(b []byte) (float64, error) {
	// The command name (field 2) may contain spaces; fields resume after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	return float64(ut+st) / clkTck, nil
}

// procHWM is VmHWM (peak resident set) of pid in kB.
func procHWM(pid int) (int64, error) {
	return procStatusKB(pid, "VmHWM:")
}

func procStatusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// selfCPU is this process's CPU seconds (the embedded NATS server and the
// publishers run here, and the minimal loop with -loop-in-bench).
func selfCPU() float64 {
	c, _ := procCPU(os.Getpid())
	return c
}

// systemBusy is the machine's non-idle CPU seconds since boot, all CPUs and
// all processes together (/proc/stat: user, nice, system, irq, softirq,
// steal).
func systemBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, _ := strconv.ParseUint(f[i], 10, 64)
		busy += v
	}
	return float64(busy) / clkTck
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// childEnv is the environment of relay and the sink: this process's, minus
// every RELAY_ variable, so that nothing set in the shell changes relay's
// configuration behind the benchmark's back.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_") {
			env = append(env, kv)
		}
	}
	return env
}

// sinkProc is the sink process and how to talk to it.
type sinkProc struct {
	*proc
	addr string // host:port
}

// startChild starts this binary again as one of its hidden subcommands
// (args[0]), logging to logPath and with its stdout captured.
func startChild(name, logPath string, args ...string) (*proc, io.Reader, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find own executable to start the %s: %w", name, err)
	}
	return startProc(name, logPath, childEnv(), true, self, args...)
}

func startSink(ctx context.Context, logDir string) (*sinkProc, error) {
	p, stdout, err := startChild("sink", filepath.Join(logDir, "sink.log"), "sink", "-addr", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	line, err := firstLine(ctx, p, stdout, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if host, _, err := net.SplitHostPort(line); err != nil || host != "127.0.0.1" {
		return nil, unexpectedLine(p, line, "its 127.0.0.1 address")
	}
	return &sinkProc{proc: p, addr: line}, nil
}

// firstLine reads the first line a child printed on stdout (and discards
// the rest). If none comes within limit, or ctx ends, it stops the child.
func firstLine(ctx context.Context, p *proc, stdout io.Reader, limit time.Duration) (string, error) {
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		s, _ := r.ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case s := <-line:
		return s, nil
	case <-time.After(limit):
		_ = p.stop(2 * time.Second)
		return "", fmt.Errorf("%s printed nothing within %s", p.name, limit)
	case <-ctx.Done():
		_ = p.stop(2 * time.Second)
		return "", ctx.Err()
	}
}

// unexpectedLine stops a child that printed line instead of want, and says
// why: with its log if it exited by itself (no line at all means it closed
// stdout, which it does by exiting).
func unexpectedLine(p *proc, line, want string) error {
	exited := p.exited()
	_ = p.stop(2 * time.Second)
	if exited || line == "" {
		return p.exitError()
	}
	return fmt.Errorf("%s printed %q instead of %s", p.name, line, want)
}

// logErrors says how many ERROR lines a relay process logged so far, and
// the first ("" if none): the report would not show a relay that kept
// failing and recovering (a router restarting, say) otherwise.
func logErrors(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "cannot read relay's log: " + err.Error()
	}
	n, first := 0, ""
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, "level=ERROR") {
			if n++; n == 1 {
				first = strings.TrimSpace(l)
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("relay logged %d ERROR lines (%s); the first: %s", n, path, first)
}
