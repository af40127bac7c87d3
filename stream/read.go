package stream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
