package telemetry

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The OTEL_* variables as the worker reads them: tracing is off without an
// endpoint, with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none; the
// protocol, endpoint, timeout, sampler and service name are what the
// variables say, the per-signal ones winning; a value that does not parse
// is an error naming the variable, and never shows a credential or a
// header value.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	const ep = "http://collector:4318"
	type want struct {
		off      string // substring of Off; "" when on
		protocol string
		endpoint string
		timeout  time.Duration
		sampler  string // the SDK sampler's description, prefix
		service  string
		headers  []string
	}
	on := want{protocol: ProtocolHTTP, endpoint: ep + "/v1/traces", timeout: 10 * time.Second,
		sampler: "ParentBased{root:AlwaysOnSampler", service: "postbox-worker"}
	with := func(f func(*want)) want { w := on; f(&w); return w }
	for _, tc := range []struct {
		name string
		env  map[string]string
		want want
		err  string // substring of the error; the case expects one when set
	}{
		{name: "nothing set", env: map[string]string{}, want: want{off: "neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}},
		{name: "disabled", env: map[string]string{EnvOTLPEndpoint: ep, EnvSDKDisabled: "TRUE", EnvOTLPProtocol: "bogus"},
			want: want{off: "OTEL_SDK_DISABLED=true"}},
		{name: "exporter none", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesExporter: "none"},
			want: want{off: "OTEL_TRACES_EXPORTER=none"}},
		{name: "endpoint only", env: map[string]string{EnvOTLPEndpoint: ep, EnvSDKDisabled: "false", EnvTracesExporter: "otlp"}, want: on},
		{name: "credentials and query left out of the endpoint",
			env:  map[string]string{EnvOTLPEndpoint: "https://user:pw-S3CRET@collector.example:4318/base?token=tok-S3CRET#f"},
			want: with(func(w *want) { w.endpoint = "https://collector.example:4318/base/v1/traces" })},
		{name: "traces endpoint as it is",
			env:  map[string]string{EnvOTLPEndpoint: "http://other:4318", EnvOTLPTracesEndpoint: "http://collector:4318/custom/path"},
			want: with(func(w *want) { w.endpoint = "http://collector:4318/custom/path" })},
		{name: "traces endpoint without a path", env: map[string]string{EnvOTLPTracesEndpoint: ep},
			want: with(func(w *want) { w.endpoint = ep + "/" })},
		{name: "grpc", env: map[string]string{EnvOTLPEndpoint: "https://collector:4317/ignored", EnvOTLPProtocol: "grpc"},
			want: with(func(w *want) { w.protocol, w.endpoint = ProtocolGRPC, "https://collector:4317" })},
		{name: "traces protocol wins", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPProtocol: "grpc", EnvOTLPTracesProtocol: "http/protobuf"},
			want: on},
		{name: "http/json refused", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPProtocol: "http/json"},
			err: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": must be http/protobuf or grpc`},
		{name: "bad traces protocol names its variable", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPProtocol: "grpc", EnvOTLPTracesProtocol: "GRPC"},
			err: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="GRPC"`},
		{name: "bad SDK_DISABLED", env: map[string]string{EnvOTLPEndpoint: ep, EnvSDKDisabled: "yes"}, err: `OTEL_SDK_DISABLED="yes"`},
		{name: "unsupported exporter", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesExporter: "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin"`},
		{name: "endpoint without a scheme", env: map[string]string{EnvOTLPEndpoint: "collector:4317"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL"},
		{name: "bad endpoint hides its credentials", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTracesEndpoint: "ftp://u:pw-S3CRET@collector"},
			err: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: must be"},
		{name: "header names, not values",
			env:  map[string]string{EnvOTLPEndpoint: ep, EnvOTLPHeaders: "Authorization=Bearer%20key-S3CRET, x-team=a,", EnvOTLPTracesHeaders: "authorization=x,x-dataset=b"},
			want: with(func(w *want) { w.headers = []string{"Authorization", "x-team", "x-dataset"} })},
		{name: "header without =", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPHeaders: "x-team=a,Authorization Bearer key-S3CRET"},
			err: "OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not name=value"},
		{name: "header badly escaped", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTracesHeaders: "api-key=%zzkey-S3CRET"},
			err: "OTEL_EXPORTER_OTLP_TRACES_HEADERS: the value of api-key (entry 1) is not validly percent-encoded"},
		{name: "header value with an encoded CR LF", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPHeaders: "api-key=key-S3CRET%0D%0AX-Injected:%201"},
			err: "OTEL_EXPORTER_OTLP_HEADERS: the value of api-key (entry 1) holds a control character"},
		{name: "timeout", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTimeout: "2500"},
			want: with(func(w *want) { w.timeout = 2500 * time.Millisecond })},
		{name: "traces timeout wins", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTimeout: "2500", EnvOTLPTracesTimeout: "700"},
			want: with(func(w *want) { w.timeout = 700 * time.Millisecond })},
		{name: "zero timeout refused", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTracesTimeout: "0"}, err: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="0"`},
		{name: "timeout past the hour refused", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTimeout: "3600001"},
			err: `OTEL_EXPORTER_OTLP_TIMEOUT="3600001": must be a whole number of milliseconds in [1, 3600000]`},
		{name: "an hour's timeout", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTimeout: "3600000"},
			want: with(func(w *want) { w.timeout = time.Hour })},
		{name: "timeout as a duration refused", env: map[string]string{EnvOTLPEndpoint: ep, EnvOTLPTimeout: "10s"}, err: `OTEL_EXPORTER_OTLP_TIMEOUT="10s"`},
		{name: "always_off", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "ALWAYS_OFF"},
			want: with(func(w *want) { w.sampler = "AlwaysOffSampler" })},
		{name: "always_on", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "always_on", EnvTracesSamplerArg: "ignored"},
			want: with(func(w *want) { w.sampler = "AlwaysOnSampler" })},
		{name: "traceidratio", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "traceidratio", EnvTracesSamplerArg: "0.25"},
			want: with(func(w *want) { w.sampler = "TraceIDRatioBased{0.25}" })},
		{name: "traceidratio without an argument", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "traceidratio"},
			want: with(func(w *want) { w.sampler = "TraceIDRatioBased{1}" })},
		{name: "parentbased_always_off", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "parentbased_always_off"},
			want: with(func(w *want) { w.sampler = "ParentBased{root:AlwaysOffSampler" })},
		{name: "parentbased_traceidratio", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "parentbased_traceidratio", EnvTracesSamplerArg: "0.5"},
			want: with(func(w *want) { w.sampler = "ParentBased{root:TraceIDRatioBased{0.5}" })},
		{name: "ratio out of range", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "parentbased_traceidratio", EnvTracesSamplerArg: "1.5"},
			err: `OTEL_TRACES_SAMPLER_ARG="1.5": must be a finite number in [0, 1]`},
		{name: "NaN ratio", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "traceidratio", EnvTracesSamplerArg: "NaN"},
			err: `OTEL_TRACES_SAMPLER_ARG="NaN": must be a finite number in [0, 1]`},
		{name: "unsupported sampler", env: map[string]string{EnvOTLPEndpoint: ep, EnvTracesSampler: "jaeger_remote"},
			err: `OTEL_TRACES_SAMPLER="jaeger_remote": must be always_on`},
		{name: "service name", env: map[string]string{EnvOTLPEndpoint: ep, EnvServiceName: "billing"},
			want: with(func(w *want) { w.service = "billing" })},
		{name: "service name from the attributes", env: map[string]string{EnvOTLPEndpoint: ep, EnvResourceAttrs: "deployment.environment=prod,service.name=shop%20eu"},
			want: with(func(w *want) { w.service = "shop eu" })},
		{name: "OTEL_SERVICE_NAME wins", env: map[string]string{EnvOTLPEndpoint: ep, EnvResourceAttrs: "service.name=shop", EnvServiceName: "billing"},
			want: with(func(w *want) { w.service = "billing" })},
		{name: "attribute without =", env: map[string]string{EnvOTLPEndpoint: ep, EnvResourceAttrs: "a=b,novalue"},
			err: "OTEL_RESOURCE_ATTRIBUTES: entry 2 is not key=value"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			got, err := FromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "S3CRET") {
					t.Fatalf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.off != "" {
				if got.On() || !strings.Contains(got.Off, tc.want.off) {
					t.Fatalf("Off = %q, want it to say %q", got.Off, tc.want.off)
				}
				return
			}
			if !got.On() {
				t.Fatalf("tracing off (%s), want on", got.Off)
			}
			if got.Protocol != tc.want.protocol || got.Endpoint != tc.want.endpoint || got.ExportTimeout != tc.want.timeout ||
				got.ServiceName != tc.want.service || !slices.Equal(got.Headers, tc.want.headers) {
				t.Errorf("got protocol %q, endpoint %q, timeout %s, service %q, headers %q; want %q, %q, %s, %q, %q",
					got.Protocol, got.Endpoint, got.ExportTimeout, got.ServiceName, got.Headers,
					tc.want.protocol, tc.want.endpoint, tc.want.timeout, tc.want.service, tc.want.headers)
			}
			if d := got.sampler().Description(); !strings.HasPrefix(d, tc.want.sampler) {
				t.Errorf("sampler %s, want %s…", d, tc.want.sampler)
			}
		})
	}
}
