package egress

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNetGuardPermitsTable(t *testing.T) {
	t.Parallel()
	blocked := []string{
		"127.0.0.1",
		"127.5.5.5",
		"::1",
		"::ffff:127.0.0.1",         // IPv4-mapped loopback
		"::ffff:169.254.169.254",   // IPv4-mapped metadata
		"169.254.169.254",          // cloud metadata
		"10.1.2.3",                 // RFC 1918
		"172.16.0.1",               // RFC 1918, first
		"172.31.255.255",           // RFC 1918, last
		"192.168.1.1",              // RFC 1918
		"100.64.0.1",               // CGNAT
		"0.0.0.0",                  // unspecified
		"::",                       // unspecified
		"224.0.0.1",                // multicast
		"255.255.255.255",          // broadcast
		"240.0.0.1",                // reserved
		"fe80::1",                  // link-local
		"fe80::1%eth0",             // link-local with a zone
		"fc00::1",                  // ULA
		"fd12::1",                  // ULA
		"ff02::1",                  // multicast
		"2001:db8::1",              // documentation
		"64:ff9b::7f00:1",          // NAT64 of 127.0.0.1
		"2002:7f00:1::",            // 6to4 of 127.0.0.1
		"::7f00:1",                 // IPv4-compatible 127.0.0.1
		"198.18.0.1",               // benchmarking
		"192.0.2.1",                // TEST-NET-1
		"::ffff:10.0.0.1",          // IPv4-mapped private
		"::ffff:0.0.0.0",           // IPv4-mapped unspecified
		"64:ff9b::a9fe:a9fe",       // NAT64 of 169.254.169.254
		"2001:0:4136:e378::1",      // Teredo
		"fec0::1",                  // site-local
		"100::1",                   // discard
		"192.88.99.1",              // 6to4 relay anycast
		"203.0.113.7",              // TEST-NET-3
		"198.51.100.7",             // TEST-NET-2
		"fe80::1%25en0",            // zone that looks escaped
		"ff02::1%eth0",             // multicast with a zone
		"::ffff:255.255.255.255",   // IPv4-mapped broadcast
		"::ffff:224.0.0.251",       // IPv4-mapped multicast (mDNS)
		"::ffff:100.127.255.255",   // IPv4-mapped CGNAT, last
		"::ffff:172.16.254.254",    // IPv4-mapped RFC 1918
		"::ffff:192.168.255.255",   // IPv4-mapped RFC 1918, last
		"::ffff:198.19.255.255",    // IPv4-mapped benchmarking, last
		"::ffff:127.255.255.255",   // IPv4-mapped loopback, last
		"::ffff:169.254.0.0",       // IPv4-mapped link-local, first
		"::ffff:0.255.255.255",     // IPv4-mapped "this network", last
		"::ffff:240.0.0.0",         // IPv4-mapped reserved, first
		"::ffff:10.255.255.255",    // IPv4-mapped RFC 1918, last
		"::ffff:192.0.0.1",         // IPv4-mapped IETF assignments
		"::ffff:192.0.2.255",       // IPv4-mapped TEST-NET-1, last
		"::ffff:203.0.113.255",     // IPv4-mapped TEST-NET-3, last
		"::ffff:198.51.100.255",    // IPv4-mapped TEST-NET-2, last
		"::ffff:192.88.99.255",     // IPv4-mapped 6to4 relay, last
		"::ffff:239.255.255.255",   // IPv4-mapped multicast, last
		"::ffff:100.64.0.0",        // IPv4-mapped CGNAT, first
		"::ffff:172.31.0.0",        // IPv4-mapped RFC 1918
		"::ffff:192.168.0.0",       // IPv4-mapped RFC 1918, first
		"::ffff:198.18.0.0",        // IPv4-mapped benchmarking, first
		"::ffff:127.0.0.0",         // IPv4-mapped loopback, first
		"::ffff:169.254.255.255",   // IPv4-mapped link-local, last
		"::ffff:10.0.0.0",          // IPv4-mapped RFC 1918, first
		"::ffff:0.0.0.1",           // IPv4-mapped "this network"
		"::ffff:224.0.0.0",         // IPv4-mapped multicast, first
		"::ffff:192.0.0.255",       // IPv4-mapped IETF assignments, last
		"::ffff:192.0.2.0",         // IPv4-mapped TEST-NET-1, first
		"::ffff:203.0.113.0",       // IPv4-mapped TEST-NET-3, first
		"::ffff:198.51.100.0",      // IPv4-mapped TEST-NET-2, first
		"::ffff:192.88.99.0",       // IPv4-mapped 6to4 relay, first
		"::ffff:172.16.0.0",        // IPv4-mapped RFC 1918, first
		"::ffff:172.31.255.255",    // IPv4-mapped RFC 1918, last
		"64:ff9b:1::1",             // local NAT64
		"2001:db8:ffff::1",         // documentation
		"2002::1",                  // 6to4
		"::2",                      // IPv4-compatible range
		"fdff:ffff:ffff:ffff::1",   // ULA, last /16
		"febf:ffff::1",             // link-local, last
		"ffff:ffff:ffff:ffff::1",   // multicast, last
		"::ffff:127.0.0.1%eth0",    // IPv4-mapped loopback with a zone
		"64:ff9b::8.8.8.8",         // NAT64 of a public address is still NAT64
		"2002:808:808::1",          // 6to4 of a public address is still 6to4
		"::8.8.8.8",                // IPv4-compatible of a public address
		"100::ffff:ffff:ffff:ffff", // discard, last
		"::ffff:0:a9fe:a9fe",       // IPv4-translated 169.254.169.254 (RFC 2765)
		"::ffff:0:7f00:1",          // IPv4-translated 127.0.0.1
		"::ffff:0:808:808",         // IPv4-translated of a public address is still translated
		"::ffff:0:0:0",             // IPv4-translated range, first
		"::ffff:0:ffff:ffff",       // IPv4-translated range, last
	}
	permitted := []string{
		"8.8.8.8",
		"1.1.1.1",
		"2606:4700:4700::1111",
		"172.32.0.1",      // just above 172.16/12
		"172.15.255.255",  // just below 172.16/12
		"100.128.0.1",     // just above 100.64/10
		"100.63.255.255",  // just below 100.64/10
		"11.0.0.1",        // just above 10/8
		"9.255.255.255",   // just below 10/8
		"128.0.0.1",       // just above 127/8
		"126.255.255.255", // just below 127/8
		"169.253.255.255", // just below 169.254/16
		"169.255.0.1",     // just above 169.254/16
		"192.167.255.255", // just below 192.168/16
		"192.169.0.1",     // just above 192.168/16
		"198.17.255.255",  // just below 198.18/15
		"198.20.0.1",      // just above 198.18/15
		"223.255.255.254", // just below multicast
		"1.0.0.1",         // just above 0/8
		"::ffff:8.8.8.8",  // IPv4-mapped public
		"2a00:1450:4001:80b::200e",
		"2001:4860:4860::8888", // outside 2001::/23
		"2001:db9::1",          // just above 2001:db8::/32
	}
	var zero Guard
	for _, s := range blocked {
		t.Run("blocked "+s, func(t *testing.T) {
			t.Parallel()
			a, err := netip.ParseAddr(s)
			require.NoError(t, err)
			require.False(t, zero.Permits(a), "zero guard must refuse %s", s)
			require.True(t, Guard{Off: true}.Permits(a), "Off must permit %s", s)
		})
	}
	for _, s := range permitted {
		t.Run("permitted "+s, func(t *testing.T) {
			t.Parallel()
			a, err := netip.ParseAddr(s)
			require.NoError(t, err)
			require.True(t, zero.Permits(a), "zero guard must permit %s", s)
			require.True(t, Guard{Off: true}.Permits(a), "Off must permit %s", s)
		})
	}

	t.Run("allow 127.0.0.0/8", func(t *testing.T) {
		t.Parallel()
		g := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
		require.True(t, g.Permits(netip.MustParseAddr("127.0.0.1")))
		require.True(t, g.Permits(netip.MustParseAddr("127.255.255.254")))
		require.True(t, g.Permits(netip.MustParseAddr("::ffff:127.0.0.1")), "an IPv4-mapped form of an allowed address is allowed")
		require.False(t, g.Permits(netip.MustParseAddr("10.0.0.1")), "allowing loopback must not open RFC 1918")
		require.False(t, g.Permits(netip.MustParseAddr("::1")), "allowing 127/8 must not open IPv6 loopback")
		require.False(t, g.Permits(netip.MustParseAddr("169.254.169.254")))
		require.True(t, g.Permits(netip.MustParseAddr("8.8.8.8")), "public addresses stay permitted")
	})
	t.Run("allow a single host", func(t *testing.T) {
		t.Parallel()
		g := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32")}}
		require.True(t, g.Permits(netip.MustParseAddr("10.0.0.5")))
		require.True(t, g.Permits(netip.MustParseAddr("::ffff:10.0.0.5")))
		require.False(t, g.Permits(netip.MustParseAddr("10.0.0.4")))
		require.False(t, g.Permits(netip.MustParseAddr("10.0.0.6")))
	})
	t.Run("allow a zoned link-local range", func(t *testing.T) {
		t.Parallel()
		g := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("fe80::/10")}}
		require.True(t, g.Permits(netip.MustParseAddr("fe80::1%eth0")), "the zone must not defeat an allow")
	})
	t.Run("off permits everything", func(t *testing.T) {
		t.Parallel()
		g := Guard{Off: true}
		for _, s := range append(append([]string{}, blocked...), permitted...) {
			require.True(t, g.Permits(netip.MustParseAddr(s)), s)
		}
	})
	t.Run("the invalid address is refused", func(t *testing.T) {
		t.Parallel()
		require.False(t, zero.Permits(netip.Addr{}))
		require.False(t, Guard{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}.Permits(netip.Addr{}),
			"no allow range contains the invalid address")
	})
}

func TestParseAllowNets(t *testing.T) {
	t.Parallel()
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	tests := []struct {
		name    string
		in      []string
		want    []netip.Prefix
		wantErr string // empty: no error; else a substring of the error
	}{
		{"cidr", []string{"127.0.0.0/8"}, pfx("127.0.0.0/8"), ""},
		{"bare IPv4 address is a /32", []string{"10.0.0.1"}, pfx("10.0.0.1/32"), ""},
		{"bare IPv6 address is a /128", []string{"::1"}, pfx("::1/128"), ""},
		{"bare IPv4-mapped address is unmapped to a /32", []string{"::ffff:10.0.0.1"}, pfx("10.0.0.1/32"), ""},
		{"comma list", []string{"10.0.0.0/8,192.168.0.0/16"}, pfx("10.0.0.0/8", "192.168.0.0/16"), ""},
		{"comma list with spaces and empties", []string{" 10.0.0.0/8 , ,192.168.0.0/16,"}, pfx("10.0.0.0/8", "192.168.0.0/16"), ""},
		{"several values", []string{"10.0.0.0/8", "fd00::/8"}, pfx("10.0.0.0/8", "fd00::/8"), ""},
		{"host bits are masked", []string{"10.1.2.3/8"}, pfx("10.0.0.0/8"), ""},
		{"nothing", nil, nil, ""},
		{"empty string", []string{""}, nil, ""},
		{"not an address", []string{"nope"}, nil, `"nope"`},
		{"prefix too long", []string{"10.0.0.0/33"}, nil, `"10.0.0.0/33"`},
		{"bad entry in a list", []string{"10.0.0.0/8,bad/8"}, nil, `"bad/8"`},
		{"IPv6 prefix too long", []string{"::/129"}, nil, `"::/129"`},
		{"host name", []string{"localhost"}, nil, `"localhost"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseAllowNets(tc.in)
			if tc.wantErr != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.wantErr, "the error must name the input")
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	t.Run("parsed ranges work in a guard", func(t *testing.T) {
		t.Parallel()
		allow, err := ParseAllowNets([]string{"127.0.0.1"})
		require.NoError(t, err)
		g := Guard{Allow: allow}
		require.True(t, g.Permits(netip.MustParseAddr("127.0.0.1")))
		require.True(t, g.Permits(netip.MustParseAddr("::ffff:127.0.0.1")))
		require.False(t, g.Permits(netip.MustParseAddr("127.0.0.2")))
	})
}
