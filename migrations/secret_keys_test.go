package migrations_test

import (
	"context"
	"slices"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00017 on a database with rows: down keeps every row, drops the
// declared keys' names from scrubbed_keys (their values were scrubbed
// already) so the six-name CHECK of 00013 holds again, and drops the
// table; up again takes declared keys and their names again.
func TestSecretKeysUpAndDownWithRows(t *testing.T) {
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
	must(`INSERT INTO email_secret_keys (key) VALUES ('magic_link')`)
	must(`INSERT INTO email_outbox (kind, status, dispatched_at, payload, scrubbed_keys) VALUES
		('receipt', 'dispatched', now(), '{"to":"ada@example.com"}', ARRAY['pdf', 'magic_link']),
		('receipt', 'dispatched', now(), '{"to":"ada@example.com"}', ARRAY['magic_link']),
		('raw', 'dispatched', now(), '{"to":"ada@example.com","subject":"s"}', ARRAY['setup_url'])`)

	if err := downBelow(ctx, m, 17); err != nil {
		t.Fatalf("down past 00017 with rows that scrubbed a declared key: %v", err)
	}
	rows, err := pool.Query(ctx, `SELECT array_to_string(scrubbed_keys, ',') FROM email_outbox ORDER BY kind, cardinality(scrubbed_keys)`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"setup_url", "", "pdf"}; !slices.Equal(got, want) {
		t.Fatalf("below 00017, scrubbed_keys %q; want %q: the declared key's name gone, every row kept", got, want)
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET scrubbed_keys = ARRAY['magic_link']`); !isCheck(err, "email_outbox_scrubbed_keys_check") {
		t.Fatalf("below 00017, a declared key's name = %v; want email_outbox_scrubbed_keys_check", err)
	}
	var table *string
	if err := pool.QueryRow(ctx, `SELECT to_regclass('email_secret_keys')::text`).Scan(&table); err != nil || table != nil {
		t.Fatalf("below 00017, email_secret_keys = %v (%v); want it dropped", table, err)
	}

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	must(`INSERT INTO email_secret_keys (key) VALUES ('magic_link')`)
	must(`UPDATE email_outbox SET scrubbed_keys = ARRAY['pdf', 'magic_link']`)
}
