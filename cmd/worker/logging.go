package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
)

// newLogger is the worker's logger: JSON on w at level, with every
// time.Duration attribute — postbox's, River's, any library's — rendered as
// a string such as "1.5s" instead of slog's default integer nanoseconds.
func newLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsStrings}))
}

// durationsAsStrings is the ReplaceAttr that renders durations as strings.
func durationsAsStrings(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// riverChatter are the messages River logs at INFO that are routine, not
// news: the producer's job counts every 5 s per queue whenever they
// changed (most lines of a short run) and the maintenance services' "Ran
// successfully" passes (the job cleaner's, every few minutes). They are logged at DEBUG instead, so LOG_LEVEL=debug still
// shows them. Matched by message suffix: River prefixes each with its
// service name ("producer: Producer job counts").
var riverChatter = []string{
	": Producer job counts",
	": Ran successfully",
}

// riverLogger wraps base for river.Config.Logger: River's routine INFO
// messages (riverChatter) go out at DEBUG, everything else as River logs
// it.
func riverLogger(base *slog.Logger) *slog.Logger {
	return slog.New(&demoteHandler{next: base.Handler(), demote: func(msg string) bool {
		for _, s := range riverChatter {
			if strings.HasSuffix(msg, s) {
				return true
			}
		}
		return false
	}})
}

// demoteHandler logs INFO records whose message demote matches at DEBUG.
type demoteHandler struct {
	next   slog.Handler
	demote func(msg string) bool
}

func (h *demoteHandler) Enabled(ctx context.Context, level slog.Level) bool {
	// An INFO record may become DEBUG: decided in Handle, once the message
	// is known.
	return h.next.Enabled(ctx, level)
}

func (h *demoteHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && h.demote(r.Message) {
		if !h.next.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		d := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
		r.Attrs(func(a slog.Attr) bool { d.AddAttrs(a); return true })
		r = d
	}
	return h.next.Handle(ctx, r)
}

func (h *demoteHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &demoteHandler{next: h.next.WithAttrs(attrs), demote: h.demote}
}

func (h *demoteHandler) WithGroup(name string) slog.Handler {
	return &demoteHandler{next: h.next.WithGroup(name), demote: h.demote}
}
