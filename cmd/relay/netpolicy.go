package main

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/destination"
)

// checkNetPolicy refuses (exit 2) a destination URL, of the pool urls, that
// the address policy of the relays, as the last 'relay run' to start
// recorded it, blocks: its events would only be dead-lettered. Without a
// recorded policy it checks nothing.
func checkNetPolicy(ctx context.Context, js jetstream.JetStream, urls []string) error {
	var be *destination.BlockedURLError
	if !errors.As(destination.CheckPool(ctx, js, urls), &be) {
		return nil
	}
	return usagef("--url %s: %s is %s, a non-public address, and the relays may reach %s; "+
		"to deliver there, start every 'relay run' with --allow-net %s (RELAY_ALLOW_NET)",
		be.URL, be.Blocked.Host, be.Blocked.Addr, be.Policy, be.AllowNet())
}
