package migrations

import (
	"context"
	"log/slog"
)

// riverMigrateLogger is the logger rivermigrate gets. rivermigrate logs
// each migration it applies at INFO, and Up and Down log each one again
// in postbox's own words (schema, version, duration): its INFO lines go
// out at DEBUG, so each migration is logged once at INFO. Warnings and
// errors pass as they are.
func riverMigrateLogger(base *slog.Logger) *slog.Logger {
	return slog.New(infoAsDebug{base.Handler()})
}

type infoAsDebug struct{ next slog.Handler }

func (h infoAsDebug) Enabled(ctx context.Context, level slog.Level) bool {
	if level == slog.LevelInfo {
		level = slog.LevelDebug
	}
	return h.next.Enabled(ctx, level)
}

func (h infoAsDebug) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		d := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
		r.Attrs(func(a slog.Attr) bool { d.AddAttrs(a); return true })
		r = d
	}
	return h.next.Handle(ctx, r)
}

func (h infoAsDebug) WithAttrs(attrs []slog.Attr) slog.Handler {
	return infoAsDebug{h.next.WithAttrs(attrs)}
}

func (h infoAsDebug) WithGroup(name string) slog.Handler { return infoAsDebug{h.next.WithGroup(name)} }
