package webhook

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// FanOutCount is what the fan-out made of the outbox: its Dispatched
// rows, the Events there are, and the Orphans among them, events whose
// producing row is gone (pruned) or that never had one (replays).
type FanOutCount struct {
	Dispatched int
	Events     int
	Orphans    int
}

// CountFanOut reads FanOutCount. It reads the whole tables: a report's
// (worker demo), not a scrape's.
func CountFanOut(ctx context.Context, db DB) (FanOutCount, error) {
	var c FanOutCount
	if err := db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM webhook_outbox WHERE status = 'dispatched'),
		(SELECT count(*) FROM webhook_events),
		(SELECT count(*) FROM webhook_events e WHERE NOT EXISTS (SELECT 1 FROM webhook_outbox o WHERE o.id = e.outbox_id))`).
		Scan(&c.Dispatched, &c.Events, &c.Orphans); err != nil {
		return c, fmt.Errorf("webhook: count fan-out: %w", err)
	}
	return c, nil
}

// EndpointTally is one endpoint's deliveries: how many succeeded (Retried
// of them after more than one attempt), how many failed, and the attempts
// made in all.
type EndpointTally struct {
	URL            string
	Enabled        bool
	DisabledReason string
	Succeeded      int
	Failed         int
	Retried        int
	Attempts       int
}

// TallyEndpoints reads every endpoint's EndpointTally, oldest endpoint
// first. It reads every delivery: a report's (worker demo), not a
// scrape's.
func TallyEndpoints(ctx context.Context, db DB) ([]EndpointTally, error) {
	rows, err := db.Query(ctx, `SELECT p.url, p.enabled, COALESCE(p.disabled_reason, ''),
		count(d.id) FILTER (WHERE d.status = 'succeeded'),
		count(d.id) FILTER (WHERE d.status = 'failed'),
		count(d.id) FILTER (WHERE d.status = 'succeeded' AND d.attempts > 1),
		COALESCE(sum(d.attempts), 0)
		FROM webhook_endpoints p LEFT JOIN webhook_deliveries d ON d.endpoint_id = p.id
		GROUP BY p.id ORDER BY p.created_at`)
	if err != nil {
		return nil, fmt.Errorf("webhook: tally endpoints: %w", err)
	}
	tallies, err := pgx.CollectRows(rows, pgx.RowToStructByPos[EndpointTally])
	if err != nil {
		return nil, fmt.Errorf("webhook: tally endpoints: %w", err)
	}
	return tallies, nil
}
