package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/go-logr/logr"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/postbox/postbox/cmd/worker/internal/setting"
	"github.com/postbox/postbox/internal/engine/version"
)

// The OpenTelemetry variables the worker reads itself (docs/OPERATIONS.md,
// "Configuration"). The exporters read the rest of OTEL_EXPORTER_OTLP_*
// (certificates, compression, insecure) and the batch span processor its
// OTEL_BSP_* from the process environment, as every OpenTelemetry SDK does.
const (
	envOTelSDKDisabled      = "OTEL_SDK_DISABLED"
	envOTelTracesExporter   = "OTEL_TRACES_EXPORTER"
	envOTLPEndpoint         = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTracesEndpoint   = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envOTLPProtocol         = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envOTLPTracesProtocol   = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envOTLPHeaders          = "OTEL_EXPORTER_OTLP_HEADERS"
	envOTLPTracesHeaders    = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envOTLPTimeout          = "OTEL_EXPORTER_OTLP_TIMEOUT"
	envOTLPTracesTimeout    = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	envOTelTracesSampler    = "OTEL_TRACES_SAMPLER"
	envOTelTracesSamplerArg = "OTEL_TRACES_SAMPLER_ARG"
	envOTelServiceName      = "OTEL_SERVICE_NAME"
	envOTelResourceAttrs    = "OTEL_RESOURCE_ATTRIBUTES"
)

// Protocols of the OTLP exporter.
const (
	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
)

// defaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES names the service.
const defaultServiceName = "postbox-worker"

// defaultExportTimeout is the OTLP exporters' own default for
// OTEL_EXPORTER_OTLP_TIMEOUT, for the boot log.
const defaultExportTimeout = 10 * time.Second

// tracingFlushTimeout bounds the flush of the spans still buffered at
// shutdown, after the replica has stopped.
const tracingFlushTimeout = 5 * time.Second

// TracingConfig is OpenTelemetry tracing as the standard variables set it.
// Off, nothing is installed: the library's spans come from OpenTelemetry's
// no-op global provider and cost nothing.
type TracingConfig struct {
	// Off says why tracing is off; "" when it is on.
	Off string
	// Protocol is the OTLP exporter's: protocolHTTP or protocolGRPC.
	Protocol string
	// Endpoint is where the exporter sends spans, without userinfo,
	// query or fragment: for the boot log.
	Endpoint string
	// Headers are the names (never the values: they may hold an API key)
	// of the headers OTEL_EXPORTER_OTLP_(TRACES_)HEADERS add to each export.
	Headers []string
	// ExportTimeout bounds each export request.
	ExportTimeout time.Duration
	// Sampler is OTEL_TRACES_SAMPLER's value, parentbased_always_on when
	// unset; Ratio is the traceidratio samplers' OTEL_TRACES_SAMPLER_ARG.
	Sampler string
	Ratio   float64
	// ServiceName is the resource's service.name.
	ServiceName string
}

// On reports whether spans are recorded and exported.
func (t TracingConfig) On() bool { return t.Off == "" }

// tracingFromEnv reads the OpenTelemetry variables through lookup. A value
// that does not parse is an error naming its variable: the SDK would only
// report it through its error handler and go on with a default, so a
// misspelt sampler or protocol would go unnoticed. Header values are never
// part of an error.
func tracingFromEnv(lookup func(string) (string, bool)) (TracingConfig, error) {
	// Every variable is read before any is judged: the configuration
	// reference (TestConfigReferenceMatchesCode) and the unknown-variable
	// warning learn the names from what LoadConfig asks for.
	v := map[string]string{}
	for _, name := range []string{envOTelSDKDisabled, envOTelTracesExporter, envOTLPEndpoint, envOTLPTracesEndpoint,
		envOTLPProtocol, envOTLPTracesProtocol, envOTLPHeaders, envOTLPTracesHeaders, envOTLPTimeout, envOTLPTracesTimeout,
		envOTelTracesSampler, envOTelTracesSamplerArg, envOTelServiceName, envOTelResourceAttrs} {
		s, _ := lookup(name)
		v[name] = strings.TrimSpace(s)
	}
	var t TracingConfig
	switch strings.ToLower(v[envOTelSDKDisabled]) {
	case "", "false":
	case "true":
		t.Off = envOTelSDKDisabled + "=true"
		return t, nil
	default:
		return t, fmt.Errorf("%s=%q: must be true or false", envOTelSDKDisabled, v[envOTelSDKDisabled])
	}
	switch strings.ToLower(v[envOTelTracesExporter]) {
	case "", "otlp":
	case "none":
		t.Off = envOTelTracesExporter + "=none"
		return t, nil
	default:
		return t, fmt.Errorf("%s=%q: must be otlp or none (postbox exports traces over OTLP only)",
			envOTelTracesExporter, v[envOTelTracesExporter])
	}
	if v[envOTLPEndpoint] == "" && v[envOTLPTracesEndpoint] == "" {
		t.Off = "neither " + envOTLPEndpoint + " nor " + envOTLPTracesEndpoint + " is set"
		return t, nil
	}

	protoVar := envOTLPTracesProtocol
	if v[protoVar] == "" {
		protoVar = envOTLPProtocol
	}
	switch t.Protocol = v[protoVar]; t.Protocol {
	case "":
		t.Protocol = protocolHTTP
	case protocolHTTP, protocolGRPC:
	default:
		return t, fmt.Errorf("%s=%q: must be %s or %s", protoVar, t.Protocol, protocolHTTP, protocolGRPC)
	}

	// Both are parsed by the exporter, the per-signal one winning; one
	// that does not parse would be logged by the SDK, value and all.
	endpoints := map[string]*url.URL{}
	for _, name := range []string{envOTLPEndpoint, envOTLPTracesEndpoint} {
		if v[name] == "" {
			continue
		}
		u, err := url.Parse(v[name])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return t, fmt.Errorf("%s: must be an http:// or https:// URL, such as http://localhost:4318 (the value is not shown: it may hold credentials)", name)
		}
		endpoints[name] = u
	}
	t.Endpoint = exportEndpoint(t.Protocol, endpoints[envOTLPEndpoint], endpoints[envOTLPTracesEndpoint])

	for _, name := range []string{envOTLPHeaders, envOTLPTracesHeaders} {
		names, err := headerNames(name, v[name])
		if err != nil {
			return t, err
		}
		for _, n := range names {
			if !slices.ContainsFunc(t.Headers, func(h string) bool { return strings.EqualFold(h, n) }) {
				t.Headers = append(t.Headers, n)
			}
		}
	}

	t.ExportTimeout = defaultExportTimeout
	for _, name := range []string{envOTLPTimeout, envOTLPTracesTimeout} {
		if v[name] == "" {
			continue
		}
		ms, err := strconv.Atoi(v[name])
		if err != nil || ms <= 0 || ms > maxExportTimeoutMS {
			// Zero would leave an export without a deadline of its own;
			// past the cap, the milliseconds overflow a time.Duration long
			// before any collector is worth waiting for.
			return t, fmt.Errorf("%s=%q: must be a whole number of milliseconds in [1, %d] (default 10000)", name, v[name], maxExportTimeoutMS)
		}
		t.ExportTimeout = time.Duration(ms) * time.Millisecond
	}

	var err error
	if t.Sampler, t.Ratio, err = samplerFromEnv(v[envOTelTracesSampler], v[envOTelTracesSamplerArg]); err != nil {
		return t, err
	}

	t.ServiceName = defaultServiceName
	attrs, err := resourceAttributes(v[envOTelResourceAttrs])
	if err != nil {
		return t, err
	}
	if name := attrs["service.name"]; name != "" {
		t.ServiceName = name
	}
	if name := v[envOTelServiceName]; name != "" {
		t.ServiceName = name
	}
	return t, nil
}

// maxExportTimeoutMS caps OTEL_EXPORTER_OTLP_TIMEOUT: an hour.
const maxExportTimeoutMS = 3_600_000

// samplerRatio is OTEL_TRACES_SAMPLER_ARG's range for the ratio samplers.
var samplerRatio = setting.Interval{Lo: 0, Hi: 1}

// samplerFromEnv checks OTEL_TRACES_SAMPLER and its argument against the
// specification's values. sdktrace.NewTracerProvider reads them too, but
// hands a bad value to the error handler and falls back to the default
// (an unknown sampler) or to a ratio of 1 (a bad argument).
func samplerFromEnv(name, arg string) (string, float64, error) {
	name = strings.ToLower(name)
	switch name {
	case "":
		return "parentbased_always_on", 1, nil
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return name, 1, nil
	case "traceidratio", "parentbased_traceidratio":
		if arg == "" {
			return name, 1, nil
		}
		r, err := setting.Number(envOTelTracesSamplerArg, arg, samplerRatio)
		if err != nil {
			return "", 0, fmt.Errorf("%w (the ratio of traces %s samples)", err, name)
		}
		return name, r, nil
	}
	return "", 0, fmt.Errorf("%s=%q: must be always_on, always_off, traceidratio, parentbased_always_on, "+
		"parentbased_always_off or parentbased_traceidratio", envOTelTracesSampler, name)
}

// sampler is the SDK's sampler for the configured one.
func (t TracingConfig) sampler() sdktrace.Sampler {
	switch t.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(t.Ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.Ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// exportEndpoint is where the exporter sends spans, as the OTLP exporters
// derive it: OTLP/HTTP posts to the per-signal URL as it is, or to the
// base URL's /v1/traces; OTLP/gRPC dials the host. Userinfo, query and
// fragment are left out: it is for the log.
func exportEndpoint(protocol string, base, traces *url.URL) string {
	u, p := traces, ""
	if u != nil {
		p = cmp.Or(u.Path, "/")
	} else {
		u, p = base, path.Join(base.Path, "/v1/traces")
	}
	if protocol == protocolGRPC {
		p = ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}).String()
}

// headerNames checks an OTEL_EXPORTER_OTLP_HEADERS-style list
// (key=value,…, values percent-encoded) as the exporter parses it, and
// returns its header names. The exporter logs an entry it cannot parse
// whole, so one is refused here, by its position only.
func headerNames(name, s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var names []string
	for i, entry := range strings.Split(s, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		k, val, ok := strings.Cut(entry, "=")
		k = strings.TrimSpace(k)
		if !ok || !validHeaderName(k) {
			return nil, fmt.Errorf("%s: entry %d is not name=value with a valid header name (values are not shown)", name, i+1)
		}
		v, err := url.PathUnescape(val)
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %s (entry %d) is not validly percent-encoded (values are not shown)", name, k, i+1)
		}
		// The exporter would send a CR or LF as it is and fail every
		// export: refused at boot instead.
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("%s: the value of %s (entry %d) holds a control character (CR, LF, NUL…) once decoded (values are not shown)", name, k, i+1)
		}
		names = append(names, k)
	}
	return names, nil
}

// validHeaderName is an HTTP token, as the exporter requires.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// resourceAttributes checks OTEL_RESOURCE_ATTRIBUTES (key=value,…, values
// percent-encoded) as the SDK parses it and returns it decoded. The SDK
// reports an entry it cannot parse with its text, so one is refused here
// by its position.
func resourceAttributes(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for i, entry := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(entry, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%s: entry %d is not key=value", envOTelResourceAttrs, i+1)
		}
		d, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %s (entry %d) is not validly percent-encoded", envOTelResourceAttrs, strings.TrimSpace(k), i+1)
		}
		out[strings.TrimSpace(k)] = d
	}
	return out, nil
}

// startTracing installs tracing when cfg is on: the OTLP exporter behind a
// batch span processor, the resource, the sampler, and the provider and
// the W3C propagators as OpenTelemetry's globals. Off, it installs nothing
// and returns nil. The exporters read the rest of OTEL_EXPORTER_OTLP_*
// (headers, timeout, TLS) from the environment themselves, each export
// under its timeout; stopTracing flushes what is left.
func startTracing(ctx context.Context, cfg TracingConfig, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if !cfg.On() {
		log.Info("tracing off", "reason", cfg.Off)
		return nil, nil
	}
	// Before the exporter reads the environment: the SDK's own reports
	// go to the worker's log, without their key-value pairs (a header
	// entry, a URL).
	otel.SetLogger(logr.New(otelLogSink{log: log}))
	otel.SetErrorHandler(newOTelErrorHandler(log))

	exp, err := newExporter(ctx, cfg.Protocol)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter (%s): %w", cfg.Protocol, err)
	}
	res, err := tracingResource(ctx)
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
	if protocol == protocolGRPC {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

// tracingResource is resource.Default() with postbox's service.name and
// service.version, under what OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES set.
func tracingResource(ctx context.Context) (*resource.Resource, error) {
	ours := resource.NewSchemaless(attribute.String("service.name", defaultServiceName),
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

// stopTracing flushes the spans still buffered and stops the exporter,
// within tracingFlushTimeout: a collector that does not answer costs the
// spans, not the shutdown. Nil (tracing off) does nothing.
func stopTracing(tp *sdktrace.TracerProvider, log *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing the last spans failed; they are lost", "error", err.Error())
	}
}

// riverTracing is River's own tracing when tp is set: a span per job
// worked (river.work/<kind>) and per insert, from otelriver. Nil adds
// nothing.
func riverTracing(tp trace.TracerProvider) []rivertype.Middleware {
	if tp == nil {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              tp,
		EnableWorkSpanJobKindSuffix: true,
	})}
}

// newOTelErrorHandler logs what the SDK cannot handle (an export that
// failed, a full queue) as warnings: the first at once, then at most one
// a minute with the count of those left out, so a collector that is down
// does not flood the log.
func newOTelErrorHandler(log *slog.Logger) otel.ErrorHandler {
	var (
		mu         sync.Mutex
		last       time.Time
		suppressed int
	)
	return otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < time.Minute {
			suppressed++
			mu.Unlock()
			return
		}
		n := suppressed
		last, suppressed = now, 0
		mu.Unlock()
		log.Warn("tracing: spans not exported", "error", err.Error(), "errors_not_logged", n)
	})
}

// otelLogSink is the SDK's internal logger (otel.SetLogger) on the
// worker's: errors and warnings with their message and error only — the
// SDK attaches the input it could not parse, which can be a header value.
type otelLogSink struct{ log *slog.Logger }

func (s otelLogSink) Init(logr.RuntimeInfo) {}

// Enabled admits errors and the SDK's warnings (V(1)); its info and debug
// messages are left out.
func (s otelLogSink) Enabled(level int) bool { return level <= 1 }

func (s otelLogSink) Info(_ int, msg string, _ ...any) {
	s.log.Warn("opentelemetry: " + msg)
}

func (s otelLogSink) Error(err error, msg string, _ ...any) {
	e := ""
	if err != nil {
		e = err.Error()
	}
	s.log.Warn("opentelemetry: "+msg, "error", e)
}

func (s otelLogSink) WithValues(...any) logr.LogSink { return s }
func (s otelLogSink) WithName(string) logr.LogSink   { return s }

// traceHandler adds trace_id and span_id to every record logged with a
// context that holds a valid span (the library logs with the row's or
// the job's context), so a log line leads to its trace.
type traceHandler struct {
	// base is the handler before the first WithGroup; next is base with
	// the groups and the attributes after them (steps) applied. The ids
	// go on base, so they stay top-level whatever group a logger opened.
	base, next slog.Handler
	steps      []func(slog.Handler) slog.Handler
}

func newTraceHandler(h slog.Handler) *traceHandler { return &traceHandler{base: h, next: h} }

func (h *traceHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return h.next.Handle(ctx, r)
	}
	ids := []slog.Attr{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
	if len(h.steps) == 0 {
		r = r.Clone()
		r.AddAttrs(ids...)
		return h.next.Handle(ctx, r)
	}
	next := h.base.WithAttrs(ids)
	for _, step := range h.steps {
		next = step(next)
	}
	return next.Handle(ctx, r)
}

func (h *traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(h.steps) == 0 {
		n := h.next.WithAttrs(attrs)
		return &traceHandler{base: n, next: n}
	}
	return h.with(func(n slog.Handler) slog.Handler { return n.WithAttrs(attrs) })
}

func (h *traceHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(n slog.Handler) slog.Handler { return n.WithGroup(name) })
}

func (h *traceHandler) with(step func(slog.Handler) slog.Handler) *traceHandler {
	return &traceHandler{base: h.base, next: step(h.next), steps: append(h.steps[:len(h.steps):len(h.steps)], step)}
}
