package pubsub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/relaydev/relay/kind"
)

const (
	// publishDelay is how long the client gathers messages into one
	// Publish request.
	publishDelay = 5 * time.Millisecond
	// bundleTimeout bounds one request of the client, its retries
	// included. The client sends with a context of its own, so a request
	// may outlive the attempt that asked for it: at most this long.
	bundleTimeout = time.Minute
)

// settings is a checked configuration.
type settings struct {
	project     string
	topic       string
	credentials []byte
	endpoint    string
	ordering    bool
}

// publisher publishes through one client, created in the background (it
// may have to find Application Default Credentials, which can take seconds
// on a machine that is not on Google Cloud).
type publisher struct {
	cfg  settings
	name string // projects/P/topics/T
	env  kind.Env

	mu      sync.Mutex
	closed  bool
	client  *pubsub.Client
	pub     *pubsub.Publisher
	pending *connecting // the connection being made, nil if none

	// wg counts the goroutines Close waits for: connect and the watchers of
	// results that an attempt stopped waiting for.
	wg sync.WaitGroup

	// last is the client's latest failed request, which an attempt that
	// ran out of time reports.
	last atomic.Pointer[failure]
}

// connecting is one attempt at creating the client.
type connecting struct {
	done chan struct{}
	err  error // set before done is closed
}

type failure struct {
	at  time.Time
	err error
}

// errConnect marks an error creating the client (no credentials found).
type errConnect struct{ err error }

func (e errConnect) Error() string { return "pubsub: " + e.err.Error() }
func (e errConnect) Unwrap() error { return e.err }

func open(cfg settings, env kind.Env) *publisher {
	p := &publisher{
		cfg:  cfg,
		name: "projects/" + cfg.project + "/topics/" + cfg.topic,
		env:  env,
	}
	p.mu.Lock()
	p.connectLocked()
	p.mu.Unlock()
	return p
}

// connectLocked starts creating the client unless that is under way.
func (p *publisher) connectLocked() *connecting {
	if p.pending != nil {
		return p.pending
	}
	c := &connecting{done: make(chan struct{})}
	p.pending = c
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		client, err := p.newClient()
		var pub *pubsub.Publisher
		if err == nil {
			pub = p.newPublisher(client)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case err != nil:
			c.err = errConnect{err}
		case p.closed:
			_ = client.Close()
			c.err = kind.ErrClosed
		default:
			p.client, p.pub = client, pub
		}
		p.pending = nil
		close(c.done)
	}()
	return c
}

// get returns the client's publisher, waiting for it at most until ctx ends.
func (p *publisher) get(ctx context.Context) (*pubsub.Publisher, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, kind.ErrClosed
	}
	if p.pub != nil {
		pub := p.pub
		p.mu.Unlock()
		return pub, nil
	}
	c := p.connectLocked()
	p.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.err != nil {
		return nil, c.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, kind.ErrClosed
	}
	return p.pub, nil
}

func (p *publisher) newClient() (*pubsub.Client, error) {
	dial := p.env.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	opts := []option.ClientOption{
		// Every connection goes through relay's dialer (its address guard
		// and egress proxy); gRPC uses no proxy of its own with a dialer.
		option.WithGRPCDialOption(grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})),
		// Reconnect soon after the service is back: gRPC's default backoff
		// grows to two minutes.
		option.WithGRPCDialOption(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 20 * time.Second,
		})),
		// One connection for publishing (a destination's concurrency fits
		// in its HTTP/2 streams), and one for the subscriber client the
		// library also makes.
		option.WithGRPCConnectionPool(1),
	}
	if p.cfg.endpoint != "" {
		opts = append(opts, option.WithEndpoint(p.cfg.endpoint))
	}
	switch {
	case len(p.cfg.credentials) > 0:
		creds, err := serviceAccountCredentials(p.cfg.credentials, p.env.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("credentials_json: %w", err)
		}
		opts = append(opts, option.WithAuthCredentials(creds))
	case p.cfg.endpoint != "":
		// An emulator: plaintext, no credentials.
		opts = append(opts,
			option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		)
	default:
		// The relay host's Application Default Credentials. Tokens that
		// are fetched (user or external account credentials) go through
		// relay's HTTP client; on Google Cloud they come from the
		// metadata server, which the library reaches itself.
		creds, err := credentials.DetectDefault(&credentials.DetectOptions{
			Scopes:           []string{pubsub.ScopePubSub},
			UseSelfSignedJWT: true,
			Client:           p.env.HTTPClient,
		})
		if err != nil {
			return nil, fmt.Errorf("no credentials: credentials_json is empty and %w", err)
		}
		opts = append(opts, option.WithAuthCredentials(creds))
	}
	return pubsub.NewClientWithConfig(context.Background(), p.cfg.project, &pubsub.ClientConfig{
		TopicAdminCallOptions: &vkit.TopicAdminCallOptions{
			Publish: []gax.CallOption{gax.WithRetry(func() gax.Retryer { return &retryer{p: p} })},
		},
	}, opts...)
}

// serviceAccountCredentials are the credentials of a service account key
// (Validate accepts no other kind). Its tokens are JWTs it signs itself, as
// Google's gRPC clients do: no token is fetched, so the key file's
// token_uri is never called.
func serviceAccountCredentials(key []byte, hc *http.Client) (*auth.Credentials, error) {
	return credentials.NewCredentialsFromJSON(credentials.ServiceAccount, key, &credentials.DetectOptions{
		Scopes:           []string{pubsub.ScopePubSub},
		UseSelfSignedJWT: true,
		Client:           hc,
	})
}

func (p *publisher) newPublisher(client *pubsub.Client) *pubsub.Publisher {
	pub := client.Publisher(p.cfg.topic)
	pub.PublishSettings.DelayThreshold = publishDelay
	pub.PublishSettings.Timeout = bundleTimeout
	pub.EnableMessageOrdering = p.cfg.ordering
	return pub
}

// retryer decides, for one request of the client, whether to send it
// again. It only resends after UNAVAILABLE (no connection, a server
// restarting): a publisher reconnects and delivers within the attempt's
// time. Every other failure goes back to relay, which retries by the
// destination's policy. It notes every failure for attempts that end
// before the request does.
type retryer struct {
	p  *publisher
	bo gax.Backoff
}

func (r *retryer) Retry(err error) (time.Duration, bool) {
	r.p.last.Store(&failure{at: time.Now(), err: err})
	if status.Code(err) != codes.Unavailable {
		return 0, false
	}
	if r.bo.Initial == 0 {
		r.bo = gax.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 1.5}
	}
	return r.bo.Pause(), true
}

// Publish publishes m and waits for its message id.
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	pub, err := p.get(ctx)
	if err != nil {
		var ce errConnect
		switch {
		case errors.Is(err, kind.ErrClosed):
			return kind.Retry("", kind.ErrClosed)
		case errors.As(err, &ce):
			// Missing or unusable credentials: the same event cannot
			// succeed until the destination or the host is set up.
			return kind.Permanent("", err)
		default:
			return kind.Retry("", fmt.Errorf("pubsub: client not ready: %w", err))
		}
	}
	msg := &pubsub.Message{Data: m.Body, Attributes: attributes(m)}
	if p.cfg.ordering {
		msg.OrderingKey = m.Key
	}
	if err := checkUTF8(msg); err != nil {
		return kind.Permanent(codeName(codes.InvalidArgument), err)
	}
	start := time.Now()
	// A key's publishing is paused after a failure; the first time the
	// pause is met the failure it stands for has been answered already,
	// so resume and publish again once.
	for try := 0; ; try++ {
		res := pub.Publish(ctx, msg)
		select {
		case <-res.Ready():
		case <-ctx.Done():
			return p.unconfirmed(ctx, pub, res, msg.OrderingKey, start)
		}
		id, err := res.Get(ctx)
		if err == nil {
			return kind.Delivered("message id " + id)
		}
		if msg.OrderingKey != "" {
			// Never leave the key paused: relay sends the key's next event
			// (or this one again) only after this answer.
			pub.ResumePublish(msg.OrderingKey)
		}
		var paused pubsub.ErrPublishingPaused
		if errors.As(err, &paused) && try == 0 {
			continue
		}
		return p.classify(err)
	}
}

// unconfirmed answers an attempt whose ctx ended before the client had an
// answer. The request goes on in the background until bundleTimeout: a
// watcher resumes the key if it fails after all.
func (p *publisher) unconfirmed(ctx context.Context, pub *pubsub.Publisher, res *pubsub.PublishResult, key string, start time.Time) kind.Answer {
	p.mu.Lock()
	if key != "" && !p.closed {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			<-res.Ready()
			if _, err := res.Get(context.Background()); err != nil {
				pub.ResumePublish(key)
			}
		}()
	}
	p.mu.Unlock()
	if f := p.last.Load(); f != nil && !f.at.Before(start) {
		a := kind.Retry("", fmt.Errorf("pubsub topic %s: not confirmed in time (%v); last error: %w", p.name, ctx.Err(), f.err))
		if st, ok := status.FromError(f.err); ok {
			a.Code = codeName(st.Code())
		}
		a.RetryAfter = retryAfter(f.err)
		return a
	}
	return kind.Retry("", fmt.Errorf("pubsub topic %s: not confirmed in time: %w", p.name, ctx.Err()))
}

// classify turns the client's error into an answer by its gRPC code.
func (p *publisher) classify(err error) kind.Answer {
	if errors.Is(err, pubsub.ErrOversizedMessage) {
		return kind.Permanent("", fmt.Errorf("pubsub topic %s: message larger than a Publish request's 10 MB limit", p.name))
	}
	if errors.Is(err, pubsub.ErrPublisherStopped) {
		return kind.Retry("", kind.ErrClosed)
	}
	st, ok := status.FromError(err)
	err = fmt.Errorf("pubsub topic %s: %w", p.name, err)
	if !ok {
		// Not the service's answer (a paused key met twice): retry.
		return kind.Retry("", err)
	}
	code := st.Code()
	switch code {
	case codes.NotFound, // no such topic (or project)
		codes.PermissionDenied, // the account may not publish to the topic
		// Unauthenticated: the service refused the credentials (a deleted or
		// disabled key or account). Tokens are renewed before they expire
		// and a service account key signs its own; a token that could not
		// be fetched is UNAVAILABLE, which is retried.
		codes.Unauthenticated,
		codes.InvalidArgument,    // a message the service refuses (too large, bad attributes)
		codes.FailedPrecondition, // e.g. a message that does not match the topic's schema
		codes.OutOfRange,
		codes.Unimplemented:
		return kind.Permanent(codeName(code), err)
	}
	// UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL,
	// UNKNOWN, CANCELED (the client's own context is not the attempt's:
	// a canceled request was cut by a closing connection) and anything
	// else may pass.
	a := kind.Retry(codeName(code), err)
	a.RetryAfter = retryAfter(err)
	return a
}

// retryAfter is the delay the service asked for in a RetryInfo detail.
func retryAfter(err error) time.Duration {
	st, ok := status.FromError(err)
	if !ok {
		return 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// codeName is code as the service writes it: NotFound is NOT_FOUND.
func codeName(code codes.Code) string {
	s := code.String()
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' && s[i-1] >= 'a' && s[i-1] <= 'z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// attributes are the message's attributes: the event's metadata.
func attributes(m kind.Message) map[string]string {
	a := map[string]string{
		"webhook-id":        m.ID,
		"webhook-timestamp": strconv.FormatInt(m.Timestamp, 10),
		"relay-destination": m.Dest,
	}
	set := func(k, v string) {
		if v != "" {
			a[k] = v
		}
	}
	set("webhook-signature", m.Signature)
	set("relay-event-type", m.Type)
	set("relay-tenant", m.Tenant)
	set("content-type", m.ContentType)
	return a
}

// checkUTF8 refuses what gRPC cannot encode: attributes and ordering keys
// are protobuf strings. The client would report it as INTERNAL, which
// reads as retryable.
func checkUTF8(msg *pubsub.Message) error {
	if !utf8.ValidString(msg.OrderingKey) {
		return errors.New("pubsub: the order key is not valid UTF-8")
	}
	for k, v := range msg.Attributes {
		if !utf8.ValidString(v) {
			return fmt.Errorf("pubsub: attribute %s is not valid UTF-8", k)
		}
	}
	return nil
}

// Close stops the client: requests still under way are cut, and every
// goroutine and connection is released. It is idempotent.
func (p *publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	client, pub := p.client, p.pub
	p.mu.Unlock()
	var err error
	if client != nil {
		// Close the connections first: requests left by attempts that ran
		// out of time then fail at once instead of holding Stop for up to
		// bundleTimeout.
		err = client.Close()
		pub.Stop()
	}
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("pubsub: close: %w", err)
	}
	return nil
}
