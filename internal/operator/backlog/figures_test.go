package backlog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The figures the console samples and /metrics exports: pending, due now, the oldest due row's wait and
// failed, per outbox; a legacy delivery with no due time counts as due.
func TestReadFigures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	for _, sql := range []string{
		`INSERT INTO email_outbox (payload, next_attempt_at) VALUES
			('{"to":"a@example.com","subject":"s","text":"t"}', now() - interval '90 seconds'),
			('{"to":"a@example.com","subject":"s","text":"t"}', now() - interval '10 seconds'),
			('{"to":"a@example.com","subject":"s","text":"t"}', now() + interval '1 hour')`,
		`INSERT INTO email_outbox (payload, status, next_attempt_at) VALUES ('{"to":"a@example.com","subject":"s","text":"t"}', 'failed', now() - interval '1 day')`,
		`INSERT INTO webhook_outbox (event_type, payload, status) VALUES ('t', '{}', 'failed')`,
		`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://h.example.com', 'whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz')`,
		`INSERT INTO webhook_events (event_type, payload, created_at) VALUES ('t', '{}', now() - interval '5 minutes')`,
		`INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at, created_at)
			SELECT e.id, p.id, NULL, now() - interval '5 minutes' FROM webhook_events e, webhook_endpoints p`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	figs, err := ReadFigures(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		pending, due, failed int64
		oldest               time.Duration
	}{
		"email":              {3, 2, 1, 90 * time.Second},
		"webhook_outbox":     {0, 0, 1, 0},
		"webhook_deliveries": {1, 1, 0, 5 * time.Minute}, // NULL due: waiting since it was created
	}
	if len(figs) != len(want) {
		t.Fatalf("figures for %d outboxes", len(figs))
	}
	for _, f := range figs {
		w := want[f.Outbox]
		if f.Pending != w.pending || f.Due != w.due || f.Failed != w.failed ||
			f.OldestDue < w.oldest || f.OldestDue > w.oldest+10*time.Second {
			t.Errorf("%s: %+v, want %+v", f.Outbox, f, w)
		}
	}
}

// The figures are read at every scrape, on tables that keep every sent
// email: each count and the due figures read their partial indexes, never
// the whole table, whatever the statistics say.
func TestReadFigures_ReadThePartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	for _, sql := range []string{
		`INSERT INTO email_outbox (payload, status, dispatched_at)
SELECT '{"to":"a@example.com","subject":"s","text":"t"}', 'dispatched', now() FROM generate_series(1, 20000)`,
		`INSERT INTO webhook_outbox (event_type, payload, status, dispatched_at) SELECT 't', '{}', 'dispatched', now() FROM generate_series(1, 20000)`,
		`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://h.example.com', 'whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz')`,
		`INSERT INTO webhook_events (event_type, payload) SELECT 't', '{}' FROM generate_series(1, 20000)`,
		`INSERT INTO webhook_deliveries (event_id, endpoint_id, status, next_retry_at, delivered_at)
SELECT e.id, p.id, 'succeeded', now(), now() FROM webhook_events e, webhook_endpoints p`,
		`ANALYZE`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The tables as outbox and webhook describe them to the claim, whose
	// statements (claim.Table.ReadCounts) read every figure.
	for _, o := range []claim.Table{
		{Name: "email_outbox", DueColumn: "next_attempt_at"},
		{Name: "webhook_outbox", DueColumn: "next_attempt_at"},
		{Name: "webhook_deliveries", DueColumn: "next_retry_at", LegacyNullDue: true},
	} {
		for _, sql := range []string{o.CountsSQL(), o.ReadDueSQL()} {
			if plan := pgtest.Plan(t, db, sql); strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s figures scan the table:\n%s", o.Name, plan)
			}
		}
	}
}
