package migrations_test

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00029 on a database with history: an event fanned out from an
// addressed webhook_outbox row still kept learns the row's endpoint_id, an
// event of a row fanned out to every endpoint stays NULL; down removes the
// column and keeps every event.
func TestWebhookEventAddressingUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	if err := downBelow(ctx, m, 29); err != nil {
		t.Fatal(err)
	}
	const target = "0193f5a1-0000-7000-8000-0000000000aa"
	exec(`INSERT INTO webhook_outbox (id, event_type, payload, endpoint_id, status, dispatched_at) VALUES
		('0193f5a1-0000-7000-8000-000000000001', 'postbox.endpoint.disabled', '{}', '` + target + `', 'dispatched', now()),
		('0193f5a1-0000-7000-8000-000000000002', 'invoice.paid', '{}', NULL, 'dispatched', now())`)
	exec(`INSERT INTO webhook_events (id, event_type, payload, outbox_id)
		SELECT id, event_type, payload, id FROM webhook_outbox`)

	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var addressed, broadcast *string
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT endpoint_id::text FROM webhook_events WHERE id = '0193f5a1-0000-7000-8000-000000000001'),
		(SELECT endpoint_id::text FROM webhook_events WHERE id = '0193f5a1-0000-7000-8000-000000000002')`).Scan(&addressed, &broadcast); err != nil {
		t.Fatal(err)
	}
	if addressed == nil || *addressed != target || broadcast != nil {
		t.Fatalf("after 00029: the addressed event's endpoint_id %v, the other's %v; want %s and NULL", addressed, broadcast, target)
	}

	if err := downBelow(ctx, m, 29); err != nil {
		t.Fatal(err)
	}
	var events, columns int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_events),
		(SELECT count(*) FROM information_schema.columns WHERE table_name = 'webhook_events' AND column_name = 'endpoint_id')`).
		Scan(&events, &columns); err != nil || events != 2 || columns != 0 {
		t.Fatalf("down past 00029: %d events, endpoint_id columns %d (%v); want 2 and none", events, columns, err)
	}
}
