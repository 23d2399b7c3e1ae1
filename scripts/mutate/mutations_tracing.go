package main

// Mutations of the worker's OpenTelemetry wiring (cmd/worker and
// cmd/worker/internal/telemetry): the OTEL_* configuration and its
// refusals, the provider handed to the dispatchers and to River, the flush
// at shutdown, trace ids in the log lines, and the endpoints' traceparent
// opt-in in the CLI. Each names the
// test that must turn red.
//
// Left out as equivalent mutants, checked by hand: not setting the global
// provider or propagator (nothing in postbox reads them: the dispatchers
// and River get the provider itself; they are for third-party
// instrumentation), and dropping sdktrace.WithSampler (the SDK then reads
// OTEL_TRACES_SAMPLER itself, the same value LoadConfig already checked).
func init() {
	const (
		configGo    = "cmd/worker/internal/telemetry/config.go"
		otlpEnvGo   = "cmd/worker/internal/telemetry/otlpenv.go"
		providerGo  = "cmd/worker/internal/telemetry/provider.go"
		logHandler  = "cmd/worker/internal/telemetry/loghandler.go"
		replicaGo   = "cmd/worker/replica.go"
		runGo       = "cmd/worker/run.go"
		loggingGo   = "cmd/worker/logging.go"
		endpointsGo = "cmd/worker/endpoints.go"
		unknownGo   = "cmd/worker/unknownvars.go"
		pkg         = "./cmd/worker/"
		telemetry   = "./cmd/worker/internal/telemetry/"
	)
	register(
		// The provider reaches what makes spans.
		Mutation{
			Name:    "tracing: provider not passed to outbox.Config",
			File:    replicaGo,
			Find:    "Keys:        cfg.Keys,\n\n\t\tTracerProvider: opts.TracerProvider,",
			Replace: "Keys:        cfg.Keys,\n\n\t\tTracerProvider: nil,",
			Pkg:     pkg,
			Test:    "TestTracingReplicaPassesTheProvider",
		},
		Mutation{
			Name:    "tracing: provider not passed to webhook.Config",
			File:    replicaGo,
			Find:    "TracerProvider: opts.TracerProvider,\n\t\tOnDisable:",
			Replace: "TracerProvider: nil,\n\t\tOnDisable:",
			Pkg:     pkg,
			Test:    "TestTracingReplicaPassesTheProvider",
		},
		Mutation{
			Name:    "tracing: River's jobs not traced (no otelriver middleware)",
			File:    replicaGo,
			Find:    "Middleware:   riverTracing(opts.TracerProvider),",
			Replace: "Middleware:   riverTracing(nil),",
			Pkg:     pkg,
			Test:    "TestTracingEndToEnd",
		},
		Mutation{
			Name:    "tracing: the replica gets no provider when tracing is on",
			File:    runGo,
			Find:    "\tif tp != nil {\n\t\topts.TracerProvider = tp\n\t}",
			Replace: "",
			Pkg:     pkg,
			Test:    "TestTracingEndToEnd",
		},
		Mutation{
			Name:    "tracing: no flush at shutdown",
			File:    runGo,
			Find:    "\tdefer telemetry.Stop(tp, log.With(\"component\", \"tracing\"))\n",
			Replace: "",
			Pkg:     pkg,
			Test:    "TestTracingFlushedAtShutdown",
		},
		Mutation{
			Name:    "tracing: grpc exports over OTLP/HTTP",
			File:    providerGo,
			Find:    "\tif protocol == ProtocolGRPC {\n\t\treturn otlptracegrpc.New(ctx)\n\t}",
			Replace: "\tif protocol == \"\" {\n\t\treturn otlptracegrpc.New(ctx)\n\t}",
			Pkg:     pkg,
			Test:    "TestTracingExportsOverGRPC",
		},
		Mutation{
			Name:    "tracing: resource without postbox's service.name",
			File:    providerGo,
			Find:    "resource.NewSchemaless(attribute.String(\"service.name\", DefaultServiceName),",
			Replace: "resource.NewSchemaless(",
			Pkg:     pkg,
			Test:    "TestTracingEndToEnd",
		},
		Mutation{
			Name:    "tracing: OTEL_SERVICE_NAME loses to postbox's default",
			File:    providerGo,
			Find:    "\treturn resource.Merge(res, fromEnv)",
			Replace: "\t_ = fromEnv\n\treturn res, nil",
			Pkg:     pkg,
			Test:    "TestTracingFlushedAtShutdown",
		},

		// The configuration and its refusals.
		Mutation{
			Name:    "tracing: OTEL_SDK_DISABLED=true ignored",
			File:    configGo,
			Find:    "\t\tt.Off = EnvSDKDisabled + \"=true\"\n\t\treturn t, nil",
			Replace: "",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: OTEL_TRACES_EXPORTER=none ignored",
			File:    configGo,
			Find:    "\t\tt.Off = EnvTracesExporter + \"=none\"\n\t\treturn t, nil",
			Replace: "",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: an unknown protocol is accepted",
			File:    configGo,
			Find:    "\t\treturn t, fmt.Errorf(\"%s=%q: must be %s or %s\", protoVar, t.Protocol, ProtocolHTTP, ProtocolGRPC)",
			Replace: "",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: the base protocol wins over the traces one",
			File:    configGo,
			Find:    "\tprotoVar := EnvOTLPTracesProtocol\n\tif v[protoVar] == \"\" {\n\t\tprotoVar = EnvOTLPProtocol\n\t}",
			Replace: "\tprotoVar := EnvOTLPProtocol\n\tif v[protoVar] == \"\" {\n\t\tprotoVar = EnvOTLPTracesProtocol\n\t}",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: the logged endpoint keeps its userinfo",
			File:    otlpEnvGo,
			Find:    "return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}).String()",
			Replace: "return (&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host, Path: p}).String()",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: a malformed header entry is passed to the exporter (which logs it)",
			File:    otlpEnvGo,
			Find:    "if !ok || !validHeaderName(k) {",
			Replace: "if false && (!ok || !validHeaderName(k)) {",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: OTEL_EXPORTER_OTLP_TIMEOUT=0 (no deadline) accepted",
			File:    configGo,
			Find:    "if err != nil || ms <= 0 || ms > maxExportTimeoutMS {",
			Replace: "if err != nil || ms < 0 || ms > maxExportTimeoutMS {",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: an unsupported sampler falls back to the default",
			File:    configGo,
			Find:    "\treturn \"\", 0, fmt.Errorf(\"%s=%q: must be always_on, always_off, traceidratio, parentbased_always_on, \"+",
			Replace: "\treturn \"parentbased_always_on\", 1, nil\n\treturn \"\", 0, fmt.Errorf(\"%s=%q: must be always_on, always_off, traceidratio, parentbased_always_on, \"+",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: always_off samples everything",
			File:    configGo,
			Find:    "\tcase \"always_off\":\n\t\treturn sdktrace.NeverSample()",
			Replace: "\tcase \"always_off\":\n\t\treturn sdktrace.AlwaysSample()",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: traceidratio ignores its ratio",
			File:    configGo,
			Find:    "\tcase \"traceidratio\":\n\t\treturn sdktrace.TraceIDRatioBased(t.Ratio)",
			Replace: "\tcase \"traceidratio\":\n\t\treturn sdktrace.TraceIDRatioBased(1)",
			Pkg:     telemetry,
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "tracing: OTEL_* variables flagged as unknown",
			File:    unknownGo,
			Find:    "if strings.HasPrefix(n, \"OTEL_\") {",
			Replace: "if false {",
			Pkg:     pkg,
			Test:    "TestTracingVariablesAreNotFlaggedUnknown",
		},

		// Trace ids in the log lines.
		Mutation{
			Name:    "tracing: log lines without trace ids",
			File:    loggingGo,
			Find:    "return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsStrings})))",
			Replace: "_ = telemetry.NewLogHandler // the import, kept\n\treturn slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsStrings}))",
			Pkg:     pkg,
			Test:    "TestTracingLogLinesCarryTraceIDs",
		},
		Mutation{
			Name:    "tracing: the log's trace ids land inside the logger's group",
			File:    logHandler,
			Find:    "\tif len(h.steps) == 0 {\n\t\tr = r.Clone()",
			Replace: "\tif true {\n\t\tr = r.Clone()",
			Pkg:     telemetry,
			Test:    "TestLogHandler",
		},
		Mutation{
			Name:    "tracing: the log's ids are the trace id twice",
			File:    logHandler,
			Find:    "slog.String(\"span_id\", sc.SpanID().String())",
			Replace: "slog.String(\"span_id\", sc.TraceID().String())",
			Pkg:     telemetry,
			Test:    "TestLogHandler",
		},

		// The endpoints' opt-in.
		Mutation{
			Name:    "tracing: endpoints create ignores --traceparent",
			File:    endpointsGo,
			Find:    "SendTraceparent: *traceparent}",
			Replace: "SendTraceparent: *traceparent && false}",
			Pkg:     pkg,
			Test:    "TestEndpointsTraceparentCreateSetList",
		},
		Mutation{
			Name:    "tracing: endpoints traceparent on turns it off",
			File:    endpointsGo,
			Find:    "\t\t\t\ton = true\n",
			Replace: "\t\t\t\ton = false\n",
			Pkg:     pkg,
			Test:    "TestEndpointsTraceparentCreateSetList",
		},
		Mutation{
			Name:    "tracing: endpoints list shows every endpoint off",
			File:    endpointsGo,
			Find:    "ok, lat, onOff(ep.SendTraceparent),\n",
			Replace: "ok, lat, onOff(false),\n",
			Pkg:     pkg,
			Test:    "TestEndpointsTraceparentCreateSetList",
		},
	)
}
