package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00015 on a database with rows: up admits a custom kind that
// is a plain identifier; down refuses while rows of a custom kind exist,
// naming how many, changes nothing when it refuses, and goes through once
// they are gone; up again admits custom kinds again. Every row is kept.
func TestCustomKindsUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := func(sql string) error {
		_, err := pool.Exec(ctx, sql)
		return err
	}
	must := func(sql string) {
		t.Helper()
		if err := exec(sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	must(`INSERT INTO email_outbox (kind, payload) SELECT 'raw', '{"to":"ada@example.com","subject":"s","text":"t"}' FROM generate_series(1, 20)`)
	must(`INSERT INTO email_outbox (kind, payload) SELECT 'receipt', '{"to":"ada@example.com"}' FROM generate_series(1, 3)`)

	// Step down to just before 00015, through any migration after it.
	err := downBelow(ctx, m, 15)
	if err == nil || !strings.Contains(err.Error(), "3 email_outbox rows have a custom kind") {
		t.Fatalf("down past 00015 with 3 receipt rows = %v; want a refusal naming 3 rows", err)
	}
	if s, err := m.State(ctx); err != nil || s.Postbox.Current != 15 {
		t.Fatalf("after the refused down: %+v (%v); want still at 15", s.Postbox, err)
	}
	if err := exec(`INSERT INTO email_outbox (kind, payload) VALUES ('Receipt', '{}')`); !isCheck(err, "email_outbox_kind_format") {
		t.Fatalf("after the refused down, a malformed kind = %v; want email_outbox_kind_format still held", err)
	}

	must(`DELETE FROM email_outbox WHERE kind = 'receipt'`)
	if err := downBelow(ctx, m, 15); err != nil {
		t.Fatalf("down past 00015 with only built-in kinds: %v", err)
	}
	if err := exec(`INSERT INTO email_outbox (kind, payload) VALUES ('receipt', '{}')`); !isCheck(err, "email_outbox_kind_check") {
		t.Fatalf("below 00015, a custom kind = %v; want email_outbox_kind_check", err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox`).Scan(&rows); err != nil || rows != 20 {
		t.Fatalf("below 00015: %d rows (%v); want the 20 raw rows kept", rows, err)
	}

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	must(`INSERT INTO email_outbox (kind, payload) VALUES ('receipt', '{}')`)
	var checks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'email_outbox'::regclass
		AND conname IN ('email_outbox_kind_check', 'email_outbox_kind_format')`).Scan(&checks); err != nil || checks != 1 {
		t.Fatalf("up again: %d kind CHECKs (%v); want only the format", checks, err)
	}
}

func isCheck(err error, constraint string) bool {
	pgErr, ok := err.(*pgconn.PgError)
	return ok && pgErr.Code == "23514" && pgErr.ConstraintName == constraint
}
