package relay

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// jsMessage is a message JetStream delivered: a *stream.PulledMsg (the
// pull loops'), or any jetstream.Msg that can be handed back.
type jsMessage interface {
	jetstream.Msg
	HandBack(confirm bool) error
}

// jsMsg is the settler of a JetStream message. This file is the only one
// of the package that calls JetStream's ack methods (Ack, DoubleAck,
// NakWithDelay, TermWithReason): everything else settles through settler.
// M is a type parameter, not an interface field, so that a jsMsg of a
// pointer is one word and costs no allocation as a delivered.
type jsMsg[M jsMessage] struct{ m M }

var _ delivered = jsMsg[jsMessage]{}

func (j jsMsg[M]) Subject() string                           { return j.m.Subject() }
func (j jsMsg[M]) Reply() string                             { return j.m.Reply() }
func (j jsMsg[M]) Headers() nats.Header                      { return j.m.Headers() }
func (j jsMsg[M]) Data() []byte                              { return j.m.Data() }
func (j jsMsg[M]) Metadata() (*jetstream.MsgMetadata, error) { return j.m.Metadata() }
func (j jsMsg[M]) InProgress() error                         { return j.m.InProgress() }

func (j jsMsg[M]) Acknowledge() error { return j.m.Ack() }
func (j jsMsg[M]) AcknowledgeConfirmed(ctx context.Context) error {
	return j.m.DoubleAck(ctx)
}
func (j jsMsg[M]) Redeliver(delay time.Duration) error { return j.m.NakWithDelay(delay) }
func (j jsMsg[M]) Terminate(reason string) error       { return j.m.TermWithReason(reason) }
func (j jsMsg[M]) HandBack(confirm bool) error         { return j.m.HandBack(confirm) }

// pulledMsg is m, a message a pull loop received, as a delivered.
func pulledMsg(m *stream.PulledMsg) delivered { return jsMsg[*stream.PulledMsg]{m} }
