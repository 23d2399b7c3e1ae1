package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WebhookEvents is the history name under which the deletion of old
// webhook events is recorded in postbox_history_dropped; the table is not
// partitioned (see PruneWebhookEvents).
const WebhookEvents Table = "webhook_events"

// eventPruneChunk bounds one DELETE: a few thousand events and their
// deliveries is one short transaction, so the pass never holds many row
// locks or a long snapshot, whatever the backlog.
const eventPruneChunk = 2000

// pruneEventsSQL deletes the oldest chunk of events created before the
// cutoff whose deliveries are all final (a pending one is work still to
// do), with their deliveries (ON DELETE CASCADE). An event a kept replay
// points at waits for the replay to go first, which it does, being
// younger, a pass or a chunk later.
const pruneEventsSQL = `DELETE FROM webhook_events WHERE id IN (
	SELECT e.id FROM webhook_events e
	WHERE e.created_at < now() - $1::interval
	  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.status = 'pending')
	  AND NOT EXISTS (SELECT 1 FROM webhook_events r WHERE r.replay_of = e.id)
	ORDER BY e.created_at
	LIMIT $2)`

// PruneWebhookEvents deletes the webhook events older than keep whose
// deliveries are all final, with their deliveries, a chunk at a time, and
// records the cutoff in postbox_history_dropped. It returns how many
// events it deleted.
//
// webhook_events and webhook_deliveries are not partitioned: the retry
// claim reads one index of pending deliveries, which partitions by week
// would split into one per week, and events are referenced through ids
// that carry no time. At steady state a pass deletes what arrived in one
// interval of the pass, a few chunks an hour.
func PruneWebhookEvents(ctx context.Context, db *pgxpool.Pool, keep time.Duration) (int64, error) {
	if keep <= 0 {
		return 0, nil
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, pruneEventsSQL, keep, eventPruneChunk)
		if err != nil {
			return total, fmt.Errorf("history: delete webhook events older than %s: %w", keep, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < eventPruneChunk {
			break
		}
	}
	if total == 0 {
		return 0, nil
	}
	if err := recordDropped(ctx, db, WebhookEvents, nil, keep); err != nil {
		return total, fmt.Errorf("history: record the webhook events dropped: %w", err)
	}
	return total, nil
}
