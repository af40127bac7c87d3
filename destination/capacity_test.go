package destination

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/streamtest"
)

// capacityTestLimit starts a server whose events stream takes room
// consumers beyond those relay keeps for its own readers.
func capacityTestLimit(t *testing.T, room int) jetstream.JetStream {
	t.Helper()
	js := streamtest.Start(t).JS
	require.NoError(t, stream.Ensure(context.Background(), js, stream.Config{MaxConsumers: stream.ReservedConsumers + room}))
	return js
}

// Add refuses a destination whose consumers (1, or 1 + Partitions for an
// ordered one) would not fit under the events stream's consumer limit, says
// why, stores nothing, and takes it once room is freed.
func TestAddRefusesADestinationWithoutConsumerRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := capacityTestLimit(t, 4)
	st, err := NewStore(ctx, js)
	require.NoError(t, err)
	_, err = st.Add(ctx, Destination{Name: "a", URL: "https://example.test/a"})
	require.NoError(t, err)
	_, err = st.Add(ctx, Destination{Name: "b", URL: "https://example.test/b", Ordered: true, Partitions: 2})
	require.NoError(t, err, "1 + 3 consumers: exactly the room")

	_, err = st.Add(ctx, Destination{Name: "c", URL: "https://example.test/c"})
	require.ErrorIs(t, err, ErrNoConsumerRoom)
	require.ErrorContains(t, err, "c needs 1 consumer, and 0 are free: of the events stream's limit of 20, 2 destinations take 4 and relay keeps 16 for its own readers")
	require.ErrorContains(t, err, "--max-consumers")
	_, err = st.Get(ctx, "c")
	require.ErrorIs(t, err, ErrNotFound, "nothing stored")

	_, err = st.Add(ctx, Destination{Name: "a", URL: "https://example.test/a"})
	require.ErrorIs(t, err, ErrExists, "a taken name is reported as such, full or not")

	require.NoError(t, st.Remove(ctx, "a"))
	_, err = st.Add(ctx, Destination{Name: "o", URL: "https://example.test/o", Ordered: true, Partitions: 1})
	require.ErrorIs(t, err, ErrNoConsumerRoom)
	require.ErrorContains(t, err, "o needs 2 consumers (1 + 1 partitions), and 1 are free")
	_, err = st.Add(ctx, Destination{Name: "c", URL: "https://example.test/c"})
	require.NoError(t, err, "a removed destination's room is free again")
}

// A stream created before relay set a limit (or by other means) has the
// server's default: 1,000 consumers.
func TestAddCountsTheServersDefaultLimit(t *testing.T) {
	t.Parallel()
	room := ConsumerRoom{Limit: StreamConsumerLimit(jetstream.StreamConfig{MaxConsumers: -1}), Reserved: stream.ReservedConsumers, Dests: 980, Used: 983}
	require.Equal(t, 1000, room.Limit)
	require.NoError(t, checkRoom(Destination{Name: "x"}, room))
	err := checkRoom(Destination{Name: "y", Ordered: true, Partitions: 8}, room)
	require.ErrorIs(t, err, ErrNoConsumerRoom)
	require.ErrorContains(t, err, "y needs 9 consumers (1 + 8 partitions), and 1 are free")
}

// A Store counts the destinations once for many Adds, and counts again
// once another has changed them.
func TestAddCountsWhatOtherStoresAdded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := capacityTestLimit(t, 3)
	one, err := NewStore(ctx, js)
	require.NoError(t, err)
	other, err := NewStore(ctx, js)
	require.NoError(t, err)
	for _, name := range []string{"a", "b"} {
		_, err = one.Add(ctx, Destination{Name: name, URL: "https://example.test/" + name})
		require.NoError(t, err)
	}
	_, err = other.Add(ctx, Destination{Name: "c", URL: "https://example.test/c"})
	require.NoError(t, err)
	_, err = one.Add(ctx, Destination{Name: "d", URL: "https://example.test/d"})
	require.ErrorIs(t, err, ErrNoConsumerRoom, "one sees c")
	require.ErrorContains(t, err, "3 destinations take 3")
}
