package telemetry

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/postbox/postbox/cmd/worker/internal/setting"
)

// The OpenTelemetry variables the worker reads itself (docs/OPERATIONS.md,
// "Configuration"). The exporters read the rest of OTEL_EXPORTER_OTLP_*
// (certificates, compression, insecure) and the batch span processor its
// OTEL_BSP_* from the process environment, as every OpenTelemetry SDK does.
const (
	EnvSDKDisabled        = "OTEL_SDK_DISABLED"
	EnvTracesExporter     = "OTEL_TRACES_EXPORTER"
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvOTLPProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvOTLPTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvOTLPHeaders        = "OTEL_EXPORTER_OTLP_HEADERS"
	EnvOTLPTracesHeaders  = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	EnvOTLPTimeout        = "OTEL_EXPORTER_OTLP_TIMEOUT"
	EnvOTLPTracesTimeout  = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	EnvTracesSampler      = "OTEL_TRACES_SAMPLER"
	EnvTracesSamplerArg   = "OTEL_TRACES_SAMPLER_ARG"
	EnvServiceName        = "OTEL_SERVICE_NAME"
	EnvResourceAttrs      = "OTEL_RESOURCE_ATTRIBUTES"
)

// Protocols of the OTLP exporter.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES names the service.
const DefaultServiceName = "postbox-worker"

// defaultExportTimeout is the OTLP exporters' own default for
// OTEL_EXPORTER_OTLP_TIMEOUT, for the boot log.
const defaultExportTimeout = 10 * time.Second

// Config is OpenTelemetry tracing as the standard variables set it.
// Off, nothing is installed: the library's spans come from OpenTelemetry's
// no-op global provider and cost nothing.
type Config struct {
	// Off says why tracing is off; "" when it is on.
	Off string
	// Protocol is the OTLP exporter's: ProtocolHTTP or ProtocolGRPC.
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
func (t Config) On() bool { return t.Off == "" }

// FromEnv reads the OpenTelemetry variables through lookup. A value
// that does not parse is an error naming its variable: the SDK would only
// report it through its error handler and go on with a default, so a
// misspelt sampler or protocol would go unnoticed. Header values are never
// part of an error.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	// Every variable is read before any is judged: the configuration
	// reference (TestConfigReferenceMatchesCode) and the unknown-variable
	// warning learn the names from what LoadConfig asks for.
	v := map[string]string{}
	for _, name := range []string{EnvSDKDisabled, EnvTracesExporter, EnvOTLPEndpoint, EnvOTLPTracesEndpoint,
		EnvOTLPProtocol, EnvOTLPTracesProtocol, EnvOTLPHeaders, EnvOTLPTracesHeaders, EnvOTLPTimeout, EnvOTLPTracesTimeout,
		EnvTracesSampler, EnvTracesSamplerArg, EnvServiceName, EnvResourceAttrs} {
		s, _ := lookup(name)
		v[name] = strings.TrimSpace(s)
	}
	var t Config
	switch strings.ToLower(v[EnvSDKDisabled]) {
	case "", "false":
	case "true":
		t.Off = EnvSDKDisabled + "=true"
		return t, nil
	default:
		return t, fmt.Errorf("%s=%q: must be true or false", EnvSDKDisabled, v[EnvSDKDisabled])
	}
	switch strings.ToLower(v[EnvTracesExporter]) {
	case "", "otlp":
	case "none":
		t.Off = EnvTracesExporter + "=none"
		return t, nil
	default:
		return t, fmt.Errorf("%s=%q: must be otlp or none (postbox exports traces over OTLP only)",
			EnvTracesExporter, v[EnvTracesExporter])
	}
	if v[EnvOTLPEndpoint] == "" && v[EnvOTLPTracesEndpoint] == "" {
		t.Off = "neither " + EnvOTLPEndpoint + " nor " + EnvOTLPTracesEndpoint + " is set"
		return t, nil
	}

	protoVar := EnvOTLPTracesProtocol
	if v[protoVar] == "" {
		protoVar = EnvOTLPProtocol
	}
	switch t.Protocol = v[protoVar]; t.Protocol {
	case "":
		t.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return t, fmt.Errorf("%s=%q: must be %s or %s", protoVar, t.Protocol, ProtocolHTTP, ProtocolGRPC)
	}

	// Both are parsed by the exporter, the per-signal one winning; one
	// that does not parse would be logged by the SDK, value and all.
	endpoints := map[string]*url.URL{}
	for _, name := range []string{EnvOTLPEndpoint, EnvOTLPTracesEndpoint} {
		if v[name] == "" {
			continue
		}
		u, err := url.Parse(v[name])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return t, fmt.Errorf("%s: must be an http:// or https:// URL, such as http://localhost:4318 (the value is not shown: it may hold credentials)", name)
		}
		endpoints[name] = u
	}
	t.Endpoint = exportEndpoint(t.Protocol, endpoints[EnvOTLPEndpoint], endpoints[EnvOTLPTracesEndpoint])

	for _, name := range []string{EnvOTLPHeaders, EnvOTLPTracesHeaders} {
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
	for _, name := range []string{EnvOTLPTimeout, EnvOTLPTracesTimeout} {
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
	if t.Sampler, t.Ratio, err = samplerFromEnv(v[EnvTracesSampler], v[EnvTracesSamplerArg]); err != nil {
		return t, err
	}

	t.ServiceName = DefaultServiceName
	attrs, err := resourceAttributes(v[EnvResourceAttrs])
	if err != nil {
		return t, err
	}
	if name := attrs["service.name"]; name != "" {
		t.ServiceName = name
	}
	if name := v[EnvServiceName]; name != "" {
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
		r, err := setting.Number(EnvTracesSamplerArg, arg, samplerRatio)
		if err != nil {
			return "", 0, fmt.Errorf("%w (the ratio of traces %s samples)", err, name)
		}
		return name, r, nil
	}
	return "", 0, fmt.Errorf("%s=%q: must be always_on, always_off, traceidratio, parentbased_always_on, "+
		"parentbased_always_off or parentbased_traceidratio", EnvTracesSampler, name)
}

// sampler is the SDK's sampler for the configured one.
func (t Config) sampler() sdktrace.Sampler {
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
