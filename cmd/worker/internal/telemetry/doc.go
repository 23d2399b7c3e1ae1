// Package telemetry is the worker's OpenTelemetry tracing: the standard
// OTEL_* variables read and checked (FromEnv), the OTLP exporter, resource,
// sampler and global provider installed from them (Start, Stop), and the
// log handler that puts the trace_id and span_id of a record's span on its
// line (LogHandler).
//
// FromEnv checks what the SDK would only hand to its error handler before
// going on with a default: a misspelt sampler or protocol, a timeout of
// zero, a header entry it cannot parse. Each is an error naming its
// variable, never quoting a header value or an endpoint's credentials, so
// the worker refuses to boot instead of tracing in a way nobody asked for.
// The exporters still read the rest of OTEL_EXPORTER_OTLP_* (certificates,
// compression) and the batch span processor its OTEL_BSP_* themselves.
//
// Tracing off installs nothing: the library's spans come from
// OpenTelemetry's no-op global provider and cost nothing.
package telemetry
