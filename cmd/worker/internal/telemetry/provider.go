package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/postbox/postbox/internal/engine/version"
)

// flushTimeout bounds the flush of the spans still buffered at shutdown,
// after the replica has stopped.
const flushTimeout = 5 * time.Second

// Start installs tracing when cfg is on: the OTLP exporter behind a
// batch span processor, the resource, the sampler, and the provider and
// the W3C propagators as OpenTelemetry's globals. Off, it installs nothing
// and returns nil. The exporters read the rest of OTEL_EXPORTER_OTLP_*
// (headers, timeout, TLS) from the environment themselves, each export
// under its timeout; Stop flushes what is left.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if !cfg.On() {
		log.Info("tracing off", "reason", cfg.Off)
		return nil, nil
	}
	// Before the exporter reads the environment: the SDK's own reports
	// go to the worker's log, without their key-value pairs (a header
	// entry, a URL).
	otel.SetLogger(logr.New(sdkLogSink{log: log}))
	otel.SetErrorHandler(newErrorHandler(log))

	exp, err := newExporter(ctx, cfg.Protocol)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter (%s): %w", cfg.Protocol, err)
	}
	res, err := newResource(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(cfg.sampler()),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	args := []any{"exporter", "otlp", "protocol", cfg.Protocol, "endpoint", cfg.Endpoint,
		"export_timeout", cfg.ExportTimeout.String(), "sampler", cfg.Sampler, "service_name", cfg.ServiceName}
	if strings.HasSuffix(cfg.Sampler, "traceidratio") {
		args = append(args, "sampler_ratio", cfg.Ratio)
	}
	if len(cfg.Headers) > 0 {
		args = append(args, "headers", strings.Join(cfg.Headers, ","))
	}
	log.Info("tracing on", args...)
	return tp, nil
}

// newExporter is the OTLP exporter of protocol, configured by the
// environment. Neither connects here: OTLP/HTTP posts per export, OTLP/gRPC
// dials lazily.
func newExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	if protocol == ProtocolGRPC {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

// newResource is resource.Default() with postbox's service.name and
// service.version, under what OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES set.
func newResource(ctx context.Context) (*resource.Resource, error) {
	ours := resource.NewSchemaless(attribute.String("service.name", DefaultServiceName),
		attribute.String("service.version", version.Get().Version))
	res, err := resource.Merge(resource.Default(), ours)
	if err != nil {
		return nil, err
	}
	fromEnv, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, err
	}
	return resource.Merge(res, fromEnv)
}

// Stop flushes the spans still buffered and stops the exporter, within
// flushTimeout: a collector that does not answer costs the spans, not the
// shutdown. Nil (tracing off) does nothing.
func Stop(tp *sdktrace.TracerProvider, log *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing the last spans failed; they are lost", "error", err.Error())
	}
}
