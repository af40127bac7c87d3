package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// Policy is what deliveries may reach beyond public addresses: the
// ranges of relay run's --allow-net. Every replica must run with the same
// one, or an event's fate would depend on the replica that took it. Each
// replica announces its policy with its heartbeat; 'relay run' refuses to
// start when a live replica announces another (AgreeNetPolicy), and records
// the policy so that 'relay dest add' and 'dest update' refuse a URL it
// blocks (CheckURL) instead of letting its events be dead-lettered.
type Policy struct {
	Allow []netip.Prefix
}

// ranges are p's ranges as text, sorted, without repeats.
func (p Policy) ranges() []string {
	out := make([]string, 0, len(p.Allow))
	for _, a := range p.Allow {
		out = append(out, a.Masked().String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// String describes p for logs and messages.
func (p Policy) String() string {
	if len(p.Allow) == 0 {
		return "public addresses only"
	}
	return "public addresses and " + strings.Join(p.ranges(), ", ")
}

// Equal reports whether p and q allow the same ranges.
func (p Policy) Equal(q Policy) bool { return slices.Equal(p.ranges(), q.ranges()) }

func (p Policy) MarshalJSON() ([]byte, error) { return json.Marshal(p.ranges()) }

func (p *Policy) UnmarshalJSON(b []byte) error {
	var rs []string
	if err := json.Unmarshal(b, &rs); err != nil {
		return err
	}
	allow, err := ParseAllowNets(rs)
	if err != nil {
		return err
	}
	p.Allow = allow
	return nil
}

// PolicyKey is the key of the StateBucket entry holding the policy the
// replicas run with, as the last one to start recorded it.
const PolicyKey = "net_policy"

// PolicyError says that a live replica runs with another policy.
type PolicyError struct {
	Replica      string
	Ours, Theirs Policy
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("this relay's --allow-net differs from that of the running replica %s: it may reach %s, this one %s. "+
		"Every replica must run with the same --allow-net (RELAY_ALLOW_NET), or an event's fate would depend on the replica that takes it; "+
		"to change it, stop them all and start them with the new one", e.Replica, e.Theirs, e.Ours)
}

// AgreePolicy returns a *NetPolicyError if a live replica announces a
// policy other than p, and otherwise records p as the replicas' policy.
func AgreePolicy(ctx context.Context, js jetstream.JetStream, p Policy) error {
	kv, err := js.KeyValue(ctx, stream.ReplicasBucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", stream.ReplicasBucket, err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return fmt.Errorf("list replicas: %w", err)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // gone since it was listed
		}
		// The replica's record (replicaRecord in relay): only its policy.
		var rec struct {
			NetPolicy *Policy `json:"allow_net"`
		}
		if json.Unmarshal(e.Value(), &rec) != nil || rec.NetPolicy == nil {
			continue
		}
		if !rec.NetPolicy.Equal(p) {
			return &PolicyError{Replica: k, Ours: p, Theirs: *rec.NetPolicy}
		}
	}
	state, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := state.Put(ctx, PolicyKey, b); err != nil {
		return fmt.Errorf("record the address policy: %w", err)
	}
	return nil
}

// RecordedPolicy returns the policy the last 'relay run' to start
// recorded; ok is false if none did.
func RecordedPolicy(ctx context.Context, js jetstream.JetStream) (p Policy, ok bool, err error) {
	state, err := js.KeyValue(ctx, stream.StateBucket)
	if err != nil {
		return Policy{}, false, fmt.Errorf("open bucket %s: %w", stream.StateBucket, err)
	}
	e, err := state.Get(ctx, PolicyKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Policy{}, false, nil
	}
	if err != nil {
		return Policy{}, false, fmt.Errorf("read %s/%s: %w", stream.StateBucket, PolicyKey, err)
	}
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Policy{}, false, fmt.Errorf("%s/%s holds %q, not an address policy: %w", stream.StateBucket, PolicyKey, e.Value(), err)
	}
	return p, true, nil
}

// CheckURL returns a *BlockedError if the host of rawURL is, or resolves
// only to, addresses p blocks. A name that does not resolve (within 2s) passes:
// each delivery resolves it again and checks what it gets.
func (p Policy) CheckURL(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil // Destination.Validate says what is wrong with it
	}
	host := u.Hostname()
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil
		}
	}
	g := Guard{Allow: p.Allow}
	for _, ip := range ips {
		if g.Permits(ip) {
			return nil // a delivery connects to the addresses permitted
		}
	}
	if len(ips) == 0 {
		return nil
	}
	return &BlockedError{Host: host, Addr: ips[0].Unmap()}
}
