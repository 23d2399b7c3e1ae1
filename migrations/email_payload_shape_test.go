package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00028 on a database with rows: a payload of the wrong shape
// written before it is kept (it fails at its turn, as before) and up does
// not fail on it; from then on an insert of one is refused naming the
// field; down drops the check and keeps every row; up again works.
func TestEmailPayloadShapeUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	const twoRecipients = `INSERT INTO email_outbox (payload) VALUES ('{"to": ["ada@example.com", "bob@example.com"], "subject": "s", "text": "t"}')`
	if err := downBelow(ctx, m, 28); err != nil {
		t.Fatal(err)
	}
	exec(twoRecipients)
	if err := m.Up(ctx); err != nil {
		t.Fatalf("up over a payload of the wrong shape: %v", err)
	}
	_, err := pool.Exec(ctx, twoRecipients)
	pgErr, ok := err.(*pgconn.PgError)
	if !ok || pgErr.Code != "23514" || pgErr.ConstraintName != "email_outbox_payload_shape" || !strings.Contains(pgErr.Message, "payload.to must be a JSON string, not a JSON array") {
		t.Fatalf("after 00028, two recipients in one row = %v; want check_violation naming payload.to", err)
	}
	if err := downBelow(ctx, m, 28); err != nil {
		t.Fatal(err)
	}
	exec(twoRecipients)
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("below 00028: %d rows (%v); want both kept", rows, err)
	}
	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
}
