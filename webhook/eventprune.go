package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/postbox/postbox/internal/engine/history"
)

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

// PruneEvents deletes the webhook events older than keep whose
// deliveries are all final, with their deliveries, a chunk at a time, and
// records the cutoff in postbox_history_dropped as the history
// history.WebhookEvents. It returns how many events it deleted; keep zero
// keeps them for ever. The history pass (jobs.History) runs it with
// WEBHOOK_HISTORY_RETENTION.
//
// webhook_events and webhook_deliveries are not partitioned, unlike the
// attempt logs whose weeks the history package drops: the retry claim
// reads one index of pending deliveries, which partitions by week would
// split into one per week, and events are referenced through ids that
// carry no time. At steady state a pass deletes what arrived in one
// interval of the pass, a few chunks an hour.
func PruneEvents(ctx context.Context, db DB, keep time.Duration) (int64, error) {
	if keep <= 0 {
		return 0, nil
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, pruneEventsSQL, keep, eventPruneChunk)
		if err != nil {
			return total, fmt.Errorf("webhook: delete events older than %s: %w", keep, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < eventPruneChunk {
			break
		}
	}
	if total == 0 {
		return 0, nil
	}
	if err := history.RecordDropped(ctx, db, history.WebhookEvents, nil, keep); err != nil {
		return total, fmt.Errorf("webhook: record the events dropped: %w", err)
	}
	return total, nil
}
