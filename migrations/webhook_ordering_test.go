package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00023 on a database with rows: the rows already there stay
// unordered (no key, no place) and keep flowing; new outbox rows take
// places in insert order; going down past it refuses while rows of a key
// are pending — it would drop their keys, and they would go out unordered
// after an up again — naming how many, and changes nothing; once they are
// sent it drops the columns, the trigger and the sequence and keeps every
// row; up again works.
func TestWebhookOrderingUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	if err := downBelow(ctx, m, 23); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO webhook_outbox (event_type, payload) SELECT 'invoice.paid', jsonb_build_object('n', i) FROM generate_series(1, 20) i`)
	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var old, keyed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE ordering_key IS NULL AND ordering_seq IS NULL), count(*) FROM webhook_outbox`).
		Scan(&old, &keyed); err != nil || old != 20 || keyed != 20 {
		t.Fatalf("rows from before 00023: %d unordered of %d (%v); want all 20 without key or place", old, keyed, err)
	}
	exec(`INSERT INTO webhook_outbox (event_type, payload, ordering_key) VALUES ('invoice.created', '{}', 'in_1'), ('invoice.paid', '{}', 'in_1')`)
	var inOrder bool
	if err := pool.QueryRow(ctx, `SELECT bool_and(ordering_seq IS NOT NULL) AND
		(SELECT ordering_seq FROM webhook_outbox WHERE event_type = 'invoice.created' AND ordering_key = 'in_1') <
		(SELECT ordering_seq FROM webhook_outbox WHERE event_type = 'invoice.paid' AND ordering_key = 'in_1')
		FROM webhook_outbox WHERE ordering_key IS NOT NULL`).Scan(&inOrder); err != nil || !inOrder {
		t.Fatalf("new rows of a key: in order %v (%v); want places in insert order", inOrder, err)
	}
	exec(`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://h.example.com', 'whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz')`)
	exec(`INSERT INTO webhook_events (event_type, payload, ordering_key) VALUES ('invoice.sent', '{}', 'in_2')`)
	exec(`INSERT INTO webhook_deliveries (event_id, endpoint_id, ordering_key, ordering_seq)
		SELECT e.id, p.id, e.ordering_key, e.ordering_seq FROM webhook_events e, webhook_endpoints p`)

	err := downBelow(ctx, m, 23)
	if err == nil || !strings.Contains(err.Error(), "2 webhook_outbox rows and 1 webhook_deliveries rows are pending with an ordering key") {
		t.Fatalf("down past 00023 with keyed rows pending = %v; want a refusal naming 2 outbox rows and 1 delivery", err)
	}
	var keys int
	if s, err := m.State(ctx); err != nil || s.Postbox.Current != 23 {
		t.Fatalf("after the refused down: %+v (%v); want still at 23", s.Postbox, err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(ordering_key) FROM webhook_outbox`).Scan(&keys); err != nil || keys != 2 {
		t.Fatalf("after the refused down: %d keyed outbox rows (%v); want the 2 kept", keys, err)
	}
	exec(`UPDATE webhook_outbox SET status = 'dispatched', dispatched_at = now() WHERE ordering_key IS NOT NULL`)
	exec(`UPDATE webhook_deliveries SET status = 'succeeded', delivered_at = now()`)

	if err := downBelow(ctx, m, 23); err != nil {
		t.Fatal(err)
	}
	var rows, columns, triggers, sequences int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_outbox),
		(SELECT count(*) FROM information_schema.columns WHERE column_name IN ('ordering_key', 'ordering_seq', 'order_skipped_at', 'order_on_failure')),
		(SELECT count(*) FROM pg_trigger WHERE tgname = 'webhook_deliveries_ordering_next'),
		(SELECT count(*) FROM pg_class WHERE relname = 'postbox_ordering_seq')`).
		Scan(&rows, &columns, &triggers, &sequences); err != nil || rows != 22 || columns != 0 || triggers != 0 || sequences != 0 {
		t.Fatalf("down past 00023: %d rows, %d columns, %d triggers, %d sequences (%v); want 22 rows and nothing of 00023", rows, columns, triggers, sequences, err)
	}
	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
}
