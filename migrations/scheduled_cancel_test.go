package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00016 on a database with rows: a cancelled row is final — a
// plain-SQL requeue of one is refused naming the cancel, not by a CHECK
// or by email_requeues' from_status — and down keeps every row, turning
// cancelled emails into skipped ones and cancelled webhook rows into
// failed ones with last_error saying what they were; up again admits
// cancelled.
func TestScheduledCancelUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	must := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	must(`INSERT INTO email_outbox (payload) SELECT '{"to":"ada@example.com","subject":"s","text":"t"}' FROM generate_series(1, 5)`)
	must(`INSERT INTO email_outbox (payload, status, cancelled_at, cancelled_by)
		SELECT '{"to":"ada@example.com","subject":"s","text":"t"}', 'cancelled', now(), 'alice' FROM generate_series(1, 3)`)
	must(`INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{}')`)
	must(`INSERT INTO webhook_outbox (event_type, payload, status, cancelled_at, cancelled_by)
		VALUES ('invoice.paid', '{}', 'cancelled', now(), 'bob')`)

	for _, sql := range []string{
		`UPDATE email_outbox SET status = 'pending', attempts = 0, next_attempt_at = now() WHERE status = 'cancelled'`,
		`UPDATE webhook_outbox SET status = 'pending', attempts = 0, next_attempt_at = now() WHERE status = 'cancelled'`,
	} {
		_, err := pool.Exec(ctx, sql)
		pgErr, ok := err.(*pgconn.PgError)
		if !ok || pgErr.Code != "23514" || !strings.Contains(pgErr.Message, "was cancelled at") ||
			!strings.Contains(pgErr.Message, "a cancelled row is final") {
			t.Errorf("%s = %v; want the refusal naming the cancel", sql, err)
		}
	}

	if err := downBelow(ctx, m, 16); err != nil {
		t.Fatalf("down past 00016 with cancelled rows: %v", err)
	}
	var emails, skipped, hooks, failed int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'skipped'
		AND last_error LIKE 'cancelled at % by alice (migration 00016 rolled back)') FROM email_outbox`).Scan(&emails, &skipped); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'failed'
		AND last_error LIKE 'cancelled at % by bob (migration 00016 rolled back): do not requeue') FROM webhook_outbox`).Scan(&hooks, &failed); err != nil {
		t.Fatal(err)
	}
	if emails != 8 || skipped != 3 || hooks != 2 || failed != 1 {
		t.Fatalf("below 00016: %d emails (%d skipped from cancelled), %d webhook rows (%d failed from cancelled); want 8 (3), 2 (1)",
			emails, skipped, hooks, failed)
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET status = 'cancelled' WHERE status = 'pending'`); !isCheck(err, "email_outbox_status_check") {
		t.Fatalf("below 00016, status cancelled = %v; want email_outbox_status_check", err)
	}

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	must(`UPDATE email_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = 'carol' WHERE status = 'pending'`)
	must(`UPDATE webhook_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = 'carol' WHERE status = 'pending'`)
}
