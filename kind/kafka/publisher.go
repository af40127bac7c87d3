package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/relaydev/relay/kind"
)

// The record headers relay sets, besides content-type.
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
	// dialTimeout bounds a connection's TCP connect and TLS handshake
	// (kgo applies none to a custom dialer).
	dialTimeout = 10 * time.Second
	// produceRequestTimeout is how long a broker may take to answer a
	// produce request (the request's timeout_ms), kgo's default made
	// explicit.
	produceRequestTimeout = 10 * time.Second
	// recordDeliveryTimeout fails a record kgo has buffered this long
	// without sending it. Publish itself returns at its ctx's end; this
	// only bounds how long a record whose Publish already returned may
	// linger in the producer before it is dropped.
	recordDeliveryTimeout = 2 * time.Minute
	// metadataMinAge is the least time between two metadata refreshes:
	// kgo's default of 5s is lowered so that a topic that does not exist
	// is reported (after kgo's four consecutive metadata answers without
	// it) in a few seconds, well within an attempt's timeout.
	metadataMinAge = time.Second
	// recordRetries is how many times kgo tries a record (or the metadata
	// it waits for) before failing it with the last error. Without a
	// limit, kgo would retry a refused SASL login or an untrusted
	// certificate until Publish's deadline, and the answer could not say
	// why; with it, those reach Publish as their own errors.
	recordRetries = 4
)

// Open returns a publisher producing to c's topic. It connects to nothing:
// kgo dials the brokers on the first Publish, through env.Dial.
func (k Kind) Open(c kind.Config, env kind.Env) (kind.Publisher, error) {
	brokers, err := parseBrokers(c[FieldBrokers])
	if err != nil {
		return nil, err
	}
	if err := validTopic(c[FieldTopic]); err != nil {
		return nil, err
	}
	p := &publisher{topic: c[FieldTopic], key: kind.Get(k, c, FieldKey)}

	var tlsConfig *tls.Config
	if on, _ := strconv.ParseBool(kind.Get(k, c, FieldTLS)); on {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if ca := c[FieldTLSCA]; ca != "" {
			if tlsConfig.RootCAs, err = parseCA(ca); err != nil {
				return nil, err
			}
		}
	}
	dial := env.Dial
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}

	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(kind.Get(k, c, FieldClientID)),
		kgo.Dialer(p.dialer(dial, tlsConfig)),
		kgo.MetadataMinAge(metadataMinAge),
		// acks=all and idempotence (kgo's default, kept): a record is
		// confirmed once every in-sync replica has it, and the broker
		// drops the duplicates of kgo's own retries, so that one
		// partition's records keep their order.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// relay sends an ordered destination's events one at a time:
		// lingering would only delay each. Concurrent records are still
		// batched while a request is in flight.
		kgo.ProducerLinger(0),
		kgo.ProduceRequestTimeout(produceRequestTimeout),
		kgo.RecordDeliveryTimeout(recordDeliveryTimeout),
		kgo.RecordRetries(recordRetries),
	}
	if m := saslMechanism(c); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	p.client, err = kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return p, nil
}

// saslMechanism is c's SASL mechanism, nil for none.
func saslMechanism(c kind.Config) sasl.Mechanism {
	user, pass := c[FieldSASLUsername], c[FieldSASLPassword]
	switch c[FieldSASLMechanism] {
	case SASLPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case SASLScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case SASLScramSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	}
	return nil
}

// publisher produces to one topic through one kgo client, which keeps a
// connection to each broker it needs and reconnects by itself.
type publisher struct {
	client *kgo.Client
	topic  string
	key    string

	closed    atomic.Bool
	closeOnce sync.Once
	// lastConnErr is the last dial's error, nil once a dial succeeded: kgo
	// retries failed connections by itself and never hands their errors to
	// a record, so Publish names it when its deadline passes unconfirmed.
	lastConnErr atomic.Pointer[error]
}

// dialer returns kgo's dial function: env's dial, then the TLS handshake
// over its connection when tlsConfig is not nil.
func (p *publisher) dialer(dial func(context.Context, string, string) (net.Conn, error), tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		conn, err := dial(ctx, network, addr)
		if err == nil && tlsConfig != nil {
			cfg := tlsConfig.Clone()
			if host, _, splitErr := net.SplitHostPort(addr); splitErr == nil {
				cfg.ServerName = host
			}
			tc := tls.Client(conn, cfg)
			if err = tc.HandshakeContext(ctx); err != nil {
				_ = conn.Close()
			} else {
				conn = tc
			}
		}
		if err != nil {
			p.lastConnErr.Store(&err)
			return nil, err
		}
		p.lastConnErr.Store(nil)
		return conn, nil
	}
}

// Publish produces m as one record and waits for acks=all, or ctx's end.
//
// A Publish that returns at its ctx's end answers Retry; if kgo had
// already sent the record it cannot take it back (the idempotent producer
// cannot forget a sequence it sent), and the broker may still write it: the
// retry may then be a duplicate, which receivers drop by its webhook-id.
func (p *publisher) Publish(ctx context.Context, m kind.Message) kind.Answer {
	if p.closed.Load() {
		return kind.Retry("", kind.ErrClosed)
	}
	r := p.record(m)
	done := make(chan error, 1) // the promise never blocks, even after Publish returned
	p.client.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return p.failed(err)
		}
		return kind.Delivered(fmt.Sprintf("partition %d offset %d", r.Partition, r.Offset))
	case <-ctx.Done():
		return p.failed(ctx.Err())
	}
}

// record is m as a Kafka record.
func (p *publisher) record(m kind.Message) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, 7)
	add := func(k, v string) {
		if v != "" {
			h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	add(HeaderID, m.ID)
	add(HeaderTimestamp, strconv.FormatInt(m.Timestamp, 10))
	add(HeaderSignature, m.Signature)
	add(HeaderEventType, m.Type)
	add(HeaderTenant, m.Tenant)
	add(HeaderDestination, m.Dest)
	add(HeaderContentType, m.ContentType)

	var key string
	switch p.key {
	case KeyOrderKey:
		key = m.Key
	case KeyEventID:
		key = m.ID
	case KeyTenant:
		key = m.Tenant
	}
	r := &kgo.Record{Topic: p.topic, Headers: h, Value: m.Body}
	if key != "" {
		r.Key = []byte(key)
	}
	if r.Value == nil {
		// A null value is a tombstone (a deletion on compacted topics);
		// an empty body is an empty value.
		r.Value = []byte{}
	}
	return r
}

// permanent are the Kafka error codes retrying the same record cannot
// mend. Every other code is answered Retry, whether Kafka calls it
// retriable (kerr.IsRetriable: NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
// NOT_ENOUGH_REPLICAS...) or not: the non-retriable rest that reaches a
// record is producer state kgo recovers from (OUT_OF_ORDER_SEQUENCE_NUMBER,
// INVALID_PRODUCER_EPOCH...) or a broker's passing trouble
// (UNKNOWN_SERVER_ERROR), and the destination's retry policy caps them.
var permanent = map[int16]bool{
	// Kafka calls UNKNOWN_TOPIC_OR_PARTITION retriable, as it is while a
	// new topic's metadata propagates: kgo retries it itself, and hands it
	// to a record only once UnknownTopicRetries (4) consecutive metadata
	// answers lacked the topic. By then the topic does not exist (relay
	// never creates it), so it is permanent. A Publish whose deadline
	// passes first answers Retry.
	kerr.UnknownTopicOrPartition.Code:    true,
	kerr.UnknownTopicID.Code:             true,
	kerr.InvalidTopicException.Code:      true,
	kerr.TopicAuthorizationFailed.Code:   true,
	kerr.ClusterAuthorizationFailed.Code: true, // the idempotent producer's IDEMPOTENT_WRITE
	kerr.MessageTooLarge.Code:            true,
	kerr.RecordListTooLarge.Code:         true,
	kerr.InvalidRecord.Code:              true,
	kerr.SaslAuthenticationFailed.Code:   true,
	kerr.UnsupportedSaslMechanism.Code:   true,
	kerr.IllegalSaslState.Code:           true,
}

// failed is the answer to a record that was not confirmed.
func (p *publisher) failed(err error) kind.Answer {
	if errors.Is(err, kgo.ErrClientClosed) || p.closed.Load() {
		return kind.Retry("", kind.ErrClosed)
	}
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		err = fmt.Errorf("kafka: %w", err)
		if permanent[ke.Code] {
			return kind.Permanent(ke.Message, err)
		}
		return kind.Retry(ke.Message, err)
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		// The brokers' certificate is not trusted (tls_ca, or the
		// system's roots): like refused credentials, only a change of
		// configuration mends it.
		return kind.Permanent("TLS_CERTIFICATE", fmt.Errorf("kafka: %w", err))
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrRecordTimeout) {
		err = fmt.Errorf("kafka did not confirm the record in time (it may still be written): %w", err)
		if last := p.lastConnErr.Load(); last != nil {
			err = fmt.Errorf("%w; last connection error: %w", err, *last)
		}
		return kind.Retry("", err)
	}
	// Connections refused, resets, kgo's retry limit: may pass.
	return kind.Retry("", fmt.Errorf("kafka: %w", err))
}

// Close closes the client: records still buffered fail, connections and
// goroutines end. Close is idempotent.
func (p *publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.client.Close()
	})
	return nil
}
