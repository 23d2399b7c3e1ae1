package migrations_test

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00031 on an installation with endpoints subscribed to types
// and rows pending: up changes none of them — the catalog starts empty,
// which checks nothing, so every subscription stands and every row fans
// out as before. Down drops the catalog alone: endpoints, rows and
// deliveries stay, and subscriptions are free again.
func TestWebhookEventTypesUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	if err := downBelow(ctx, m, 31); err != nil {
		t.Fatal(err)
	}
	const endpoint = "0193f5a1-0000-7000-8000-0000000000e2"
	exec(`INSERT INTO webhook_endpoints (id, url, secret, event_types) VALUES ('` + endpoint + `', 'https://a.example/hooks', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0', '{invoice.piad}')`)
	exec(`INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.piad', '{"amount": "x"}')`)

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var endpoints, pending, catalog int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_endpoints WHERE event_types = '{invoice.piad}'),
		(SELECT count(*) FROM webhook_outbox WHERE status = 'pending'), (SELECT count(*) FROM webhook_event_types)`).Scan(&endpoints, &pending, &catalog); err != nil {
		t.Fatal(err)
	}
	if endpoints != 1 || pending != 1 || catalog != 0 {
		t.Fatalf("after 00031: %d endpoints as they were, %d pending rows, %d catalog types; want 1, 1, 0", endpoints, pending, catalog)
	}
	// An empty catalog checks nothing: another endpoint of any type.
	exec(`INSERT INTO webhook_endpoints (url, secret, event_types) VALUES ('https://b.example/hooks', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0', '{customer.updated}')`)

	if err := downBelow(ctx, m, 31); err != nil {
		t.Fatal(err)
	}
	var tables, functions int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_endpoints) + (SELECT count(*) FROM webhook_outbox),
		(SELECT count(*) FROM pg_proc WHERE proname LIKE 'webhook_event_types%' OR proname = 'webhook_endpoints_subscribed')`).Scan(&tables, &functions); err != nil {
		t.Fatal(err)
	}
	if tables != 3 || functions != 0 {
		t.Fatalf("down past 00031: %d endpoints and rows, %d catalog functions; want 3, 0", tables, functions)
	}
	if err := m.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
