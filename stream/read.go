package stream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"bytes"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrStop ends a Read early without an error.
var ErrStop = errors.New("stop reading")

// ReadOptions say what Read reads.
type ReadOptions struct {
	// Filters are the subjects read (none: all). They must not overlap.
	Filters []string
	// After: read the messages stored after this stream sequence. When 0,
	// those stored at or after Since (zero: from the start).
	After uint64
	Since time.Time
	// HeadersOnly reads subjects, headers and sequences, not bodies.
	HeadersOnly bool
	// Follow goes on with messages stored later until ctx ends. Without
	// it, Read returns after the last message stored when it began.
	Follow bool
	// Description is its consumer's description (default "relay reader").
	Description string
}

const (
	// readAhead is how many messages Read asks for ahead.
	readAhead = 1000
	// readExpiry and readBeat are its pull requests' expiry and idle
	// heartbeat: with two heartbeats missed it asks again, and with a
	// request expired and nothing pending a Read that does not follow
	// is done.
	readExpiry = 5 * time.Second
	readBeat   = 2 * time.Second
	// readRestarts is how often in a row Read makes a new consumer without
	// getting further before it gives up.
	readRestarts = 5
)

// errReadGap: Read's consumer skipped a message, went silent or is gone,
// and Read goes on with a new one after the last message it read.
var errReadGap = errors.New("the reader's consumer lost its place")

// Read calls fn with each message of streamName that o selects, in stream
// order. It returns when fn returns an error (ErrStop: nil), when ctx ends,
// or, without o.Follow, after the last message stored when it began.
//
// It reads through an ephemeral consumer without acks, in memory, with
// pull requests of its own (Puller: nats.go's consumers take a message
// with an empty body and a Status header for a status of the pull
// protocol, and never get past it), and deletes the consumer when it
// returns (or the server does, 30s after a crash). When the consumer skips
// a message, goes silent or is gone, Read goes on with a new one after the
// last message read, up to readRestarts times in a row without progress.
func Read(ctx context.Context, js jetstream.JetStream, streamName string, o ReadOptions, fn func(*jetstream.RawStreamMsg) error) error {
	var last uint64 // without Follow, the last sequence to read
	if !o.Follow {
		st, err := js.Stream(ctx, streamName)
		if err != nil {
			return fmt.Errorf("read %s: %w", streamName, err)
		}
		s := st.CachedInfo().State
		if s.Msgs == 0 || s.LastSeq <= o.After {
			return nil
		}
		last = s.LastSeq
	}
	after := o.After
	for restarts := 0; ; restarts++ {
		before := after
		err := readWith(ctx, js, streamName, o, last, &after, fn)
		if !errors.Is(err, errReadGap) {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
		if after > before {
			restarts = 0 // got further: count again
		}
		if restarts == readRestarts {
			return fmt.Errorf("read %s: started again %d times in a row after sequence %d: %w", streamName, restarts, after, err)
		}
	}
}

// readWith is Read through one consumer, from after *after, which it
// moves past each message read.
func readWith(ctx context.Context, js jetstream.JetStream, streamName string, o ReadOptions, last uint64, after *uint64, fn func(*jetstream.RawStreamMsg) error) error {
	cfg := jetstream.ConsumerConfig{
		Description:       cmp.Or(o.Description, "relay reader"),
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		FilterSubjects:    o.Filters,
		HeadersOnly:       o.HeadersOnly,
		InactiveThreshold: 30 * time.Second,
		MemoryStorage:     true,
		Replicas:          1,
	}
	switch {
	case *after > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, *after+1
	case !o.Since.IsZero():
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &o.Since
	}
	cons, err := js.CreateConsumer(ctx, streamName, cfg)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	info := cons.CachedInfo()
	defer func() {
		// Not with ctx: Read may end because ctx did.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, streamName, info.Name)
	}()
	if !o.Follow && info.NumPending == 0 {
		return nil // what was there is gone (deleted, aged out)
	}
	p, err := NewPuller(js, streamName, info.Name, readExpiry, readBeat, 0)
	if err != nil {
		return fmt.Errorf("read %s: %w", streamName, err)
	}
	defer p.Stop(time.Second)
	tick := time.NewTicker(readBeat / 2)
	defer tick.Stop()
	var (
		cseq    uint64 // the consumer sequence of the last message read
		awaited uint64 // cseq+1 when a status came while it was delivered but not here
		buf     []*nats.Msg
	)
	for {
		_ = p.Fill(readAhead, 0, time.Now()) // a failed ask is tried again in a second
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			if p.Silent(now) {
				return fmt.Errorf("%w: no heartbeat", errReadGap)
			}
			continue
		case <-p.Signal():
		}
		got := p.Take(buf)
		for _, m := range got {
			st, err := p.Status(m, time.Now())
			switch st {
			case PullBeat, PullLost, PullRefused:
				continue // asked again above
			case PullReleased:
				if o.Follow {
					continue
				}
				// A request ended (expired, or met its max_bytes while
				// the next one was served). Done if the consumer has
				// nothing left and everything it delivered was read
				// (what remained was deleted). Messages delivered after
				// the status may be behind it in got or still on their
				// way: go on, unless they were not there at the last
				// status either (lost: a slow consumer's drop).
				ci, err := cons.Info(ctx)
				switch {
				case err != nil:
					return fmt.Errorf("%w: %w", errReadGap, err)
				case ci.Delivered.Consumer <= cseq && ci.NumPending == 0:
					return nil
				case ci.Delivered.Consumer > cseq && awaited == cseq+1:
					return fmt.Errorf("%w: messages %d to %d of its consumer never came", errReadGap, cseq+1, ci.Delivered.Consumer)
				case ci.Delivered.Consumer > cseq:
					awaited = cseq + 1
				}
				continue
			case PullUnanswered, PullGone:
				return fmt.Errorf("%w: %w", errReadGap, err)
			}
			meta, ok := ParseAck(m.Reply)
			if !ok {
				return fmt.Errorf("read %s: a message without its metadata (reply %q)", streamName, m.Reply)
			}
			if meta.Sequence.Consumer != cseq+1 {
				return fmt.Errorf("%w: consumer sequence %d after %d", errReadGap, meta.Sequence.Consumer, cseq)
			}
			cseq = meta.Sequence.Consumer
			seq := meta.Sequence.Stream
			if !o.Follow && seq > last {
				return nil // stored after Read began
			}
			if err := fn(&jetstream.RawStreamMsg{Subject: m.Subject, Sequence: seq, Header: m.Header, Data: m.Data, Time: meta.Timestamp}); err != nil {
				return err
			}
			*after = seq
			if err := ctx.Err(); err != nil {
				return err
			}
			if !o.Follow && (meta.NumPending == 0 || seq == last) {
				return nil
			}
		}
		clear(got)
		buf = got
	}
}

// GetMsg returns the message stored at sequence seq of streamName, or with
// nextFor, the first one at or after seq on a subject nextFor matches
// (jetstream.ErrMsgNotFound when there is none). It asks the stream's
// leader: a direct get may be answered by a mirror or follower that has not
// caught up, and its "not found" would skip a message.
func GetMsg(ctx context.Context, js jetstream.JetStream, streamName string, seq uint64, nextFor string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj,omitempty"`
	}{seq, nextFor})
	if err != nil {
		return nil, err
	}
	resp, err := js.Conn().RequestWithContext(ctx, APIPrefix(js)+"STREAM.MSG.GET."+streamName, req)
	if err != nil {
		return nil, fmt.Errorf("get message %d of %s: %w", seq, streamName, err)
	}
	var got struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &got); err != nil {
		return nil, fmt.Errorf("get message %d of %s: the response: %w", seq, streamName, err)
	}
	switch {
	case got.Error != nil && got.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case got.Error != nil:
		return nil, got.Error
	case got.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	m := got.Message
	var hdr nats.Header
	if len(m.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return nil, fmt.Errorf("get message %d of %s: its headers: %w", m.Sequence, streamName, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Header: hdr, Data: m.Data, Time: m.Time}, nil
}

// Puller asks one durable pull consumer for events with the JetStream pull
// protocol (ADR-13), on a subscription of its own, instead of through
// nats.go's iterator. Every event the server hands the process then goes
// straight into the caller's queue (relay's consume loop), where it sees how
// long an event has waited, restarts its AckWait while it waits, and hands
// it back on stop; the iterator keeps what it asked for in a buffer the
// caller cannot see, which would hold it to asking for one round of
// attempts at a time (docs/performance.md, "How relay pulls events").
//
// Its methods are called from one goroutine.
type Puller struct {
	nc      *nats.Conn
	subject string // the consumer's MSG.NEXT subject
	inbox   string
	sub     *nats.Subscription
	expiry  time.Duration
	hb      time.Duration
	// maxBytes bounds what one request brings (its max_bytes): at least
	// twice the server's maximum payload, so that any one event fits.
	maxBytes int64

	mu      sync.Mutex
	got     []*nats.Msg   // received, not taken yet
	signal  chan struct{} // something is in got
	arrived atomic.Int64  // when something last arrived, in Unix ns

	// reqs numbers the requests: each has a reply subject of its own, as
	// the server keys what it defers of a request (the 408 of a replicated
	// consumer waiting for its deliveries to commit) by reply subject.
	reqs uint64

	// asked counts events asked for that have neither arrived nor been
	// released by a status (a request that expired, or was refused).
	asked int
	// heard is when the server last sent anything, or when asked last
	// became positive.
	heard time.Time
	// pause: no request before it (after a refused one, or a failed ask).
	pause time.Time
}

// NewPuller pulls from the consumer named consumer of streamName: with
// requests that expire after expiry, with an idle heartbeat every hb, and
// that bring at most maxBytes each (at least twice the server's maximum
// payload).
func NewPuller(js jetstream.JetStream, streamName, consumer string, expiry, hb time.Duration, maxBytes int64) (*Puller, error) {
	nc := js.Conn()
	p := &Puller{
		nc:       nc,
		subject:  APIPrefix(js) + "CONSUMER.MSG.NEXT." + streamName + "." + consumer,
		inbox:    nc.NewInbox(),
		expiry:   expiry,
		hb:       hb,
		maxBytes: max(maxBytes, 2*nc.MaxPayload()),
		signal:   make(chan struct{}, 1),
	}
	sub, err := nc.Subscribe(p.inbox+".*", p.receive)
	if err != nil {
		return nil, err
	}
	// What arrives was asked for, and the callback only queues it: never
	// drop it as a slow consumer (it would come back only after AckWait).
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	p.sub = sub
	return p, nil
}

// receive is the subscription's callback.
func (p *Puller) receive(m *nats.Msg) {
	p.arrived.Store(time.Now().UnixNano())
	p.mu.Lock()
	p.got = append(p.got, m)
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// take returns what arrived since the last call, in order.
func (p *Puller) Take(buf []*nats.Msg) []*nats.Msg {
	p.mu.Lock()
	got := p.got
	p.got = buf[:0]
	p.mu.Unlock()
	return got
}

// fill asks the server for what it takes to have hold events, held
// being those already here, once that is a quarter of hold or more (a
// request per event when one is held): not while disconnected, nor during
// a pause after a refused request or a failed ask.
func (p *Puller) Fill(hold, held int, now time.Time) error {
	n := hold - held - p.asked
	if n < max(1, hold/4) || now.Before(p.pause) || !p.nc.IsConnected() {
		return nil
	}
	body := fmt.Appendf(nil, `{"batch":%d,"max_bytes":%d,"expires":%d,"idle_heartbeat":%d}`, n, p.maxBytes, p.expiry.Nanoseconds(), p.hb.Nanoseconds())
	p.reqs++
	if err := p.nc.PublishRequest(p.subject, p.inbox+"."+strconv.FormatUint(p.reqs, 36), body); err != nil {
		p.pause = now.Add(time.Second)
		return err
	}
	if p.asked == 0 {
		p.heard = now
	}
	p.asked += n
	return nil
}

// PullStatus is what a status message from the server means for the puller.
type PullStatus int

const (
	PullEvent      PullStatus = iota // not a status: an event
	PullBeat                         // a heartbeat: nothing changes
	PullReleased                     // a request ended; asked is down by what it had left
	PullLost                         // requests may be gone: ask again (asked is 0)
	PullRefused                      // a request was refused: asked is 0, and fill pauses a second
	PullUnanswered                   // nothing serves the consumer, which may be gone: as PullRefused
	PullGone                         // the consumer was deleted
)

// status reads m, which arrived at now, and keeps asked and heard up to
// date. err describes a status other than an event or a heartbeat.
func (p *Puller) Status(m *nats.Msg, now time.Time) (PullStatus, error) {
	p.heard = now
	// An event comes with its ack subject, a status never: nats.go's test
	// (no body and a Status header) mistakes an event published with an
	// empty body and a header named Status for one.
	if m.Reply != "" {
		p.asked = max(p.asked-1, 0)
		return PullEvent, nil
	}
	code, descr := m.Header.Get("Status"), m.Header.Get("Description")
	err := fmt.Errorf("pull request: status %s %s", code, descr)
	if left := m.Header.Get(HdrPending); left != "" {
		// The request ended (it expired, lost its interest, or met a
		// limit) with left events not sent.
		n, perr := strconv.Atoi(left)
		if perr != nil || n < 0 {
			p.asked = 0
			return PullLost, err
		}
		p.asked = max(p.asked-n, 0)
		if code == "409" && strings.Contains(strings.ToLower(descr), "leadership change") {
			p.asked = 0
			return PullLost, err
		}
		return PullReleased, err
	}
	switch code {
	case "100", "":
		return PullBeat, nil
	case "503":
		// No responders: no consumer, or no JetStream right now.
		p.asked, p.pause = 0, now.Add(time.Second)
		return PullUnanswered, err
	case "409":
		d := strings.ToLower(descr)
		switch {
		case strings.Contains(d, "consumer deleted"):
			p.asked = 0
			return PullGone, err
		case strings.Contains(d, "leadership change"), strings.Contains(d, "server shutdown"):
			p.asked = 0
			return PullLost, err
		}
	}
	// A refused request (too many waiting, a bad request). Which request
	// it was is not counted here: count them all gone; asking for more than there is room
	// for is safe, every event that comes is queued and seen.
	p.asked, p.pause = 0, now.Add(time.Second)
	return PullRefused, err
}

// silent reports whether the server has said nothing for two heartbeats
// while events were asked for: the requests are presumed lost (a server
// restart, a reconnect, a dropped request), and asked is reset so that
// they are asked for again.
func (p *Puller) Silent(now time.Time) bool {
	// What arrived but was not read yet (its reader was busy) counts.
	heard := p.heard
	if a := time.Unix(0, p.arrived.Load()); a.After(heard) {
		heard = a
	}
	if p.asked == 0 || now.Sub(heard) <= 2*p.hb+p.hb/2 {
		return false
	}
	p.asked = 0
	return true
}

// stop unsubscribes, waiting (up to wait) until what the server sent before
// it had the unsubscribe has arrived, and returns it.
func (p *Puller) Stop(wait time.Duration) []*nats.Msg {
	closed := p.sub.StatusChanged(nats.SubscriptionClosed)
	if err := p.sub.Drain(); err != nil {
		_ = p.sub.Unsubscribe()
	} else {
		t := time.NewTimer(wait)
		select {
		case <-closed:
		case <-t.C:
			_ = p.sub.Unsubscribe()
		}
		t.Stop()
	}
	return p.Take(nil)
}

// PulledMsg is an event the puller received: jetstream.Msg over the plain
// NATS message, as nats.go's own (which it does not let others make).
type PulledMsg struct {
	msg  *nats.Msg
	nc   *nats.Conn
	done atomic.Bool // acked, nak'd or terminated
}

var _ jetstream.Msg = (*PulledMsg)(nil)

var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

func (m *PulledMsg) Data() []byte         { return m.msg.Data }
func (m *PulledMsg) Headers() nats.Header { return m.msg.Header }
func (m *PulledMsg) Subject() string      { return m.msg.Subject }
func (m *PulledMsg) Reply() string        { return m.msg.Reply }

// Metadata reads the message's ack subject.
func (m *PulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return AckMetadata(m.msg.Reply)
}

func (m *PulledMsg) Ack() error { return m.reply(context.Background(), ackAck, false) }

// DoubleAck acks and waits for the server to confirm it (within 5s when
// ctx has no deadline, as nats.go does).
func (m *PulledMsg) DoubleAck(ctx context.Context) error {
	return m.reply(ctx, ackAck, true)
}

func (m *PulledMsg) Nak() error { return m.reply(context.Background(), ackNak, false) }

func (m *PulledMsg) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return m.Nak()
	}
	return m.reply(context.Background(), fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds()), false)
}

// handBack returns the message to JetStream to be delivered again at once,
// and so that a restart of the server keeps it so. A plain nak only queues
// the message for redelivery in the server's memory: its stored delivery
// time stays, so a server stopped and started again (the embedded one, with
// relay) redelivers it only once AckWait from its delivery has passed. A nak
// with a delay stores the new due time, here the present.
//
// With confirm, it waits for the server's answer (within 5s). The server
// works through a consumer's acks in the order they came, and drops those it
// has not reached when it stops: once the answer is in, every ack and nak
// sent before it on this connection for this consumer is stored.
func (m *PulledMsg) HandBack(confirm bool) error {
	return m.reply(context.Background(), fmt.Appendf(nil, `-NAK {"delay": %d}`, time.Millisecond.Nanoseconds()), confirm)
}

func (m *PulledMsg) InProgress() error {
	return m.reply(context.Background(), ackProgress, false)
}

func (m *PulledMsg) Term() error { return m.reply(context.Background(), ackTerm, false) }

func (m *PulledMsg) TermWithReason(reason string) error {
	if reason == "" {
		return m.Term()
	}
	return m.reply(context.Background(), append(append(bytes.Clone(ackTerm), ' '), reason...), false)
}

func (m *PulledMsg) reply(ctx context.Context, body []byte, sync bool) error {
	if m.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	final := !bytes.Equal(body, ackProgress)
	if m.done.Load() {
		return jetstream.ErrMsgAlreadyAckd
	}
	var err error
	if sync {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		_, err = m.nc.RequestWithContext(ctx, m.msg.Reply, body)
	} else {
		err = m.nc.Publish(m.msg.Reply, body)
	}
	if err == nil && final {
		m.done.Store(true)
	}
	return err
}

// NewPulledMsg is m, an event a Puller received on nc, as a jetstream.Msg.
func NewPulledMsg(m *nats.Msg, nc *nats.Conn) *PulledMsg { return &PulledMsg{msg: m, nc: nc} }

// Signal is ready when something arrived to Take.
func (p *Puller) Signal() <-chan struct{} { return p.signal }

// NakSubject naks the delivery whose ack subject is reply: JetStream hands
// the event out again at once. It waits for nothing.
func NakSubject(nc *nats.Conn, reply string) error { return nc.Publish(reply, ackNak) }
