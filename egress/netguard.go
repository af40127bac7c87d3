// Package egress is how relay reaches destinations: the address guard
// (checked at dial time, so a name cannot rebind past it), the policy the
// replicas agree on, and the HTTP client that delivers.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// blockedNets are the address ranges relay refuses to deliver to unless
// allowed: everything that is not a public unicast address.
var blockedNets = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		// IPv4
		"0.0.0.0/8",       // "this network", unspecified
		"10.0.0.0/8",      // RFC 1918
		"100.64.0.0/10",   // CGNAT, RFC 6598
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local, cloud metadata (169.254.169.254)
		"172.16.0.0/12",   // RFC 1918
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"192.88.99.0/24",  // 6to4 relay anycast
		"192.168.0.0/16",  // RFC 1918
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, broadcast
		// IPv6 (IPv4-mapped addresses are unmapped and checked as IPv4)
		"::/96",           // unspecified, loopback, IPv4-compatible
		"64:ff9b::/96",    // NAT64: can reach any IPv4 address
		"::ffff:0:0:0/96", // IPv4-translated (RFC 2765 SIIT; ::ffff:0:0/96 is the IPv4-mapped range, unmapped above): can reach any IPv4 address
		"64:ff9b:1::/48",  // local NAT64
		"100::/64",        // discard
		"2001::/23",       // IETF protocol assignments (Teredo...)
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4: embeds an IPv4 address
		"fc00::/7",        // unique local (ULA)
		"fe80::/10",       // link-local
		"fec0::/10",       // site-local (deprecated)
		"ff00::/8",        // multicast
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// BlockedError is returned for a delivery to an address the guard refuses.
type BlockedError struct {
	Host string
	Addr netip.Addr
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("blocked address: %s resolves to %s, a non-public address (allow it with --allow-net)", e.Host, e.Addr)
}

// Guard decides which addresses deliveries may connect to. The zero value
// refuses every non-public address.
type Guard struct {
	// Allow opens these ranges, checked before the blocked ones.
	Allow []netip.Prefix
	// Off turns the guard off entirely.
	Off bool
	// Lookup resolves host names. Optional, default the system resolver
	// (tests give their own to simulate DNS answers).
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Permits reports whether a delivery may connect to ip.
func (g Guard) Permits(ip netip.Addr) bool {
	if g.Off {
		return true
	}
	ip = ip.Unmap().WithZone("")
	for _, p := range g.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	if !ip.IsValid() {
		return false
	}
	for _, p := range blockedNets {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// ParseAllowNets reads CIDR ranges (a bare address is a single host).
func ParseAllowNets(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if !strings.Contains(s, "/") {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return nil, fmt.Errorf("--allow-net %q: not an address or CIDR range", s)
				}
				out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("--allow-net %q: not a CIDR range: %v", s, err)
			}
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

// dialContext resolves the host itself, refuses blocked addresses, and dials
// the permitted ones. Checking the addresses actually dialled, not the name,
// covers DNS rebinding.
//
// With a proxy, each permitted address is reached through a tunnel the
// proxy opens to it (CONNECT ip:port), never by name.
func (g Guard) dialContext(d *net.Dialer, proxy *Proxy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	lookup := g.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else {
			ips, err = lookup(ctx, host)
			if err != nil {
				return nil, err
			}
		}
		var blocked *BlockedError
		var errs []error
		for _, ip := range ips {
			if !g.Permits(ip) {
				if blocked == nil {
					blocked = &BlockedError{Host: host, Addr: ip.Unmap()}
				}
				continue
			}
			target := net.JoinHostPort(ip.Unmap().String(), port)
			var c net.Conn
			if proxy != nil {
				c, err = proxy.connect(ctx, d, target, host)
			} else {
				c, err = d.DialContext(ctx, network, target)
			}
			if err == nil {
				return c, nil
			}
			if _, ok := errors.AsType[*ProxyError](err); ok {
				return nil, err // the proxy's failure: no other address helps
			}
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		if blocked != nil {
			return nil, blocked
		}
		return nil, fmt.Errorf("%s: no addresses", host)
	}
}
