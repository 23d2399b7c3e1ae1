package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A record logged with a span's context carries its trace_id and span_id
// at the top level, whatever attributes and groups the logger added
// before; a record without one carries neither.
func TestLogHandler(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	local, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true}))
	localIDs := [2]string{span.SpanContext().TraceID().String(), span.SpanContext().SpanID().String()}
	remoteIDs := [2]string{(trace.TraceID{1, 2, 3}).String(), (trace.SpanID{4, 5, 6}).String()}

	for _, tc := range []struct {
		name   string
		ctx    context.Context
		logger func(*slog.Logger) *slog.Logger
		ids    [2]string // trace_id, span_id; empty: none
		group  string    // where the record's attributes land; "" top level
	}{
		{name: "no span", ctx: context.Background(), logger: func(l *slog.Logger) *slog.Logger { return l }},
		{name: "span", ctx: local, logger: func(l *slog.Logger) *slog.Logger { return l }, ids: localIDs},
		{name: "remote parent", ctx: remote, logger: func(l *slog.Logger) *slog.Logger { return l }, ids: remoteIDs},
		{name: "attributes", ctx: local, logger: func(l *slog.Logger) *slog.Logger { return l.With("component", "email") }, ids: localIDs},
		{name: "group then attributes", ctx: local,
			logger: func(l *slog.Logger) *slog.Logger { return l.With("component", "email").WithGroup("g").With("k", "v") },
			ids:    localIDs, group: "g"},
		{name: "empty group", ctx: local, logger: func(l *slog.Logger) *slog.Logger { return l.WithGroup("") }, ids: localIDs},
		{name: "group, no span", ctx: context.Background(), logger: func(l *slog.Logger) *slog.Logger { return l.WithGroup("g") }, group: "g"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := tc.logger(slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil))))
			log.InfoContext(tc.ctx, "msg", "n", 1)
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("not one JSON line: %q", buf.String())
			}
			if got := [2]string{str(line["trace_id"]), str(line["span_id"])}; got != tc.ids {
				t.Errorf("trace_id, span_id = %q, want %q: %s", got, tc.ids, buf.String())
			}
			attrs := line
			if tc.group != "" {
				attrs, _ = line[tc.group].(map[string]any)
				if attrs["trace_id"] != nil || attrs["span_id"] != nil {
					t.Errorf("the ids landed inside group %s: %s", tc.group, buf.String())
				}
			}
			if attrs["n"] != float64(1) {
				t.Errorf("the record's attribute is not where its logger put it: %s", buf.String())
			}
			if tc.name == "attributes" || tc.name == "group then attributes" {
				if line["component"] != "email" {
					t.Errorf("lost the logger's attributes: %s", buf.String())
				}
			}
		})
	}
}

func str(v any) string { s, _ := v.(string); return s }
