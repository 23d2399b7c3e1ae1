package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A webhook_outbox row's place in its ordering key comes from the
// sequence only (migration 00027): plain SQL that supplies ordering_seq,
// or moves a row's place later, is refused naming the column, as Postgres
// refuses a value for a GENERATED ALWAYS column; a row written without it
// — or with DEFAULT or NULL — takes the next place; a claim's or a mark's UPDATE
// of the row is untouched. Down and up again keep the rows.
func TestOrderingSeqComesFromTheSequenceOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	var first int64
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload, ordering_key) VALUES ('invoice.created', '{}', 'in_1') RETURNING ordering_seq`).Scan(&first); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, sql string }{
		{"an INSERT ahead of the key's first row", `INSERT INTO webhook_outbox (event_type, payload, ordering_key, ordering_seq) VALUES ('invoice.voided', '{}', 'in_1', 1)`},
		{"an UPDATE that moves a row", `UPDATE webhook_outbox SET ordering_seq = ordering_seq + 100 WHERE ordering_key = 'in_1'`},
	} {
		_, err := pool.Exec(ctx, tc.sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "428C9" || pgErr.ColumnName != "ordering_seq" || !strings.Contains(pgErr.Message, "ordering_seq") {
			t.Errorf("%s = %v; want refused (428C9) naming ordering_seq", tc.name, err)
		}
	}

	var second, third int64
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload, ordering_key, ordering_seq) VALUES ('invoice.paid', '{}', 'in_1', DEFAULT) RETURNING ordering_seq`).Scan(&second); err != nil {
		t.Fatalf("an INSERT with DEFAULT: %v", err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.sent', '{}') RETURNING ordering_seq`).Scan(&third); err != nil {
		t.Fatalf("an INSERT without it: %v", err)
	}
	if !(first < second && second < third) {
		t.Errorf("places %d, %d, %d; want increasing in insert order", first, second, third)
	}
	// What the fan-out's claim and its marks write.
	exec(`UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = now() + interval '1 minute' WHERE ordering_key = 'in_1'`)
	exec(`UPDATE webhook_outbox SET status = 'dispatched', dispatched_at = now(), ordering_seq = ordering_seq WHERE ordering_key = 'in_1'`)

	if err := downBelow(ctx, m, 27); err != nil {
		t.Fatal(err)
	}
	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox WHERE ordering_seq IS NOT NULL`).Scan(&rows); err != nil || rows != 3 {
		t.Fatalf("after down and up again: %d rows with a place (%v); want the 3 kept", rows, err)
	}
}
