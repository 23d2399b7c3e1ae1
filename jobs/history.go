package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/webhook"
)

const (
	// historyTimeout bounds one pass: a minute for each detach at most,
	// and a few statements besides.
	historyTimeout = 10 * time.Minute

	// GateHistory keeps history passes from overlapping pool-wide.
	GateHistory = "history"
)

// History is the history pass over one database: it makes the weeks
// ahead of every history table, drops the weeks past their retention and
// deletes the webhook events past theirs (see internal/engine/history), behind
// the history gate, so one runs pool-wide. It runs in the hourly prune
// job (PassesConfig.History): an hour is far more often than weekly
// partitions need, and lets a pass that failed (a lock held by a long
// report) try again soon. It has no job kind of its own, so a replica of
// the previous release, which works the same queue, meets no kind it does
// not know during a rolling deploy.
type History struct {
	db        *pgxpool.Pool
	owner     string
	retention history.Retention
	logger    *slog.Logger
}

// NewHistory returns the history pass in db, for the replica owner, with
// each history's retention (zero keeps it for ever).
func NewHistory(db *pgxpool.Pool, owner string, retention history.Retention, logger *slog.Logger) *History {
	if logger == nil {
		logger = slog.Default()
	}
	return &History{db: db, owner: owner, retention: retention, logger: logger}
}

// HistoryOutput is a history pass's recorded output.
type HistoryOutput struct {
	Made    int      `json:"weeks_made"`
	Dropped []string `json:"weeks_dropped,omitempty"`
	// WebhookEvents is how many webhook events (with their deliveries)
	// were deleted past WEBHOOK_HISTORY_RETENTION.
	WebhookEvents int64  `json:"webhook_events_deleted,omitempty"`
	Held          string `json:"gate_held,omitempty"`
}

// Run runs one pass behind the gate: the weeks ahead first, so a failing
// drop never keeps them from being made.
func (h *History) Run(ctx context.Context) (HistoryOutput, error) {
	var out HistoryOutput
	gate := engine.Gate{DB: h.db, Name: GateHistory, Owner: h.owner, Lease: gateLease}
	err := gate.Run(ctx, func(ctx context.Context) error {
		made, merr := history.Ensure(ctx, h.db)
		out.Made = made
		if made > 0 {
			h.logger.InfoContext(ctx, "history weeks made", "weeks", made)
		}
		dropped, derr := history.Drop(ctx, h.db, h.retention)
		for _, w := range dropped {
			out.Dropped = append(out.Dropped, w.Partition)
			h.logger.InfoContext(ctx, "history week dropped", "table", string(w.Table), "partition", w.Partition,
				"before", w.End.UTC().Format(time.RFC3339), "retention", h.retention.Of(w.Table).String())
		}
		events, eerr := webhook.PruneEvents(ctx, h.db, h.retention.Webhook)
		out.WebhookEvents = events
		if events > 0 {
			h.logger.InfoContext(ctx, "webhook events past retention deleted", "events", events,
				"retention", h.retention.Webhook.String())
		}
		return errors.Join(merr, derr, eerr)
	})
	var held *engine.GateHeldError
	if errors.As(err, &held) {
		out.Held = held.Error()
		return out, nil
	}
	return out, err
}

// Timeout is the longest a pass may run, for RescueStuckJobsAfter.
func (h *History) Timeout() time.Duration { return historyTimeout }

// HistoryCollector reports, at scrape time, how far each history table's
// weeks reach ahead (postbox_history_ahead_seconds: falling below three
// weeks means passes have been failing to make them for a week) and how
// long its oldest week has been past its retention
// (postbox_history_overdue_seconds: above zero for more than a few hours
// means drops are failing).
type HistoryCollector struct {
	db        *pgxpool.Pool
	retention history.Retention
	logger    *slog.Logger
	ahead     *prometheus.Desc
	overdue   *prometheus.Desc
}

// NewHistoryCollector returns the collector over db.
func NewHistoryCollector(db *pgxpool.Pool, retention history.Retention, logger *slog.Logger) *HistoryCollector {
	return &HistoryCollector{db: db, retention: retention, logger: logger,
		ahead: prometheus.NewDesc("postbox_history_ahead_seconds",
			"How far past now the newest week of each history table reaches: the time marks can go on without a history pass.",
			[]string{"history"}, nil),
		overdue: prometheus.NewDesc("postbox_history_overdue_seconds",
			"How long the oldest week of each history table has been past its retention (0: on time, or kept for ever).",
			[]string{"history"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *HistoryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.ahead; ch <- c.overdue }

// Collect implements prometheus.Collector.
func (c *HistoryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	now := time.Now()
	for _, t := range history.Tables {
		weeks, err := history.Weeks(ctx, c.db, t)
		if err != nil {
			c.logger.Warn("postbox_history metrics: query failed", "error", err)
			return
		}
		ch <- prometheus.MustNewConstMetric(c.ahead, prometheus.GaugeValue, history.AheadOf(weeks, now).Seconds(), string(t))
		overdue := 0.0
		if keep := c.retention.Of(t); keep > 0 && len(weeks) > 0 {
			overdue = max(now.Add(-keep).Sub(weeks[0].End), 0).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.overdue, prometheus.GaugeValue, overdue, string(t))
	}
}
