package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds trace_id and span_id to every record logged with a
// context that holds a valid span (the library logs with the row's or
// the job's context), so a log line leads to its trace.
type LogHandler struct {
	// base is the handler before the first WithGroup; next is base with
	// the groups and the attributes after them (steps) applied. The ids
	// go on base, so they stay top-level whatever group a logger opened.
	base, next slog.Handler
	steps      []func(slog.Handler) slog.Handler
}

// NewLogHandler is h with the ids of each record's span added.
func NewLogHandler(h slog.Handler) *LogHandler { return &LogHandler{base: h, next: h} }

func (h *LogHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
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

func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(h.steps) == 0 {
		n := h.next.WithAttrs(attrs)
		return &LogHandler{base: n, next: n}
	}
	return h.with(func(n slog.Handler) slog.Handler { return n.WithAttrs(attrs) })
}

func (h *LogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(n slog.Handler) slog.Handler { return n.WithGroup(name) })
}

func (h *LogHandler) with(step func(slog.Handler) slog.Handler) *LogHandler {
	return &LogHandler{base: h.base, next: step(h.next), steps: append(h.steps[:len(h.steps):len(h.steps)], step)}
}
