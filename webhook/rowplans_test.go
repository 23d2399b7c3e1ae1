package webhook

import (
	"context"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestRowStatements_ReadThePrimaryKeyWhateverTheStatistics locks every
// statement that names a webhook_outbox row or a delivery by id to a
// primary-key lookup on tables whose statistics say nothing is pending or
// failed while thousands are (see the email outbox's test of the same
// name).
func TestRowStatements_ReadThePrimaryKeyWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	ep := createEndpoint(t, pool, "https://hooks.example.com/a")
	for _, sql := range []string{
		`INSERT INTO webhook_outbox (event_type, payload, status, dispatched_at)
SELECT 'invoice.paid', '{}', 'dispatched', now() FROM generate_series(1, 20000)`,
		`INSERT INTO webhook_events (event_type, payload) SELECT 'invoice.paid', '{}' FROM generate_series(1, 26000)`,
		`INSERT INTO webhook_deliveries (event_id, endpoint_id, status, next_retry_at, delivered_at)
SELECT id, '` + ep.ID + `', 'succeeded', now(), now() FROM webhook_events`,
		`ANALYZE webhook_outbox`,
		`ANALYZE webhook_deliveries`,
		`INSERT INTO webhook_outbox (event_type, payload, status)
SELECT 'invoice.paid', '{}', CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'pending' END FROM generate_series(1, 6000) i`,
		`UPDATE webhook_deliveries SET status = CASE WHEN random() < 0.3 THEN 'failed' ELSE 'pending' END, delivered_at = NULL
WHERE id IN (SELECT id FROM webhook_deliveries LIMIT 6000)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var outboxID, deliveryID string
	if err := pool.QueryRow(ctx, `SELECT (SELECT id::text FROM webhook_outbox WHERE status = 'pending' LIMIT 1),
		(SELECT id::text FROM webhook_deliveries WHERE status = 'pending' LIMIT 1)`).Scan(&outboxID, &deliveryID); err != nil {
		t.Fatal(err)
	}
	const outbox, deliveries = "webhook_outbox", "webhook_deliveries"
	pgtest.RequireKeyLookups(t, pool, []pgtest.Statement{
		{Name: "outbox row fan-out", Table: outbox, SQL: rowFanOutSQL, Args: []any{[]string{outboxID}, time.Minute, 16, []string(nil)},
			Allow: []string{"webhook_outbox_ordering_idx"}}, // an earlier row of the event's key
		{Name: "outbox failure mark", Table: outbox, SQL: outboxFailureSQL, Args: []any{outboxID, "e", true, time.Minute}},
		{Name: "outbox release", Table: outbox, SQL: outboxTable.ReleaseSQL(), Args: []any{[]string{outboxID}}},
		{Name: "outbox requeue", Table: outbox, SQL: requeueOutboxSQL, Args: []any{outboxID}},
		{Name: "delivery mark", Table: deliveries, SQL: markSQL, Args: []any{deliveryID, 1, 200, 5, "", "ok", "succeeded", time.Duration(0), ep.ID, 5, 60.0, true, 20, 80, 30.0, 600.0, time.Hour, time.Minute, []string{}, 16},
			Allow: []string{"webhook_deliveries_ordering_idx"}}, // the next delivery of an ordered key (handOnCTE),
		{Name: "delivery mark, exhausted", Table: deliveries, SQL: markExhaustedSQL, Args: []any{deliveryID, 1, 500, 5, "HTTP 500", "", "failed", time.Duration(0), ep.ID, 5, 60.0, true, 20, 80, 30.0, 600.0, time.Hour, time.Duration(0), []string{}, 16, ep.ID, "https://hooks.example.com/a"},
			Allow: []string{"webhook_deliveries_ordering_idx"}},
		{Name: "delivery release", Table: deliveries, SQL: deliveriesTable.ReleaseSQL(), Args: []any{[]string{deliveryID}}},
		{Name: "delivery given back", Table: deliveries, SQL: giveBackSQL, Args: []any{[]string{deliveryID}}},
		{Name: "delivery landed", Table: deliveries, SQL: deliveriesTable.LandedSQL(), Args: []any{deliveryID}},
		{Name: "delivery requeue", Table: deliveries, SQL: requeueDeliverySQL, Args: []any{deliveryID, "test"}},
	})
}
