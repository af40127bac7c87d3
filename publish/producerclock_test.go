package publish

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/stream/streamtest"
	"github.com/stretchr/testify/require"
)

// A producer trusts that a destination exists for knownFor after it last
// saw it, by its clock: a removed destination still takes events until
// then, and is refused after.
func TestProducerTrustsAKnownDestinationByItsClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := streamtest.Start(t).JS
	st, err := destination.NewStore(ctx, js)
	require.NoError(t, err)
	_, err = st.Add(ctx, destination.Destination{Name: "orders", URL: "https://example.test/hook"})
	require.NoError(t, err)
	p, err := NewProducer(ctx, js)
	require.NoError(t, err)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := &pubClock{t: t0}
	p.now = clock.Now

	_, err = p.Publish(ctx, Event{Dest: "orders", Data: []byte(`{}`)})
	require.NoError(t, err)
	require.NoError(t, st.Remove(ctx, "orders"))

	clock.Set(t0.Add(knownFor - time.Millisecond))
	_, err = p.Publish(ctx, Event{Dest: "orders", Data: []byte(`{}`)})
	require.NoError(t, err, "still trusted")

	clock.Set(t0.Add(knownFor))
	_, err = p.Publish(ctx, Event{Dest: "orders", Data: []byte(`{}`)})
	require.ErrorIs(t, err, ErrUnknownDestination, "asked again once knownFor has passed")
}

// pubClock is a clock a test sets.
type pubClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *pubClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *pubClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
