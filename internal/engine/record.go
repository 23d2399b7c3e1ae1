package engine

import (
	"context"
	"errors"
	"log/slog"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Report is how a transport words the record of one attempt's mark, as
// plain data built before the mark: which logger and attributes name the
// row, which table labels the shared metrics, and the line each way the
// mark can end. Record reads it the same way for both transports.
type Report struct {
	Logger *slog.Logger
	// Attrs lead every line: the row's id under its transport's key
	// ("row_id") and what else names the attempt. A transport whose
	// later steps log under the same attributes carries them on Logger
	// (slog.Logger.With: webhook's "delivery_id") and leaves Attrs empty.
	Attrs   []any
	Metrics *Metrics
	Outbox  string // the table, the shared metrics' label
	Stale   Line   // a mark dropped as stale (claim.ErrStale): logged at warn
	Lost    Line   // a mark that could not run: logged at error, with its "error"
	// Applied is an applied mark's line; Observe, when set, runs first and
	// feeds the transport's own metrics (it may read what the mark set).
	Applied Line
	Observe func()
}

// Line is one log line: its level (Stale and Lost have theirs), message
// and attributes after Report.Attrs. A Line with no message logs nothing.
type Line struct {
	Level slog.Level
	Msg   string
	Attrs []any
}

// Record is the last stage of both transports' outcome pipeline: it runs
// the attempt's mark (through claim.Group.Mark or claim.MarkAlone), then,
// in this order, counts and logs a stale mark, counts and logs a mark that
// failed, or observes and logs the applied one. It returns the mark's
// error for the transport's tally and its batch.
func Record(ctx context.Context, r Report, mark func(context.Context) error) error {
	err := mark(ctx)
	switch {
	case errors.Is(err, claim.ErrStale):
		r.Metrics.Stale(r.Outbox)
		r.log(ctx, slog.LevelWarn, r.Stale.Msg, r.Stale.Attrs)
	case err != nil:
		r.Metrics.MarkError(r.Outbox)
		r.log(ctx, slog.LevelError, r.Lost.Msg, append(r.Lost.Attrs, "error", err.Error()))
	default:
		if r.Observe != nil {
			r.Observe()
		}
		r.log(ctx, r.Applied.Level, r.Applied.Msg, r.Applied.Attrs)
	}
	return err
}

// log writes one line, its attributes joined only when the level is
// enabled: most rows log nothing at info.
func (r Report) log(ctx context.Context, level slog.Level, msg string, attrs []any) {
	if msg == "" || r.Logger == nil || !r.Logger.Enabled(ctx, level) {
		return
	}
	r.Logger.Log(ctx, level, msg, append(append(make([]any, 0, len(r.Attrs)+len(attrs)), r.Attrs...), attrs...)...)
}
