package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/relaydev/relay/stream/embedded"
)

// loopRunner is a running minimal loop, in the bench process or in its own.
type loopRunner interface {
	stop() error
}

// loopProc is the minimal loop run as a process of its own
// (relay-bench loop), the way relay runs: it does not share the bench
// process's Go runtime with the embedded NATS server.
type loopProc struct{ *proc }

// stop gives the loop 45s: its workers may take 30s to finish, its consumer
// deletion 10s.
func (l loopProc) stop() error { return l.proc.stop(45 * time.Second) }

// startLoopRunner starts the minimal loop on dest, in a process of its own
// unless -loop-in-bench.
func (b *bench) startLoopRunner(ctx context.Context, dest string) (loopRunner, *proc, error) {
	if b.opts.loopInBench {
		l, err := b.startLoop(ctx, dest, b.opts.loopWorkers)
		return l, nil, err
	}
	args := []string{"loop", "-nats-url", b.natsURL, "-url", b.sinkURL(dest), "-dest", dest, "-workers", fmt.Sprint(b.opts.loopWorkers)}
	if b.opts.loopCPUProf != "" {
		args = append(args, "-cpuprofile", b.opts.loopCPUProf+"."+dest)
	}
	p, err := startReady(ctx, "minimal loop ("+dest+")", filepath.Join(b.logDir, "loop-"+dest+".log"), args...)
	if err != nil {
		return nil, nil, err
	}
	return loopProc{p}, p, nil
}

// runLoopProc is the hidden "loop" subcommand: the minimal loop until
// SIGTERM, then a clean stop (acks flushed, consumer deleted).
func runLoopProc(args []string) error {
	fs := flag.NewFlagSet("relay-bench loop", flag.ContinueOnError)
	natsURL := fs.String("nats-url", "", "NATS server")
	url := fs.String("url", "", "sink URL to POST to")
	dest := fs.String("dest", "", "destination whose subjects to consume")
	workers := fs.Int("workers", 64, "worker goroutines")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process to this file")
	embeddedDir := fs.String("embedded-dir", "", "instead of -nats-url: start an embedded NATS server on this data directory, as relay run does")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*natsURL == "") == (*embeddedDir == "") || *url == "" || *dest == "" || *workers < 1 {
		return errors.New("-nats-url or -embedded-dir, -url, -dest and -workers >= 1 are required")
	}
	if *embeddedDir != "" {
		s, err := embedded.Start(embedded.Config{DataDir: *embeddedDir, Port: -1})
		if err != nil {
			return err
		}
		defer func() {
			s.Shutdown()
			s.WaitForShutdown()
		}()
		*natsURL = s.ClientURL()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := startLoop(ctx, *natsURL, *url, *dest, *workers)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	return l.stop()
}

// startRedisSender starts the sequential Redis-list sender (baseline 2) as
// a process of its own and waits until it has connected.
func (b *bench) startRedisSender(ctx context.Context, addr, key string, n int) (*proc, error) {
	return startReady(ctx, "redis sender", filepath.Join(b.logDir, "redis-sender.log"),
		"redis-sender", "-redis", addr, "-key", key, "-url", b.sinkURL("redis"), "-n", fmt.Sprint(n))
}

// startReady starts a child (startChild) and waits until it prints "ready".
func startReady(ctx context.Context, name, logPath string, args ...string) (*proc, error) {
	p, stdout, err := startChild(name, logPath, args...)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, p, stdout); err != nil {
		return nil, err
	}
	return p, nil
}

// waitReady waits for the child's first line of stdout, "ready".
func waitReady(ctx context.Context, p *proc, stdout io.Reader) error {
	line, err := firstLine(ctx, p, stdout, 30*time.Second)
	if err != nil {
		return err
	}
	if line != "ready" {
		return unexpectedLine(p, line, "ready")
	}
	return nil
}

// runRedisSender is the hidden "redis-sender" subcommand: BRPOP one event,
// POST it, repeat, until n are delivered; then it waits for SIGTERM so that
// the bench can read its CPU.
func runRedisSender(args []string) error {
	fs := flag.NewFlagSet("relay-bench redis-sender", flag.ContinueOnError)
	addr := fs.String("redis", "", "redis-server address")
	key := fs.String("key", "", "list to BRPOP from")
	url := fs.String("url", "", "sink URL to POST to")
	n := fs.Int("n", 0, "events to deliver")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" || *key == "" || *url == "" || *n < 1 {
		return errors.New("-redis, -key, -url and -n >= 1 are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1})
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", *addr, err)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	defer client.CloseIdleConnections()
	fmt.Println("ready")
	for done := 0; done < *n; {
		v, err := rc.BRPop(ctx, time.Second, *key).Result()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("the list ran dry after %d of %d", done, *n)
		}
		if err != nil {
			return fmt.Errorf("BRPOP: %w", err)
		}
		id, body, _ := strings.Cut(v[1], "\n")
		st, err := post(client, *url, id, []byte(body))
		if err != nil || st < 200 || st > 299 {
			// Put it back at the tail it came from and try again.
			if perr := rc.RPush(ctx, *key, v[1]).Err(); perr != nil {
				return fmt.Errorf("requeue: %w", perr)
			}
			continue
		}
		done++
	}
	<-ctx.Done()
	return nil
}
