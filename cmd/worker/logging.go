package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/postbox/postbox/cmd/worker/internal/telemetry"
)

// newLogger is the worker's logger: JSON on w at level, with every
// time.Duration attribute — postbox's, River's, any library's — rendered as
// a string such as "1.5s" instead of slog's default integer nanoseconds,
// and the trace_id and span_id of the span, if any, of the context a
// record is logged with (telemetry.LogHandler).
func newLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsStrings})))
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
	return slog.New(&demoteHandler{next: base.Handler(), demote: func(r slog.Record) bool {
		if r.Level != slog.LevelInfo {
			return false
		}
		for _, s := range riverChatter {
			if strings.HasSuffix(r.Message, s) {
				return true
			}
		}
		return false
	}})
}

// riverUILogger wraps base for River UI's handler: the refreshes of its
// cached counts that a shutdown cancels ("Error running query" with a
// context canceled) are logged at DEBUG, not as the errors they are not;
// a refresh that fails otherwise is still an ERROR.
func riverUILogger(base *slog.Logger) *slog.Logger {
	return slog.New(&demoteHandler{next: base.Handler(), demote: func(r slog.Record) bool {
		if r.Level != slog.LevelError || !strings.Contains(r.Message, "Error running query") {
			return false
		}
		canceled := false
		r.Attrs(func(a slog.Attr) bool {
			canceled = a.Key == "err" && strings.HasSuffix(a.Value.String(), "context canceled")
			return !canceled
		})
		return canceled
	}})
}

// demoteHandler logs the records demote matches at DEBUG.
type demoteHandler struct {
	next   slog.Handler
	demote func(r slog.Record) bool
}

func (h *demoteHandler) Enabled(ctx context.Context, level slog.Level) bool {
	// A record may become DEBUG: decided in Handle, once it is known.
	return h.next.Enabled(ctx, level)
}

func (h *demoteHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelDebug && h.demote(r) {
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

// newCLILogger is the logger of the commands a person runs at a terminal
// (every one but run and demo, whose logs go to a collector): one line per
// record, "warning: message (key=value, …)", on w.
func newCLILogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(&cliHandler{w: w, level: level, mu: &sync.Mutex{}})
}

// cliHandler writes records as sentences rather than JSON.
type cliHandler struct {
	w     io.Writer
	level slog.Leveler
	mu    *sync.Mutex // shared by the handlers derived with With
	attrs []slog.Attr
	group string // prefix of the keys of attributes added after WithGroup
}

func (h *cliHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *cliHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("debug: ")
	}
	b.WriteString(r.Message)
	attrs := append([]slog.Attr(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		if h.group != "" {
			a.Key = h.group + "." + a.Key
		}
		attrs = append(attrs, a)
		return true
	})
	for i, a := range attrs {
		sep := ", "
		if i == 0 {
			sep = " ("
		}
		fmt.Fprintf(&b, "%s%s=%s", sep, a.Key, a.Value.Resolve().String())
	}
	if len(attrs) > 0 {
		b.WriteString(")")
	}
	b.WriteString("\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *cliHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	if h.group != "" {
		for i := len(h.attrs); i < len(c.attrs); i++ {
			c.attrs[i].Key = h.group + "." + c.attrs[i].Key
		}
	}
	return &c
}

func (h *cliHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.group = strings.TrimPrefix(h.group+"."+name, ".")
	return &c
}
