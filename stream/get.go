package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// APIPrefix is the subject prefix of js's API requests.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// Get reads one message of streamName from the stream's leader: the one
// at sequence seq; with filter, the first at or after seq (or, when seq is
// 0, stored at or after since; zero: from the start) on a subject filter
// matches. It returns jetstream.ErrMsgNotFound when there is none.
//
// The leader, because a direct get can be answered by a mirror that has
// not caught up, and its "not found" would skip a message. And a plain
// request-reply in JSON, because nats.go's consumers take a message with
// an empty body and a Status header for a status of the pull protocol.
func Get(ctx context.Context, js jetstream.JetStream, streamName string, seq uint64, since time.Time, filter string) (*jetstream.RawStreamMsg, error) {
	q := struct {
		Seq       uint64     `json:"seq,omitempty"`
		NextFor   string     `json:"next_by_subj,omitempty"`
		StartTime *time.Time `json:"start_time,omitempty"`
	}{Seq: seq, NextFor: filter}
	if seq == 0 && !since.IsZero() {
		q.StartTime = &since
	}
	if q.Seq == 0 && q.NextFor == "" && q.StartTime == nil {
		q.Seq = 1
	}
	req, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	resp, err := js.Conn().RequestWithContext(ctx, APIPrefix(js)+"STREAM.MSG.GET."+streamName, req)
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("read the response to a message get: %w", err)
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
			return nil, fmt.Errorf("read the headers of message %d: %w", m.Sequence, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Header: hdr, Data: m.Data, Time: m.Time}, nil
}
