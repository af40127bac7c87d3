package deliverylog

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/stream/streamtest"
)

// counted is Losses that remembers what it was told.
type counted struct {
	mu      sync.Mutex
	dropped int
}

func (c *counted) LogLost(n int, dropped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dropped {
		c.dropped += n
	}
}

func (c *counted) LogIndexLost() {}

// A full queue drops records, counts them in its Losses, and warns; a
// writer given no Losses drops them too, without failing.
func TestWriterCountsDroppedRecords(t *testing.T) {
	srv := streamtest.Start(t)
	for _, tc := range []struct {
		name   string
		losses Losses
	}{{"counted", &counted{}}, {"none", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			w, err := NewWriter(srv.JS.Conn(), slog.New(slog.NewTextHandler(&logs, nil)), tc.losses, time.Now)
			require.NoError(t, err)
			// Not running: the queue fills, and what comes after is dropped.
			for range logQueue + 3 {
				w.Add(AttemptRecord{EventID: "evt", Dest: "d"})
			}
			if c, ok := tc.losses.(*counted); ok {
				require.Equal(t, 3, c.dropped)
			}
			require.Contains(t, logs.String(), "delivery log falling behind: records dropped")
		})
	}
}
