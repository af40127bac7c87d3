package stream

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// relay's own API requests (the check's gets, pull requests) go to the API
// of the JetStream relay was given: its domain or prefix too.
func TestAPIPrefixFollowsTheJetStreamsOptions(t *testing.T) {
	nc := &nats.Conn{Opts: nats.GetDefaultOptions()}
	for _, c := range []struct {
		make func() (jetstream.JetStream, error)
		want string
	}{
		{func() (jetstream.JetStream, error) { return jetstream.New(nc) }, "$JS.API."},
		{func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(nc, "hub") }, "$JS.hub.API."},
		{func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "ACC.API") }, "ACC.API."},
		{func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "ACC.API.") }, "ACC.API."},
	} {
		js, err := c.make()
		require.NoError(t, err)
		require.Equal(t, c.want, APIPrefix(js))
	}
}
