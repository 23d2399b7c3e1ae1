package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/claim"
)

func init() {
	register(command{
		Name:    "stats",
		Summary: "rows per status, due now, oldest due age, recent errors — per outbox",
		Help: "Prints, for email_outbox, webhook_outbox and webhook_deliveries: the rows in each status " +
			"(exact counts: a scan of each table, fine for a command, not for a scrape), how many are due now " +
			"and how long the oldest due row has waited, then each table's most recent errors. /metrics " +
			"exports the cheap part of this as gauges.",
		Flags: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print JSON")
			recent := intAtLeast(fs, "errors", 5, 0, "show the `N` most recent errors per outbox")
			return func(ctx context.Context, env *Env, _ []string) error {
				return runStats(ctx, env, *asJSON, *recent)
			}
		},
	})
}

// outboxTable is one table `worker stats` and the gauges report on.
type outboxTable struct {
	Name      string // label: email, webhook_outbox, webhook_deliveries
	Table     string
	DueColumn string
	Legacy    bool // NULL due column counts as due (webhook_deliveries)
}

var outboxTables = []outboxTable{
	{"email", "email_outbox", "next_attempt_at", false},
	{"webhook_outbox", "webhook_outbox", "next_attempt_at", false},
	{"webhook_deliveries", "webhook_deliveries", "next_retry_at", true},
}

// OutboxStats is one table's state.
type OutboxStats struct {
	Outbox        string           `json:"outbox"`
	ByStatus      map[string]int64 `json:"by_status"`
	Due           int64            `json:"due"`
	OldestDueAge  time.Duration    `json:"-"`
	OldestDueSecs float64          `json:"oldest_due_age_seconds"`
	RecentErrors  []RecentError    `json:"recent_errors"`
}

// RecentError is a row's last error, newest first.
type RecentError struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
}

// readDue reads the due count and the age of the oldest due row: how long
// the longest-waiting row has been due and not sent. It is served by the
// claim's partial index, so it is cheap enough for every scrape.
func readDue(ctx context.Context, db claim.DB, t outboxTable) (due int64, oldest time.Duration, err error) {
	return claim.Table{Name: t.Table, DueColumn: t.DueColumn, LegacyNullDue: t.Legacy}.ReadDue(ctx, db)
}

// readStats is the full picture for an operator: exact counts of every
// status (a scan of the table; fine for a command, not for a scrape).
func readStats(ctx context.Context, db claim.DB, recent int) ([]OutboxStats, error) {
	var out []OutboxStats
	for _, t := range outboxTables {
		s := OutboxStats{Outbox: t.Name, ByStatus: map[string]int64{}}
		rows, err := db.Query(ctx, fmt.Sprintf(`SELECT status, count(*) FROM %s GROUP BY status`, t.Table))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table, err)
		}
		for rows.Next() {
			var st string
			var n int64
			if err := rows.Scan(&st, &n); err != nil {
				rows.Close()
				return nil, err
			}
			s.ByStatus[st] = n
		}
		rows.Close()
		if s.Due, s.OldestDueAge, err = readDue(ctx, db, t); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table, err)
		}
		s.OldestDueSecs = s.OldestDueAge.Seconds()
		rows, err = db.Query(ctx, fmt.Sprintf(`SELECT id::text, status, attempts, last_error FROM %s
			WHERE last_error IS NOT NULL ORDER BY created_at DESC LIMIT $1`, t.Table), recent)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table, err)
		}
		for rows.Next() {
			var e RecentError
			if err := rows.Scan(&e.ID, &e.Status, &e.Attempts, &e.Error); err != nil {
				rows.Close()
				return nil, err
			}
			s.RecentErrors = append(s.RecentErrors, e)
		}
		rows.Close()
		out = append(out, s)
	}
	return out, nil
}

func runStats(ctx context.Context, env *Env, asJSON bool, recent int) error {
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	stats, err := readStats(ctx, pool, recent)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(stats)
	}
	printStats(env.Stdout, stats)
	return nil
}

var statusOrder = map[string][]string{
	"email":              {"pending", "dispatched", "skipped", "failed"},
	"webhook_outbox":     {"pending", "dispatched", "failed"},
	"webhook_deliveries": {"pending", "succeeded", "failed"},
}

func printStats(w io.Writer, stats []OutboxStats) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTBOX\tSTATUS\tROWS\tDUE NOW\tOLDEST DUE")
	for _, s := range stats {
		for i, st := range statusOrder[s.Outbox] {
			due, age := "", ""
			if i == 0 {
				due, age = fmt.Sprint(s.Due), "-"
				if s.Due > 0 {
					age = s.OldestDueAge.Round(time.Second).String()
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Outbox, st, s.ByStatus[st], due, age)
		}
	}
	tw.Flush()
	for _, s := range stats {
		if len(s.RecentErrors) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nrecent errors — %s:\n", s.Outbox)
		for _, e := range s.RecentErrors {
			fmt.Fprintf(w, "  %s  %-8s attempt %-2d %s\n", e.ID, e.Status, e.Attempts, truncate(e.Error, 120))
		}
	}
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// outboxCollector exports the gauges to alert on, per outbox: rows pending,
// due now, failed, and the age of the oldest due row. Each is read through
// a partial index, so a scrape costs a few index scans however large the
// tables grow.
type outboxCollector struct {
	db                        claim.DB
	pending, due, failed, age *prometheus.Desc
	logger                    *slog.Logger
}

func newOutboxCollector(db claim.DB, logger *slog.Logger) *outboxCollector {
	l := []string{"outbox"}
	return &outboxCollector{
		db:      db,
		logger:  logger,
		pending: prometheus.NewDesc("postbox_outbox_pending", "Rows waiting to be sent (due or leased or backing off).", l, nil),
		due:     prometheus.NewDesc("postbox_outbox_due", "Pending rows whose due time has passed: claimable now.", l, nil),
		failed:  prometheus.NewDesc("postbox_outbox_failed", "Rows that failed for good and wait for an operator.", l, nil),
		age: prometheus.NewDesc("postbox_outbox_oldest_due_age_seconds",
			"How long the longest-waiting due row has been due. Alert when it stays above a few tick intervals.", l, nil),
	}
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.due
	ch <- c.failed
	ch <- c.age
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, t := range outboxTables {
		var pending, failed int64
		err := c.db.QueryRow(ctx, fmt.Sprintf(`SELECT
			(SELECT count(*) FROM %[1]s WHERE status = 'pending'),
			(SELECT count(*) FROM %[1]s WHERE status = 'failed')`, t.Table)).Scan(&pending, &failed)
		if err != nil {
			c.logger.Warn("outbox gauges: query failed", "outbox", t.Name, "error", err)
			continue
		}
		due, age, err := readDue(ctx, c.db, t)
		if err != nil {
			c.logger.Warn("outbox gauges: query failed", "outbox", t.Name, "error", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending), t.Name)
		ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(due), t.Name)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, float64(failed), t.Name)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age.Seconds(), t.Name)
	}
}
