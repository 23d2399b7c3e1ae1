package migrations_test

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00012 on a database with history: a requeue by plain SQL is
// logged and moves the reset attempts into prior_attempts; going down past
// it removes the log and the column and keeps every row; up again starts
// the numbering over from the rows as they are.
func TestRequeueLogUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	exec(`INSERT INTO email_outbox (customer_id, payload, status, attempts)
		SELECT 'cus_' || i, '{"to":"ada@example.com","subject":"s","text":"t"}', 'failed', 4 FROM generate_series(1, 50) i`)
	exec(`UPDATE email_outbox SET status = 'pending', attempts = 0 WHERE customer_id = 'cus_1'`)
	var prior, requeues int
	if err := pool.QueryRow(ctx, `SELECT prior_attempts, (SELECT count(*) FROM email_requeues r WHERE r.row_id = o.id AND r.attempt = 4)
		FROM email_outbox o WHERE customer_id = 'cus_1'`).Scan(&prior, &requeues); err != nil || prior != 4 || requeues != 1 {
		t.Fatalf("after a plain-SQL requeue: prior_attempts %d, %d requeues logged at #4 (%v); want 4 and 1", prior, requeues, err)
	}
	// A status change that is no requeue (a mark) logs nothing.
	exec(`UPDATE email_outbox SET status = 'failed' WHERE customer_id = 'cus_1'`)
	exec(`UPDATE email_outbox SET attempts = 5 WHERE customer_id = 'cus_2'`)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_requeues`).Scan(&requeues); err != nil || requeues != 1 {
		t.Fatalf("%d requeues logged after a mark and a claim, want still 1 (%v)", requeues, err)
	}

	// Step down to just before 00012, through any migration after it.
	if err := downBelow(ctx, m, 12); err != nil {
		t.Fatal(err)
	}
	var rows, tables, columns int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM email_outbox),
		(SELECT count(*) FROM pg_tables WHERE tablename = 'email_requeues'),
		(SELECT count(*) FROM information_schema.columns WHERE table_name = 'email_outbox' AND column_name = 'prior_attempts')`).
		Scan(&rows, &tables, &columns); err != nil || rows != 50 || tables != 0 || columns != 0 {
		t.Fatalf("down past 00012: %d rows, email_requeues %d, prior_attempts %d (%v); want 50 rows, neither left", rows, tables, columns, err)
	}
	exec(`UPDATE email_outbox SET status = 'pending', attempts = 0 WHERE customer_id = 'cus_3'`) // no trigger now

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE email_outbox SET status = 'pending', attempts = 0 WHERE customer_id = 'cus_4'`)
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(prior_attempts) FROM email_outbox`).Scan(&rows, &prior); err != nil || rows != 50 || prior != 4 {
		t.Fatalf("up again: %d rows, prior_attempts summing to %d (%v); want 50 and 4 (only cus_4's requeue)", rows, prior, err)
	}
}
