package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/version"
)

// otelFlag is --otel-endpoint, of the commands that trace (run, publish,
// dlq replay).
func otelFlag() cli.Flag {
	return &cli.StringFlag{Name: "otel-endpoint", EnvVars: []string{"RELAY_OTEL_ENDPOINT"},
		Usage: "export traces over OTLP to this collector, http(s)://host:port (4318 for OTLP/HTTP; 4317 with OTEL_EXPORTER_OTLP_PROTOCOL=grpc); without it OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on; neither: no tracing (docs/operations.md#tracing)"}
}

// tracingOpts are --otel-endpoint and the OTEL_* environment variables.
type tracingOpts struct {
	endpoint string
	// getenv reads the environment (os.Getenv; tests give their own).
	getenv func(string) string
}

func readTracing(c *cli.Context) tracingOpts {
	return tracingOpts{endpoint: c.String("otel-endpoint"), getenv: os.Getenv}
}

// Validate checks --otel-endpoint.
func (o tracingOpts) Validate() error {
	if o.endpoint == "" {
		return nil
	}
	u, err := url.Parse(o.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--otel-endpoint %q: give the collector's URL, http://host:port or https://host:port", o.endpoint)
	}
	return nil
}

// start returns the tracer provider --otel-endpoint and the OTEL_*
// environment variables describe, and stop, which flushes the spans not
// yet exported (within 5s) and ends it. Tracing is on when an endpoint is
// given (the flag, OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), unless OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none; off, tp is nil and stop does nothing. The
// SDK reads the other variables itself (the sampler, headers, timeouts,
// the batch processor's limits, the resource's attributes).
func (o tracingOpts) start(ctx context.Context, log *slog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	getenv := o.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	off := func() {}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, off, nil
	}
	switch e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e {
	case "", "otlp":
	case "none":
		return nil, off, nil
	default:
		return nil, nil, usagef("OTEL_TRACES_EXPORTER=%s: relay exports traces over OTLP only (otlp, or none for no tracing)", e)
	}
	if o.endpoint == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, off, nil
	}
	protocol := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
	var exp sdktrace.SpanExporter
	switch protocol {
	case "http/protobuf":
		var opts []otlptracehttp.Option
		if o.endpoint != "" {
			// As OTEL_EXPORTER_OTLP_ENDPOINT: the signal's path appended.
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(o.endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		if o.endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(o.endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		return nil, nil, usagef("OTEL_EXPORTER_OTLP_PROTOCOL=%s: relay exports over http/protobuf (the default) or grpc", protocol)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	// relay's name and version, unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "relay"), attribute.String("service.version", version.Version)),
		resource.WithFromEnv())
	if err != nil {
		log.Warn("tracing: part of the resource could not be read (OTEL_RESOURCE_ATTRIBUTES?)", "err", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// The SDK's own errors (an export that failed) go to relay's log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	log.Info("tracing: spans exported over OTLP", "endpoint", destination.RedactURL(cmp.Or(o.endpoint, getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))),
		"protocol", protocol, "sampler", cmp.Or(getenv("OTEL_TRACES_SAMPLER"), "parentbased_always_on"))
	return sdk, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := sdk.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans not exported at exit", "err", err)
		}
	}, nil
}
