package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/stream"
)

// lockedBuffer is a log destination the test reads while relay writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A destination record written to the bucket by other means than relay's
// store, and invalid by the rules 'relay dest add' applies (a timeout over
// 10m), is reported and not used: its event waits. Once the record is
// valid, the event is delivered.
func TestInvalidDestinationRecordIsNotUsed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	s := newSink(t, nil)
	d := e.addDest(destination.Destination{Name: "hand", URL: s.URL})
	kv, err := e.js.KeyValue(ctx, stream.DestBucket)
	require.NoError(t, err)
	bad := d
	bad.Timeout = destination.Duration(time.Hour)
	b, err := json.Marshal(bad)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "hand", b)
	require.NoError(t, err)

	var logs lockedBuffer
	e.startRelay(func(c *relay.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	id := e.publish("hand", "", `{"h":1}`).ID
	eventually(t, 10*time.Second, func() bool {
		return bytes.Contains([]byte(logs.String()), []byte(`msg="destination stored invalid; not used until it is fixed ('relay dest update')" dest=hand err="timeout 1h0m0s must be between 100ms and 10m"`))
	}, "the invalid record reported")
	require.Zero(t, s.len(), "not delivered through the invalid record")

	b, err = json.Marshal(d)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "hand", b)
	require.NoError(t, err)
	eventually(t, 15*time.Second, func() bool { return s.delivered()[id] == 1 }, "delivered once the record is valid")
}
