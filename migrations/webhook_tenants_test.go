package migrations_test

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00030 on an installation with endpoints, pending rows and
// deliveries: up leaves every row as it was, without a tenant, so the
// fan-out reaches what it reached before, and a delivery between them is
// still allowed; a key may then repeat across tenants. Down keeps every
// row: of a key held under two tenants the older row keeps it, so the
// key is unique across rows again, as the older rule needs.
func TestWebhookTenantsUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	if err := downBelow(ctx, m, 30); err != nil {
		t.Fatal(err)
	}
	const (
		endpoint = "0193f5a1-0000-7000-8000-0000000000e1"
		sent     = "0193f5a1-0000-7000-8000-000000000001"
		pending  = "0193f5a1-0000-7000-8000-000000000002"
	)
	exec(`INSERT INTO webhook_endpoints (id, url, secret, event_types) VALUES ('` + endpoint + `', 'https://a.example/hooks', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0', '{invoice.paid}')`)
	exec(`INSERT INTO webhook_outbox (id, event_type, payload, status, dispatched_at, idempotency_key) VALUES
		('` + sent + `', 'invoice.paid', '{}', 'dispatched', now(), 'in_1.paid'),
		('` + pending + `', 'invoice.paid', '{}', 'pending', NULL, 'in_2.paid')`)
	exec(`INSERT INTO webhook_events (id, event_type, payload, outbox_id) VALUES ('` + sent + `', 'invoice.paid', '{}', '` + sent + `')`)
	exec(`INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at) VALUES ('` + sent + `', '` + endpoint + `', 1, now())`)

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var tenanted, pendingRows, pendingDeliveries int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM webhook_endpoints WHERE tenant_id IS NOT NULL) + (SELECT count(*) FROM webhook_outbox WHERE tenant_id IS NOT NULL)
			+ (SELECT count(*) FROM webhook_events WHERE tenant_id IS NOT NULL),
		(SELECT count(*) FROM webhook_outbox WHERE status = 'pending'),
		(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')`).Scan(&tenanted, &pendingRows, &pendingDeliveries); err != nil {
		t.Fatal(err)
	}
	if tenanted != 0 || pendingRows != 1 || pendingDeliveries != 1 {
		t.Fatalf("after 00030: %d rows with a tenant, %d pending rows, %d pending deliveries; want 0, 1, 1", tenanted, pendingRows, pendingDeliveries)
	}
	// The pending row's event reaches the endpoint it reached before:
	// neither has a tenant.
	exec(`INSERT INTO webhook_events (id, event_type, payload, outbox_id) VALUES ('` + pending + `', 'invoice.paid', '{}', '` + pending + `')`)
	exec(`INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at) VALUES ('` + pending + `', '` + endpoint + `', 1, now())`)
	// Keys are per tenant now: acme may hold in_1.paid beside the row without one.
	exec(`INSERT INTO webhook_outbox (tenant_id, event_type, payload, idempotency_key) VALUES ('acme', 'invoice.paid', '{}', 'in_1.paid')`)

	if err := downBelow(ctx, m, 30); err != nil {
		t.Fatal(err)
	}
	var rows, keyed, columns, triggers int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_outbox),
		(SELECT count(*) FROM webhook_outbox WHERE idempotency_key = 'in_1.paid' AND id = '`+sent+`'),
		(SELECT count(*) FROM information_schema.columns WHERE column_name = 'tenant_id'
			AND table_name IN ('webhook_endpoints', 'webhook_outbox', 'webhook_events')),
		(SELECT count(*) FROM pg_trigger WHERE tgname IN ('webhook_deliveries_tenant_guard', 'webhook_events_tenant_inherit'))`).
		Scan(&rows, &keyed, &columns, &triggers); err != nil {
		t.Fatal(err)
	}
	if rows != 3 || keyed != 1 || columns != 0 || triggers != 0 {
		t.Fatalf("down past 00030: %d rows, the older row holds its key %d times, %d tenant columns, %d triggers; want 3, 1, 0, 0",
			rows, keyed, columns, triggers)
	}
	// The older rule is back: a key is unique across all rows.
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload, idempotency_key) VALUES ('invoice.paid', '{}', 'in_2.paid')
		ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`); err != nil {
		t.Fatalf("the older plain-SQL form after down: %v", err)
	}
	if err := m.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
