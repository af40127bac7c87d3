package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConnectErrorDoesNotPrintCredentials(t *testing.T) {
	t.Parallel()
	_, err := Connect(ConnConfig{URL: "nats://relay:pw-secret-1@127.0.0.1:1,nats://tok-secret-2@127.0.0.1:2", ConnectWait: 100 * time.Millisecond})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "pw-secret-1")
	require.NotContains(t, err.Error(), "tok-secret-2")
	require.Contains(t, err.Error(), "nats://xxxxx@127.0.0.1:1")

	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":             "nats://127.0.0.1:4222",
		"127.0.0.1:4222":                    "127.0.0.1:4222",
		"u:p@127.0.0.1:4222":                "xxxxx@127.0.0.1:4222",
		"tls://u:p@a:4222, nats://t@b:4222": "tls://xxxxx@a:4222, nats://xxxxx@b:4222",
		"nats://u:p%40ss@a:4222":            "nats://xxxxx@a:4222",
	} {
		require.Equal(t, want, redactURLs(in), in)
	}
}
