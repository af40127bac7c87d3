package destination

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A pattern applies to the events stored after it was added and up to
// when it was removed; a pattern kept keeps its start; ended windows beyond
// maxRetired go, the oldest first.
func TestSubscriptionWindows(t *testing.T) {
	d := Destination{Types: []string{"a.*", "b"}}
	d.subscribe(10)
	require.Equal(t, []Subscription{{Pattern: "a.*", Since: 10}, {Pattern: "b", Since: 10}}, d.Subscriptions)
	require.False(t, d.Subscribed("a.x", 10), "stored before the subscription")
	require.True(t, d.Subscribed("a.x", 11))
	require.False(t, d.Subscribed("c", 11))

	d.Types = []string{"b", "c"}
	d.subscribe(20)
	require.Equal(t, []Subscription{{Pattern: "b", Since: 10}, {Pattern: "c", Since: 20}, {Pattern: "a.*", Since: 10, Until: 20}}, d.Subscriptions)
	require.True(t, d.Subscribed("a.x", 20), "stored while subscribed, routed later")
	require.False(t, d.Subscribed("a.x", 21))
	require.True(t, d.Subscribed("b", 11), "kept its start")
	require.False(t, d.Subscribed("c", 20))
	require.True(t, d.Subscribed("c", 21))

	// Re-adding a removed pattern opens a new window.
	d.Types = []string{"a.*"}
	d.subscribe(30)
	require.True(t, d.Subscribed("a.x", 15))
	require.False(t, d.Subscribed("a.x", 25), "between the windows")
	require.True(t, d.Subscribed("a.x", 31))

	for i := range 40 {
		d.Types = []string{"p" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
		d.subscribe(uint64(100 + i))
	}
	retired := 0
	for _, s := range d.Subscriptions {
		if s.Until != 0 {
			retired++
			require.GreaterOrEqual(t, s.Until, uint64(100+40-maxRetired), "the newest ended windows are kept")
		}
	}
	require.Equal(t, maxRetired, retired)

	// A record written without windows: its types apply from its start.
	raw := Destination{Types: []string{"x"}, StartSeq: 5}
	require.False(t, raw.Subscribed("x", 4))
	require.True(t, raw.Subscribed("x", 5))
}

func TestValidateTypes(t *testing.T) {
	require.NoError(t, validateTypes(nil))
	require.NoError(t, validateTypes([]string{"a", "b.*", ">"}))
	require.ErrorContains(t, validateTypes([]string{"a", "a"}), `"a" given twice`)
	require.ErrorContains(t, validateTypes([]string{"a..b"}), "empty token")
	many := make([]string, MaxTypes+1)
	for i := range many {
		many[i] = "t" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	require.ErrorContains(t, validateTypes(many), "at most 64")
}
