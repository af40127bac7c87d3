package egress

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNetPolicyCheckURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	loop := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	var be *BlockedError
	require.True(t, errors.As(Policy{}.CheckURL(ctx, "http://127.0.0.1:8080/hook"), &be))
	require.Equal(t, netip.MustParseAddr("127.0.0.1"), be.Addr)
	require.True(t, errors.As(Policy{}.CheckURL(ctx, "http://[::1]/hook"), &be))
	require.True(t, errors.As(loop.CheckURL(ctx, "http://10.0.0.1/hook"), &be))
	require.NoError(t, loop.CheckURL(ctx, "http://127.0.0.1:8080/hook"))
	require.NoError(t, Policy{}.CheckURL(ctx, "https://93.184.215.14/hook"))
	require.NoError(t, Policy{}.CheckURL(ctx, "https://relay-test.invalid/hook"), "a name that does not resolve is left to the delivery")
}
