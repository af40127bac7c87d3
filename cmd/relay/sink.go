package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaydev/relay/webhook"

	"github.com/urfave/cli/v2"
)

func sinkCommand() *cli.Command {
	return &cli.Command{
		Name:  "sink",
		Usage: "run a webhook receiver that prints each delivery (for trying relay out and for tests)",
		Description: `Answers every POST with --status (default 200), prints one line per request,
and verifies Standard Webhooks signatures when given --secret (v1, HMAC) or
--public-key (v1a, Ed25519) (a bad or missing signature is answered with 401). --fail-first N answers the first N requests of
each webhook-id with --fail-status instead; --delay D waits before answering.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8080", Usage: "address to listen on"},
			&cli.StringFlag{Name: "secret", EnvVars: []string{"RELAY_SINK_SECRET"}, Usage: "verify v1 signatures with this whsec_ secret"},
			&cli.StringFlag{Name: "public-key", EnvVars: []string{"RELAY_SINK_PUBLIC_KEY"}, Usage: "verify v1a (Ed25519) signatures with this whpk_ public key ('relay dest show' prints it)"},
			&cli.IntFlag{Name: "status", Value: 200, Usage: "status to answer with"},
			&cli.IntFlag{Name: "fail-first", Usage: "answer the first N requests of each webhook-id with --fail-status"},
			&cli.IntFlag{Name: "fail-status", Value: 503, Usage: "status of the --fail-first answers"},
			&cli.StringFlag{Name: "retry-after", Usage: "Retry-After header to send with failing answers"},
			&cli.DurationFlag{Name: "delay", Usage: "wait this long before answering"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per request, with its headers"},
		},
		Action: action(readSink),
	}
}

// sinkOpts are the options of 'relay sink'.
type sinkOpts struct {
	addr, secret, retryAfter      string
	publicKey                     string
	status, failFirst, failStatus int
	delay                         time.Duration
	json                          bool
}

func readSink(c *cli.Context) *sinkOpts {
	return &sinkOpts{addr: c.String("addr"), secret: c.String("secret"), publicKey: c.String("public-key"), retryAfter: c.String("retry-after"),
		status: c.Int("status"), failFirst: c.Int("fail-first"), failStatus: c.Int("fail-status"),
		delay: c.Duration("delay"), json: c.Bool("json")}
}

func (o *sinkOpts) Validate() error {
	for _, f := range []struct {
		name   string
		status int
	}{{"status", o.status}, {"fail-status", o.failStatus}} {
		if f.status < 200 || f.status > 599 {
			return usagef("--%s %d: give an HTTP status from 200 to 599", f.name, f.status)
		}
	}
	if o.secret != "" && o.publicKey != "" {
		return usagef("--secret and --public-key exclude each other: give the one the destination signs with")
	}
	if o.secret != "" {
		if err := webhook.ValidateSecret(o.secret); err != nil {
			// Every request would be answered 401 signature=invalid.
			return usagef("--secret: %v", err)
		}
	}
	if o.publicKey != "" {
		if err := webhook.ValidatePublicKey(o.publicKey); err != nil {
			return usagef("--public-key: %v", err)
		}
	}
	return nil
}

// Run serves until ctx ends.
func (o *sinkOpts) Run(ctx context.Context, e *env) error {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("sink: listen on %s: %w", o.addr, err)
	}
	s := &sink{
		out: e.out, secret: cmp.Or(o.secret, o.publicKey), status: o.status,
		failFirst: o.failFirst, failStatus: o.failStatus,
		retryAfter: o.retryAfter, delay: o.delay,
		asJSON: o.json, seen: map[string]int{},
	}
	fmt.Fprintf(e.errOut, "sink listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type sink struct {
	out io.Writer
	// secret is the whsec_ secret or the whpk_ public key signatures are
	// verified with (webhook.Verify takes either).
	secret     string
	status     int
	failFirst  int
	failStatus int
	retryAfter string
	delay      time.Duration
	asJSON     bool

	mu   sync.Mutex
	seen map[string]int // webhook-id -> requests so far
}

// sinkRecord is one printed request.
type sinkRecord struct {
	Time      time.Time `json:"time"`
	ID        string    `json:"id"`
	Timestamp string    `json:"timestamp"`
	Attempt   int       `json:"attempt"` // requests of this id so far, this one included
	Signature string    `json:"signature"`
	Status    int       `json:"status"`
	Body      string    `json:"body"`
	// Headers are the request's headers, canonical names, the values of a
	// repeated one joined with ", " (webhook-* and the destination's own).
	Headers map[string]string `json:"headers"`
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("webhook-id")
	s.mu.Lock()
	s.seen[id]++
	n := s.seen[id]
	s.mu.Unlock()
	rec := sinkRecord{Time: time.Now().UTC(), ID: id, Timestamp: r.Header.Get("webhook-timestamp"), Attempt: n, Body: string(body), Signature: "unchecked",
		Headers: make(map[string]string, len(r.Header))}
	for k, vs := range r.Header {
		rec.Headers[k] = strings.Join(vs, ", ")
	}
	status := s.status
	if s.secret != "" {
		ts, _ := strconv.ParseInt(rec.Timestamp, 10, 64)
		if err := webhook.Verify(s.secret, id, ts, body, r.Header.Get("webhook-signature")); err != nil {
			rec.Signature = "invalid"
			status = http.StatusUnauthorized
		} else {
			rec.Signature = "valid"
		}
	}
	if n <= s.failFirst && status < 300 {
		status = s.failStatus
	}
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-r.Context().Done():
		}
	}
	rec.Status = status
	s.mu.Lock()
	if s.asJSON {
		b, _ := json.Marshal(rec)
		fmt.Fprintf(s.out, "%s\n", b)
	} else {
		fmt.Fprintf(s.out, "%s  %s  attempt=%d  signature=%s  -> %d  %s\n", rec.Time.Format("15:04:05.000"), id, n, rec.Signature, status, body)
	}
	s.mu.Unlock()
	if status >= 300 && s.retryAfter != "" {
		w.Header().Set("Retry-After", s.retryAfter)
	}
	w.WriteHeader(status)
}
