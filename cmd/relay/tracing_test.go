package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTracingIsOffUnlessAnEndpointIsGiven: no endpoint, OTEL_SDK_DISABLED
// or OTEL_TRACES_EXPORTER=none: no tracer provider; an endpoint from the
// flag or the environment: one; an exporter or protocol relay does not
// have: a usage error.
func TestTracingIsOffUnlessAnEndpointIsGiven(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name     string
		endpoint string
		env      map[string]string
		on       bool
		usage    bool
	}{
		{name: "nothing"},
		{name: "flag", endpoint: "http://127.0.0.1:4318", on: true},
		{name: "env", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "traces env, grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{name: "disabled", endpoint: "http://127.0.0.1:4318", env: map[string]string{"OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", endpoint: "http://127.0.0.1:4318", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{name: "exporter zipkin", endpoint: "http://127.0.0.1:4318", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, usage: true},
		{name: "http/json", endpoint: "http://127.0.0.1:4318", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, usage: true},
	} {
		o := tracingOpts{endpoint: tc.endpoint, getenv: func(k string) string { return tc.env[k] }}
		require.NoError(t, o.Validate(), tc.name)
		tp, stop, err := o.start(context.Background(), log)
		if tc.usage {
			require.ErrorAs(t, err, new(usageError), tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.on, tp != nil, tc.name)
		stop()
	}
	for _, bad := range []string{"127.0.0.1:4318", "grpc://collector:4317", "http://"} {
		require.ErrorAs(t, tracingOpts{endpoint: bad}.Validate(), new(usageError), bad)
	}
}
