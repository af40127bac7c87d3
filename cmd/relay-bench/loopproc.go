package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// loopRunner is a running minimal loop, in the bench process or in its own.
type loopRunner interface {
	stop() error
}

// loopProc is the minimal loop run as a process of its own
// (relay-bench loop), the way relay runs: it does not share the bench
// process's Go runtime with the embedded NATS server.
type loopProc struct{ *proc }

func (l loopProc) stop() error { return l.proc.stop(40 * time.Second) }

// startLoopRunner starts the minimal loop on dest, in a process of its own
// unless -loop-in-bench.
func (b *bench) startLoopRunner(ctx context.Context, dest string) (loopRunner, *proc, error) {
	if b.opts.loopInBench {
		l, err := b.startLoop(ctx, dest, b.opts.loopWorkers)
		return l, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find own executable to start the minimal loop: %w", err)
	}
	p, stdout, err := startProc("minimal loop ("+dest+")", filepath.Join(b.logDir, "loop-"+dest+".log"), childEnv(), true, self,
		"loop", "-nats-url", b.natsURL, "-url", b.sinkURL(dest), "-dest", dest, "-workers", fmt.Sprint(b.opts.loopWorkers))
	if err != nil {
		return nil, nil, err
	}
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		s, _ := r.ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case s := <-line:
		if s != "ready" {
			_ = p.stop(2 * time.Second)
			if p.exited() {
				return nil, nil, p.exitError()
			}
			return nil, nil, fmt.Errorf("minimal loop printed %q instead of ready", s)
		}
		return loopProc{p}, p, nil
	case <-time.After(30 * time.Second):
		_ = p.stop(2 * time.Second)
		return nil, nil, errors.New("minimal loop did not start within 30s")
	case <-ctx.Done():
		_ = p.stop(2 * time.Second)
		return nil, nil, ctx.Err()
	}
}

// runLoopProc is the hidden "loop" subcommand: the minimal loop until
// SIGTERM, then a clean stop (acks flushed, consumer deleted).
func runLoopProc(args []string) error {
	fs := flag.NewFlagSet("relay-bench loop", flag.ContinueOnError)
	natsURL := fs.String("nats-url", "", "NATS server")
	url := fs.String("url", "", "sink URL to POST to")
	dest := fs.String("dest", "", "destination whose subjects to consume")
	workers := fs.Int("workers", 64, "worker goroutines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *natsURL == "" || *url == "" || *dest == "" || *workers < 1 {
		return errors.New("-nats-url, -url, -dest and -workers >= 1 are required")
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
