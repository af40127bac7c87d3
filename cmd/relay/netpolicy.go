package main

import (
	"context"
	"errors"
	"net/netip"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/relay"
)

// checkNetPolicy refuses (exit 2) a destination URL, of the pool urls, that
// the address policy of the relays, as the last 'relay run' to start
// recorded it, blocks: its events would only be dead-lettered. Without a
// recorded policy it checks nothing.
func checkNetPolicy(ctx context.Context, js jetstream.JetStream, urls []string) error {
	p, ok, err := relay.RecordedNetPolicy(ctx, js)
	if err != nil || !ok {
		return nil
	}
	for _, rawURL := range urls {
		var be *relay.BlockedError
		if !errors.As(p.CheckURL(ctx, rawURL), &be) {
			continue
		}
		return usagef("--url %s: %s is %s, a non-public address, and the relays may reach %s; "+
			"to deliver there, start every 'relay run' with --allow-net %s (RELAY_ALLOW_NET)",
			rawURL, be.Host, be.Addr, p, netip.PrefixFrom(be.Addr, be.Addr.BitLen()))
	}
	return nil
}
