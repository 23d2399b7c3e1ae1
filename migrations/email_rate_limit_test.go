package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00020 on a database with rows: the email bucket is there
// (and a missing bucket can be made again by the claim's insert); a
// requeue resets a row's throttles, a claim or a mark does not; going down
// past it removes the bucket table and the column and keeps every row; up
// again starts every row with no throttles.
func TestEmailRateLimitUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	var buckets int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM postbox_rate_buckets WHERE name = 'email' AND tokens = 0`).Scan(&buckets); err != nil || buckets != 1 {
		t.Fatalf("%d email buckets (%v), want the one the migration made", buckets, err)
	}
	exec(`INSERT INTO email_outbox (customer_id, payload, status, attempts, throttles)
		SELECT 'cus_' || i, '{"to":"ada@example.com","subject":"s","text":"t"}', 'failed', 4, 3 FROM generate_series(1, 50) i`)
	exec(`UPDATE email_outbox SET attempts = attempts + 1 WHERE customer_id = 'cus_2'`)               // a claim
	exec(`UPDATE email_outbox SET last_error = 'x', attempts = attempts WHERE customer_id = 'cus_3'`) // a mark naming attempts
	exec(`UPDATE email_outbox SET status = 'pending', attempts = 0 WHERE customer_id = 'cus_1'`)      // a requeue
	var reset, kept int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE throttles = 0), count(*) FILTER (WHERE throttles = 3) FROM email_outbox`).
		Scan(&reset, &kept); err != nil || reset != 1 || kept != 49 {
		t.Fatalf("%d rows' throttles reset, %d kept (%v); want only the requeued row's reset", reset, kept, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO email_outbox (customer_id, payload, throttles) VALUES ('cus_x', '{"to":"a@example.com","subject":"s","text":"t"}', -1)`)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.ConstraintName != "email_outbox_throttles_check" {
		t.Fatalf("a negative throttles: %v, want a check violation", err)
	}

	// Step down to just before 00020, through any migration after it.
	if err := downBelow(ctx, m, 20); err != nil {
		t.Fatal(err)
	}
	var rows, tables, columns int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM email_outbox),
		(SELECT count(*) FROM pg_tables WHERE tablename = 'postbox_rate_buckets'),
		(SELECT count(*) FROM information_schema.columns WHERE table_name = 'email_outbox' AND column_name = 'throttles')`).
		Scan(&rows, &tables, &columns); err != nil || rows != 50 || tables != 0 || columns != 0 {
		t.Fatalf("down past 00020: %d rows, postbox_rate_buckets %d, throttles %d (%v); want 50 rows, neither left", rows, tables, columns, err)
	}

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var throttles int
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(throttles), (SELECT count(*) FROM postbox_rate_buckets) FROM email_outbox`).
		Scan(&rows, &throttles, &buckets); err != nil || rows != 50 || throttles != 0 || buckets != 1 {
		t.Fatalf("up again: %d rows with %d throttles, %d buckets (%v); want 50, 0 and 1", rows, throttles, buckets, err)
	}
}
