package natskind

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/kind"
)

// The headers every message carries, besides Nats-Msg-Id.
const (
	HeaderID          = "webhook-id"
	HeaderTimestamp   = "webhook-timestamp"
	HeaderSignature   = "webhook-signature"
	HeaderEventType   = "relay-event-type"
	HeaderTenant      = "relay-tenant"
	HeaderDestination = "relay-destination"
	HeaderContentType = "content-type"
)

const (
	// connectTimeout bounds one dial, and the handshake (TLS, INFO,
	// CONNECT) that follows it.
	connectTimeout = 5 * time.Second
	// reconnectWait is the pause between two rounds of reconnection
	// attempts over the servers.
	reconnectWait = time.Second
	// defaultTimeout bounds a Publish whose context has no deadline.
	defaultTimeout = 30 * time.Second
)

// JetStream error codes (err_code) of a publish that nats.go does not name.
// The server's list is nats-server's server/errors.json.
const (
	errCodeAccountResourcesExceeded jetstream.ErrorCode = 10002 // account limits reached
	errCodeClusterNotAvailable      jetstream.ErrorCode = 10008 // JetStream temporarily unavailable
	errCodeClusterNotLeader         jetstream.ErrorCode = 10009 // no leader to take the request
	errCodeInsufficientResources    jetstream.ErrorCode = 10023
	errCodeMemoryResourcesExceeded  jetstream.ErrorCode = 10028
	errCodeStorageResourcesExceeded jetstream.ErrorCode = 10047
	errCodeStreamNotMatch           jetstream.ErrorCode = 10060 // expected stream does not match
	errCodeStreamStoreFailed        jetstream.ErrorCode = 10077 // a write failed or a DiscardNew limit was hit
	errCodeHeaderExceedsMaximum     jetstream.ErrorCode = 10097
	errCodeStreamSealed             jetstream.ErrorCode = 10109
	errCodeStreamOffline            jetstream.ErrorCode = 10118
	errCodeDuplicateInProcess       jetstream.ErrorCode = 10158 // the same Nats-Msg-Id is being stored
)

// Open implements [kind.Kind]. It connects nothing: the first Publish
// starts the connection, in the background, and later ones find it up, or
// reconnecting by itself.
func (k natsKind) Open(c kind.Config, env kind.Env) (kind.Publisher, error) {
	if err := k.Validate(c); err != nil {
		return nil, err
	}
	servers, _ := parseURLs(c[FieldURL])
	js, _ := strconv.ParseBool(kind.Get(k, c, FieldJetStream))
	opts, err := authOptions(c)
	if err != nil {
		return nil, err
	}
	dial := env.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = d.DialContext
	}
	life, stop := context.WithCancel(context.Background())
	return &publisher{
		servers:      strings.Join(servers, ","),
		subject:      c[FieldSubject],
		jetstream:    js,
		expectStream: c[FieldExpectedStream],
		opts:         opts,
		dial:         dial,
		life:         life,
		stop:         stop,
		ready:        make(chan struct{}),
		waiting:      map[*waiter]struct{}{},
	}, nil
}

// authOptions are the connection's options for c's credential and TLS
// fields.
func authOptions(c kind.Config) ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case c[FieldCredentials] != "":
		opts = append(opts, nats.UserCredentialBytes([]byte(c[FieldCredentials])))
	case c[FieldNKeySeed] != "":
		seed := []byte(strings.TrimSpace(c[FieldNKeySeed]))
		pub, err := userNKey(string(seed))
		if err != nil {
			return nil, kind.Errorf(FieldNKeySeed, "%s", err)
		}
		opts = append(opts, nats.Nkey(pub, func(nonce []byte) ([]byte, error) {
			kp, err := nkeys.FromSeed(seed)
			if err != nil {
				return nil, err
			}
			defer kp.Wipe()
			return kp.Sign(nonce)
		}))
	case c[FieldToken] != "":
		opts = append(opts, nats.Token(c[FieldToken]))
	case c[FieldUsername] != "":
		opts = append(opts, nats.UserInfo(c[FieldUsername], c[FieldPassword]))
	}
	cfg, err := tlsConfig(c)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		// Not nats.Secure: a nats:// URL still takes a server without
		// TLS, and one that requires TLS gets this configuration.
		opts = append(opts, func(o *nats.Options) error {
			o.TLSConfig = cfg
			return nil
		})
	}
	return opts, nil
}

// publisher publishes one destination's messages over one connection,
// shared by every Publish.
type publisher struct {
	servers      string // comma-separated URLs
	subject      string
	jetstream    bool
	expectStream string
	opts         []nats.Option // credentials and TLS
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)

	// life ends at Close: it cancels the dials under way.
	life context.Context
	stop context.CancelFunc

	// ready is closed once the first connection attempt is over: nc and
	// js (or openErr) are then set, and do not change.
	ready   chan struct{}
	nc      *nats.Conn
	js      jetstream.JetStream
	openErr error

	mu      sync.Mutex
	closed  bool
	started bool
	// waiting are the JetStream publishes waiting for their ack: a
	// permission violation, which the server reports apart from the
	// request, ends them.
	waiting map[*waiter]struct{}
	// dialErr is the last dial's error, nil after a dial that worked.
	dialErr error
	// connErr is the last failed connection attempt's error, nil once
	// connected.
	connErr error
}

// waiter is a Publish waiting for a JetStream ack.
type waiter struct{ cancel context.CancelCauseFunc }

// Publish implements [kind.Publisher].
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	msg, err := p.message(m)
	if err != nil {
		return kind.Permanent("", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	if a, ok := p.connect(ctx, m.Dest); !ok {
		return a
	}
	if !p.nc.IsConnected() {
		return p.notConnected()
	}
	if p.jetstream {
		return p.publishJetStream(ctx, msg, m.ID)
	}
	return p.publishCore(ctx, msg)
}

// message is m as a NATS message.
func (p *publisher) message(m kind.Message) (*nats.Msg, error) {
	msg := nats.NewMsg(p.subject)
	msg.Data = m.Body
	h := msg.Header
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	set(HeaderID, m.ID)
	h.Set(HeaderTimestamp, strconv.FormatInt(m.Timestamp, 10))
	set(HeaderSignature, m.Signature)
	set(HeaderEventType, m.Type)
	set(HeaderTenant, m.Tenant)
	set(HeaderDestination, m.Dest)
	set(HeaderContentType, m.ContentType)
	if !p.jetstream {
		// jetstream.WithMsgID sets it for a JetStream publish; a core
		// publish that a stream captures is deduplicated the same way.
		set(jetstream.MsgIDHeader, m.ID)
	}
	for k, vs := range h {
		for _, v := range vs {
			// A line break would end the header block early.
			if strings.ContainsAny(v, "\r\n") {
				return nil, fmt.Errorf("header %s has a line break, which NATS headers cannot carry", k)
			}
		}
	}
	return msg, nil
}

// connect starts the connection on the first call, and waits for its
// first attempt to be over. It answers when there is no connection to use.
func (p *publisher) connect(ctx context.Context, dest string) (kind.Answer, bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return kind.Retry("", kind.ErrClosed), false
	}
	if !p.started {
		p.started = true
		// The dials carry the destination, as relay's other deliveries
		// do: the egress proxy's NoProxy dest: and tenant: entries match
		// it. Not this Publish's context: the connection outlives it,
		// and its deadline would cut later reconnections short.
		go p.start(egress.ForDestination(p.life, dest))
	}
	p.mu.Unlock()
	select {
	case <-p.ready:
	case <-ctx.Done():
		return kind.Retry("", &failure{msg: "still connecting to NATS: " + ctx.Err().Error(), err: ctx.Err()}), false
	}
	if p.openErr != nil {
		// An option the client refused: the configuration is wrong.
		return kind.Permanent("", &failure{msg: "cannot set up the NATS client: " + p.openErr.Error(), err: p.openErr}), false
	}
	return kind.Answer{}, true
}

// start makes the connection. nats.Connect tries each server once, and
// with RetryOnFailedConnect returns a connection that keeps trying in the
// background when none answered.
func (p *publisher) start(dialCtx context.Context) {
	defer close(p.ready)
	// The first attempt's failure reaches ReconnectErrHandler only, once
	// Connect has returned: wait for it, so that the first Publish can
	// tell why there is no connection.
	failed := make(chan struct{})
	var once sync.Once
	opts := append([]nats.Option{
		nats.Name("relay"),
		nats.SetCustomDialer(&dialer{ctx: dialCtx, p: p}),
		// The dialer gets the host name, not addresses looked up here:
		// Env.Dial resolves it, and checks what it resolves to.
		nats.SkipHostLookup(),
		nats.Timeout(connectTimeout),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		// Credentials refused twice would otherwise close the connection
		// for good: keep trying, for when they are accepted again.
		nats.IgnoreAuthErrorAbort(),
		// Nothing is buffered while reconnecting: a Publish then answers
		// Retry at once, and nothing it gave up on is sent later.
		nats.ReconnectBufSize(-1),
		nats.ErrorHandler(p.asyncError),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			p.setConnErr(err)
			once.Do(func() { close(failed) })
		}),
		nats.ConnectHandler(func(*nats.Conn) { p.setConnErr(nil) }),
		nats.ReconnectHandler(func(*nats.Conn) { p.setConnErr(nil) }),
		nats.NoCallbacksAfterClientClose(),
	}, p.opts...)
	nc, err := nats.Connect(p.servers, opts...)
	if err != nil {
		p.openErr = err
		return
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		p.openErr = err
		return
	}
	p.nc, p.js = nc, js
	if !nc.IsConnected() {
		t := time.NewTimer(connectTimeout)
		defer t.Stop()
		select {
		case <-failed:
		case <-t.C:
		case <-p.life.Done():
		}
	}
}

// publishJetStream publishes msg into the stream that captures the
// subject, and waits for the stream's ack.
func (p *publisher) publishJetStream(ctx context.Context, msg *nats.Msg, id string) kind.Answer {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &waiter{cancel: cancel}
	p.mu.Lock()
	p.waiting[w] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.waiting, w)
		p.mu.Unlock()
		cancel(nil)
	}()

	before := p.nc.LastError()
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id)}
	if p.expectStream != "" {
		opts = append(opts, jetstream.WithExpectStream(p.expectStream))
	}
	ack, err := p.js.PublishMsg(ctx, msg, opts...)
	if err == nil {
		detail := fmt.Sprintf("stream %s seq %d", ack.Stream, ack.Sequence)
		if ack.Duplicate {
			detail += " (duplicate: an earlier attempt stored it)"
		}
		return kind.Delivered(detail)
	}
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return denied(cause)
	}
	return p.failed(err, before)
}

// publishCore publishes msg and waits for the server to have received it
// (a PING answered after it): that is all core NATS confirms.
func (p *publisher) publishCore(ctx context.Context, msg *nats.Msg) kind.Answer {
	before := p.nc.LastError()
	if err := p.nc.PublishMsg(msg); err != nil {
		return p.failed(err, before)
	}
	if err := p.nc.FlushWithContext(ctx); err != nil {
		return p.failed(err, before)
	}
	// The server reports a publish it refused apart from it, and before
	// its answer to the PING: the reader has kept it as the last error.
	if err := p.nc.LastError(); err != before && errors.Is(err, nats.ErrPermissionViolation) {
		return denied(err)
	}
	return kind.Delivered("published")
}

// failed answers a publish that failed with err; before is the
// connection's last error when it began.
func (p *publisher) failed(err, before error) kind.Answer {
	if p.isClosed() {
		return kind.Retry("", kind.ErrClosed)
	}
	// A refused publish may show only as a missing ack.
	if last := p.nc.LastError(); last != before && errors.Is(last, nats.ErrPermissionViolation) {
		return denied(last)
	}
	if e, ok := errors.AsType[*jetstream.APIError](err); ok {
		return p.apiError(e, err)
	}
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		// No stream captures the subject (jetstream.PublishMsg already
		// retried twice, for a stream changing leader). A stream being
		// made is possible, but a missing stream is far more often a
		// configuration error: retrying would only delay the dead
		// letter. Create the stream, then redeliver the dead letters.
		return kind.Permanent("503", &failure{
			msg: fmt.Sprintf("no JetStream stream captures subject %q (the server answered no responders): create one, or set jetstream=false for a core NATS publish", p.subject),
			err: err,
		})
	case errors.Is(err, nats.ErrMaxPayload):
		return kind.Permanent("", &failure{
			msg: fmt.Sprintf("the message is larger than the server's max_payload of %d bytes (body and headers)", p.nc.MaxPayload()),
			err: err,
		})
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected), !p.nc.IsConnected():
		return p.notConnected()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, nats.ErrTimeout):
		what := "no ack from the stream"
		if !p.jetstream {
			what = "no answer from the server"
		}
		return kind.Retry("", &failure{msg: what + " within the attempt's timeout", err: err})
	case errors.Is(err, nats.ErrConnectionClosed):
		// A flush whose connection dropped: it reconnects.
		return kind.Retry("", &failure{msg: "the connection to NATS dropped before the server confirmed", err: err})
	}
	return kind.Retry("", err)
}

// apiError answers the stream's refusal e (in err).
func (p *publisher) apiError(e *jetstream.APIError, err error) kind.Answer {
	code := strconv.Itoa(int(e.ErrorCode))
	msg := "the stream refused the message: " + e.Description
	if e.ErrorCode == errCodeStreamNotMatch {
		msg = fmt.Sprintf("subject %q is captured by a stream other than the expected %q", p.subject, p.expectStream)
	}
	f := &failure{msg: msg, err: err}
	switch e.ErrorCode {
	case jetstream.JSErrCodeStreamMessageExceedsMaximum, errCodeHeaderExceedsMaximum,
		errCodeStreamNotMatch, errCodeStreamSealed:
		return kind.Permanent(code, f)
	case errCodeAccountResourcesExceeded, errCodeInsufficientResources, errCodeMemoryResourcesExceeded,
		errCodeStorageResourcesExceeded, errCodeStreamStoreFailed, errCodeStreamOffline,
		errCodeClusterNotAvailable, errCodeClusterNotLeader, errCodeDuplicateInProcess:
		// Limits free up as messages expire or are consumed, a store
		// recovers, a leader is elected.
		return kind.Retry(code, f)
	}
	// Otherwise the code's class decides: the server's 4xx refuse the
	// request itself, 5xx are its own trouble.
	if e.Code >= 400 && e.Code < 500 && e.Code != 408 && e.Code != 409 && e.Code != 429 {
		return kind.Permanent(code, f)
	}
	return kind.Retry(code, f)
}

// notConnected answers a Publish that found the connection down.
func (p *publisher) notConnected() kind.Answer {
	if p.isClosed() {
		return kind.Retry("", kind.ErrClosed)
	}
	if p.nc.IsClosed() {
		return kind.Retry("", errors.New("the connection to NATS is closed"))
	}
	// A dial that worked then a handshake that failed (TLS, the
	// credentials) is the client's last error; a dial that failed is
	// the dialer's; the first attempt's failure is reported apart.
	err := p.nc.LastError()
	p.mu.Lock()
	if err == nil {
		err = p.dialErr
	}
	if err == nil {
		err = p.connErr
	}
	p.mu.Unlock()
	if err == nil {
		return kind.Retry("", errors.New("not connected to NATS (reconnecting)"))
	}
	if isAuthError(err) {
		return kind.Permanent("", &failure{msg: "NATS refused the credentials: " + trimNATS(err.Error()), err: err})
	}
	return kind.Retry("", &failure{msg: "not connected to NATS: " + trimNATS(err.Error()), err: err})
}

// asyncError receives the errors the server reports apart from a request:
// a permission violation ends the JetStream publishes waiting for an ack
// that will not come (the server drops a publish it refuses, or the ack
// it may not deliver). The connection publishes to one subject and
// receives on its inbox only, so any violation is theirs.
func (p *publisher) asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for w := range p.waiting {
		w.cancel(err)
	}
}

// Close implements [kind.Publisher].
func (p *publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	started := p.started
	p.mu.Unlock()
	p.stop()
	if started {
		<-p.ready
		if p.nc != nil {
			p.nc.Close()
		}
	}
	return nil
}

func (p *publisher) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *publisher) setConnErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connErr = err
}

// dialer opens the client's connections through the Env's Dial.
type dialer struct {
	ctx context.Context
	p   *publisher
}

// Dial implements [nats.CustomDialer]. A connection it opened is closed at
// the publisher's Close, even in the middle of its handshake.
func (d *dialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(d.ctx, connectTimeout)
	defer cancel()
	c, err := d.p.dial(ctx, network, address)
	d.p.mu.Lock()
	d.p.dialErr = err
	d.p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, stop: context.AfterFunc(d.ctx, func() { _ = c.Close() })}, nil
}

// conn is a connection the dialer opened.
type conn struct {
	net.Conn
	stop func() bool
}

// Close implements [net.Conn].
func (c *conn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// denied answers a publish the server refused for want of permission.
func denied(err error) kind.Answer {
	return kind.Permanent("", &failure{msg: "NATS refused the publish: " + trimNATS(err.Error()), err: err})
}

// isAuthError reports whether err is the server refusing the connection's
// credentials.
func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

// trimNATS removes the "nats: " prefixes of nats.go's errors, for a
// message that already says it is about NATS.
func trimNATS(s string) string {
	for strings.HasPrefix(s, "nats: ") {
		s = s[len("nats: "):]
	}
	return s
}

// failure is an error with a message for the delivery log, wrapping the
// client's error for errors.Is and errors.As.
type failure struct {
	msg string
	err error
}

func (f *failure) Error() string { return f.msg }
func (f *failure) Unwrap() error { return f.err }

// Compile-time checks.
var (
	_ kind.Publisher    = (*publisher)(nil)
	_ nats.CustomDialer = (*dialer)(nil)
)
