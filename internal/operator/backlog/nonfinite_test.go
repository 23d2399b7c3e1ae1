package backlog

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// One row with a due time of '-infinity' or 'infinity' — written by plain
// SQL before migration 00026 refused them, or where its CHECK was dropped
// by hand — blinds no figure: the counts, the oldest due row's wait (the
// '-infinity' row waits since it was created), worker stats and every
// gauge of every outbox are still read. Before, "cannot subtract infinite
// timestamps" failed the scrape and every postbox_outbox_* gauge went.
func TestReadFigures_NonFiniteDueBlindsNoGauge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	for _, sql := range []string{
		// The constraints are what a database from before 00026 lacks.
		`ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_next_attempt_at_finite`,
		`ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_next_attempt_at_finite`,
		`ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_next_retry_at_finite`,
		`INSERT INTO email_outbox (payload, next_attempt_at, created_at) VALUES
			('{"to":"a@example.com","subject":"s","text":"t"}', '-infinity', now() - interval '90 seconds'),
			('{"to":"a@example.com","subject":"s","text":"t"}', 'infinity', now() - interval '1 hour'),
			('{"to":"a@example.com","subject":"s","text":"t"}', now() - interval '10 seconds', now())`,
		`INSERT INTO webhook_outbox (event_type, payload, next_attempt_at) VALUES ('t', '{}', '-infinity'), ('t', '{}', 'infinity')`,
		`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://h.example.com', 'whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz')`,
		`INSERT INTO webhook_events (event_type, payload) VALUES ('t', '{}')`,
		`INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at, created_at)
			SELECT e.id, p.id, '-infinity', now() - interval '5 minutes' FROM webhook_events e, webhook_endpoints p`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	figs, err := ReadFigures(ctx, db)
	if err != nil {
		t.Fatalf("figures over non-finite due times: %v", err)
	}
	want := map[string]struct {
		pending, due int64
		oldest       time.Duration
	}{
		"email":              {3, 2, 90 * time.Second},
		"webhook_outbox":     {2, 1, 0},
		"webhook_deliveries": {1, 1, 5 * time.Minute},
	}
	for _, f := range figs {
		w := want[f.Outbox]
		if f.Pending != w.pending || f.Due != w.due || f.OldestDue < w.oldest || f.OldestDue > w.oldest+time.Minute {
			t.Errorf("%s: %+v, want %+v", f.Outbox, f, w)
		}
	}
	if _, err := ReadStats(ctx, db, 5); err != nil {
		t.Errorf("worker stats' figures over non-finite due times: %v", err)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(db, slog.New(slog.DiscardHandler)))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, f := range families {
		series[f.GetName()] = len(f.GetMetric())
	}
	for name, n := range map[string]int{
		"postbox_outbox_pending": len(Tables), "postbox_outbox_due": len(Tables), "postbox_outbox_failed": len(Tables),
		"postbox_outbox_oldest_due_age_seconds": len(Tables), "postbox_webhook_ordered_keys_blocked": 1,
		// The email rows are all of one priority.
		"postbox_email_due_by_priority": 1, "postbox_email_customers_due_by_priority": 1, "postbox_email_oldest_due_age_seconds_by_priority": 1,
	} {
		if series[name] != n {
			t.Errorf("%s: %d series, want %d (one per outbox): a scrape lost gauges over one non-finite row", name, series[name], n)
		}
	}
}
