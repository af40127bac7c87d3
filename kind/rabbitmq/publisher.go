package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relaydev/relay/kind"
)

const (
	// maxChannels caps the publishes in flight on one publisher: each has
	// an AMQP channel of its own while it waits for its confirm, so that a
	// basic.return or a channel error is always the message's own.
	maxChannels = 16
	// connectTimeout bounds a connection attempt (TCP, TLS and the AMQP
	// handshake). Publish calls waiting for it give up at their own
	// deadline.
	connectTimeout = 30 * time.Second
	// closeTimeout bounds the connection.close handshake of Close.
	closeTimeout = 5 * time.Second
)

// publisherOptions is what a publisher is opened with.
type publisherOptions struct {
	url        string      // scheme://host:port/, no credentials
	config     amqp.Config // vhost, TLS, connection name; Dial and SASL per attempt
	username   string
	password   string
	exchange   string
	routingKey string // "" for the event's type
	persistent bool
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
}

// publisher publishes on one AMQP connection, opened at the first Publish
// and opened again at the next Publish once it is lost. Each publish takes
// a channel in confirm mode for itself until its confirm: the channels are
// kept open between publishes, up to maxChannels.
type publisher struct {
	publisherOptions

	slots  chan struct{} // one token per publish in flight
	done   chan struct{} // closed by Close
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // connection attempts and publishes

	mu      sync.Mutex
	closed  bool
	sess    *session // the current connection, nil for none
	dialing *attempt // the connection attempt in progress, nil for none
}

// attempt is one connection attempt that concurrent publishes wait for.
type attempt struct {
	done chan struct{}
	sess *session
	err  error
}

// session is one AMQP connection and its idle channels.
type session struct {
	conn *amqp.Connection
	mu   sync.Mutex
	idle []*channel
}

// channel is an AMQP channel in confirm mode with its listeners.
type channel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

func newPublisher(o publisherOptions) *publisher {
	if o.dial == nil {
		o.dial = (&net.Dialer{}).DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &publisher{
		publisherOptions: o,
		slots:            make(chan struct{}, maxChannels),
		done:             make(chan struct{}),
		ctx:              ctx,
		cancel:           cancel,
	}
}

// Publish publishes m and waits for the broker's confirm. The protocol's
// blocking steps run in a goroutine of their own, so that Publish returns
// at ctx's end even when the broker stalls (a blocked connection, a lost
// network): that goroutine then closes its channel and ends.
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	select {
	case <-p.done:
		return kind.Retry("", kind.ErrClosed)
	default:
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return expired(ctx, "waiting for a free AMQP channel")
	case <-p.done:
		return kind.Retry("", kind.ErrClosed)
	}
	s, answer, ok := p.session(ctx)
	if !ok {
		<-p.slots
		return answer
	}
	answers := make(chan kind.Answer, 1)
	if !p.spawn(func() {
		defer func() { <-p.slots }()
		answers <- p.send(ctx, s, m)
	}) {
		<-p.slots
		return kind.Retry("", kind.ErrClosed)
	}
	select {
	case a := <-answers:
		return a
	case <-ctx.Done():
		select {
		case a := <-answers:
			return a
		default:
			return expired(ctx, "waiting for RabbitMQ's confirm")
		}
	}
}

// Close closes the connection and waits for every goroutine of the
// publisher to end. It is idempotent.
func (p *publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	s := p.sess
	p.sess = nil
	p.mu.Unlock()

	close(p.done)
	p.cancel()
	if s != nil {
		// The deadline also ends a write blocked by the broker's flow
		// control. The error says only that the close handshake did not
		// complete: the connection is closed all the same.
		_ = s.conn.CloseDeadline(time.Now().Add(closeTimeout))
	}
	p.wg.Wait()
	return nil
}

// spawn runs f in a goroutine Close waits for, unless the publisher is
// closed.
func (p *publisher) spawn(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

// session returns the open connection, connecting when there is none: one
// attempt at a time, which every publish arriving meanwhile waits for.
func (p *publisher) session(ctx context.Context) (*session, kind.Answer, bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, kind.Retry("", kind.ErrClosed), false
	}
	if s := p.sess; s != nil && !s.conn.IsClosed() {
		p.mu.Unlock()
		return s, kind.Answer{}, true
	}
	a := p.dialing
	if a == nil {
		a = &attempt{done: make(chan struct{})}
		p.dialing = a
		p.wg.Add(1)
		go p.connect(a)
	}
	p.mu.Unlock()

	select {
	case <-a.done:
		if a.err != nil {
			return nil, failed(a.err), false
		}
		return a.sess, kind.Answer{}, true
	case <-ctx.Done():
		return nil, expired(ctx, "connecting to RabbitMQ"), false
	case <-p.done:
		return nil, kind.Retry("", kind.ErrClosed), false
	}
}

// connect makes attempt a, bounded by connectTimeout and Close.
func (p *publisher) connect(a *attempt) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, connectTimeout)
	defer cancel()
	conn, err := p.dialAMQP(ctx)

	p.mu.Lock()
	p.dialing = nil
	if err == nil && p.closed {
		err = kind.ErrClosed
		defer func() { _ = conn.CloseDeadline(time.Now().Add(closeTimeout)) }()
	}
	if err == nil {
		p.sess = &session{conn: conn}
		a.sess = p.sess
	}
	a.err = err
	p.mu.Unlock()
	close(a.done)
}

// dialAMQP opens a connection through p.dial. The socket's deadline is
// ctx's until the AMQP handshake completes (the library clears it then),
// and ctx's cancellation (Close) ends the handshake at once.
func (p *publisher) dialAMQP(ctx context.Context) (*amqp.Connection, error) {
	var (
		mu sync.Mutex
		nc net.Conn
	)
	abort := func() {
		mu.Lock()
		defer mu.Unlock()
		if nc != nil {
			_ = nc.SetDeadline(time.Unix(1, 0))
		}
	}
	config := p.config
	config.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: p.username, Password: p.password}}
	config.Dial = func(network, addr string) (net.Conn, error) {
		conn, err := p.dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if deadline, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(deadline)
		}
		mu.Lock()
		nc = conn
		mu.Unlock()
		if ctx.Err() != nil {
			abort()
		}
		return conn, nil
	}
	stop := context.AfterFunc(ctx, abort)
	conn, err := amqp.DialConfig(p.url, config)
	if !stop() && err == nil {
		// ctx ended as the handshake completed: the deadline may be set
		// in the past on a connection that looks open.
		_ = conn.CloseDeadline(time.Now())
		return nil, fmt.Errorf("connect to RabbitMQ: %w", context.Cause(ctx))
	}
	if err != nil {
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) {
			err = fmt.Errorf("connect to RabbitMQ: %w", err)
		}
		return nil, err
	}
	return conn, nil
}

// send publishes m on a channel of s and answers what the broker said.
// It runs in a goroutine of its own (see Publish).
func (p *publisher) send(ctx context.Context, s *session, m kind.Message) kind.Answer {
	c, err := s.take()
	if err != nil {
		return failed(err)
	}
	a, reusable := p.publishOn(ctx, c, m)
	if reusable {
		s.put(c)
	} else {
		// The channel has a confirm outstanding, or the broker closed it:
		// a later message must not get this one's basic.return or error.
		_ = c.ch.Close()
	}
	return a
}

// publishOn publishes m on c and waits for its confirm. It also says
// whether c can carry the next message.
func (p *publisher) publishOn(ctx context.Context, c *channel, m kind.Message) (kind.Answer, bool) {
	key := p.routingKey
	if key == "" {
		key = m.Type
	}
	// A channel whose message went unanswered is closed, never reused, so
	// no return of another message can be waiting; drop any all the same.
	for drained := false; !drained; {
		select {
		case _, ok := <-c.returns:
			drained = !ok // closed with the channel
		default:
			drained = true
		}
	}
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, key, true, false, p.publishing(m))
	if err != nil {
		if ctx.Err() != nil {
			// Nothing was sent.
			return expired(ctx, "publishing to RabbitMQ"), true
		}
		return c.closed(err), false
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		return expired(ctx, "waiting for RabbitMQ's confirm"), false
	case <-p.done:
		return kind.Retry("", kind.ErrClosed), false
	}
	if !dc.Acked() {
		if c.ch.IsClosed() {
			// The library nacks what is outstanding on a closed channel:
			// the broker closed it (an exchange that does not exist, a
			// refused permission) or the connection was lost.
			return c.closed(amqp.ErrClosed), false
		}
		return kind.Retry("basic.nack", errors.New("RabbitMQ refused the message (basic.nack): a queue it routes to is full or unavailable")), true
	}
	// The broker sends a message's basic.return before its basic.ack, and
	// the library hands the return to c.returns (buffered) before it
	// dispatches the ack: if there is one, it is here now.
	select {
	case r, ok := <-c.returns:
		if ok && r.MessageId == m.ID {
			return kind.Permanent(replyCode(int(r.ReplyCode), r.ReplyText),
				fmt.Errorf("RabbitMQ returned the message: no queue is bound to exchange %q for routing key %q (%s)", r.Exchange, r.RoutingKey, r.ReplyText)), true
		}
	default:
	}
	return kind.Delivered(fmt.Sprintf("confirmed: exchange %q, routing key %q", p.exchange, key)), true
}

// publishing is m as an AMQP message.
func (p *publisher) publishing(m kind.Message) amqp.Publishing {
	headers := amqp.Table{
		"webhook-id":        m.ID,
		"webhook-timestamp": strconv.FormatInt(m.Timestamp, 10),
		"relay-destination": m.Dest,
	}
	if m.Signature != "" {
		headers["webhook-signature"] = m.Signature
	}
	if m.Type != "" {
		headers["relay-event-type"] = m.Type
	}
	if m.Tenant != "" {
		headers["relay-tenant"] = m.Tenant
	}
	mode := amqp.Transient
	if p.persistent {
		mode = amqp.Persistent
	}
	var ts time.Time
	if m.Timestamp != 0 {
		ts = time.Unix(m.Timestamp, 0)
	}
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  m.ContentType,
		DeliveryMode: mode,
		MessageId:    m.ID,
		Timestamp:    ts,
		Type:         m.Type,
		AppId:        "relay",
		Body:         m.Body,
	}
}

// take returns an idle channel of s, or opens one.
func (s *session) take() (*channel, error) {
	s.mu.Lock()
	for len(s.idle) > 0 {
		c := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if !c.ch.IsClosed() {
			s.mu.Unlock()
			return c, nil
		}
	}
	s.mu.Unlock()

	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	c := &channel{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, c.cause(err)
	}
	return c, nil
}

// put makes c idle again.
func (s *session) put(c *channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = append(s.idle, c)
}

// closed answers for a channel that failed with err.
func (c *channel) closed(err error) kind.Answer { return failed(c.cause(err)) }

// cause is the error the broker closed c with, when it said one, else err.
func (c *channel) cause(err error) error {
	select {
	case e, ok := <-c.closes:
		if ok && e != nil {
			return e
		}
	default:
	}
	return err
}

// failed answers for an error of the connection, a channel or the dial.
func failed(err error) kind.Answer {
	var amqpErr *amqp.Error
	switch {
	case errors.Is(err, kind.ErrClosed):
		return kind.Retry("", kind.ErrClosed)
	case errors.As(err, &amqpErr):
		return amqpAnswer(amqpErr)
	default:
		// The dial (refused, unreachable, blocked by relay's address
		// guard) or TLS: may pass.
		return kind.Retry("", err)
	}
}

// amqpAnswer classifies an AMQP error by its reply code.
func amqpAnswer(e *amqp.Error) kind.Answer {
	if !e.Server {
		// The library's own errors.
		switch e {
		case amqp.ErrSASL:
			return kind.Permanent("", errors.New("RabbitMQ offers no PLAIN login mechanism"))
		case amqp.ErrCredentials:
			// The broker closed the socket at the login without a word:
			// RabbitMQ's answer to refused credentials for a client that
			// does not announce authentication_failure_close, which this
			// library does not.
			return kind.Permanent(replyCode(amqp.AccessRefused, ""), errors.New("RabbitMQ refused the login: username or password not allowed"))
		case amqp.ErrVhost:
			return kind.Retry("", errors.New("RabbitMQ closed the connection while opening the virtual host"))
		case amqp.ErrClosed:
			return kind.Retry("", errors.New("the connection to RabbitMQ is closed"))
		}
		return kind.Retry("", fmt.Errorf("connection to RabbitMQ lost: %s", e.Reason))
	}
	code := replyCode(e.Code, "")
	err := fmt.Errorf("RabbitMQ: %s", e.Reason)
	switch e.Code {
	case amqp.NotFound, amqp.AccessRefused, amqp.PreconditionFailed, amqp.ContentTooLarge,
		amqp.NoRoute, amqp.InvalidPath:
		return kind.Permanent(code, err)
	case amqp.NotAllowed:
		// 530 is both a virtual host the user may not open (or that does
		// not exist) and a reached connection limit, which passes; the
		// code alone does not tell them apart, RabbitMQ's reason text
		// ("... connection limit (N) is reached") does.
		if strings.Contains(e.Reason, "limit") {
			return kind.Retry(code, err)
		}
		return kind.Permanent(code, err)
	}
	// 320 CONNECTION_FORCED (a broker shutting down), 405
	// RESOURCE_LOCKED, 506 RESOURCE_ERROR, 541 INTERNAL_ERROR... may pass.
	return kind.Retry(code, err)
}

// replyNames are AMQP 0-9-1's reply code names.
var replyNames = map[int]string{
	amqp.ContentTooLarge:    "CONTENT_TOO_LARGE",
	amqp.NoRoute:            "NO_ROUTE",
	amqp.NoConsumers:        "NO_CONSUMERS",
	amqp.ConnectionForced:   "CONNECTION_FORCED",
	amqp.InvalidPath:        "INVALID_PATH",
	amqp.AccessRefused:      "ACCESS_REFUSED",
	amqp.NotFound:           "NOT_FOUND",
	amqp.ResourceLocked:     "RESOURCE_LOCKED",
	amqp.PreconditionFailed: "PRECONDITION_FAILED",
	amqp.FrameError:         "FRAME_ERROR",
	amqp.SyntaxError:        "SYNTAX_ERROR",
	amqp.CommandInvalid:     "COMMAND_INVALID",
	amqp.ChannelError:       "CHANNEL_ERROR",
	amqp.UnexpectedFrame:    "UNEXPECTED_FRAME",
	amqp.ResourceError:      "RESOURCE_ERROR",
	amqp.NotAllowed:         "NOT_ALLOWED",
	amqp.NotImplemented:     "NOT_IMPLEMENTED",
	amqp.InternalError:      "INTERNAL_ERROR",
}

// replyCode is an Answer's Code for an AMQP reply code: "404 NOT_FOUND".
func replyCode(code int, text string) string {
	if name, ok := replyNames[code]; ok {
		return strconv.Itoa(code) + " " + name
	}
	if text != "" {
		return strconv.Itoa(code) + " " + text
	}
	return strconv.Itoa(code)
}

// expired is the answer of a publish whose ctx ended while doing.
func expired(ctx context.Context, doing string) kind.Answer {
	return kind.Retry("", fmt.Errorf("%s: %w", doing, context.Cause(ctx)))
}
