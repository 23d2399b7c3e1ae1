package webhook

import (
	"context"
	"fmt"
	"time"
)

// pruneChunk bounds one DELETE, so pruning a large backlog never holds
// many row locks or one long transaction.
const pruneChunk = 5000

// PruneOutbox deletes dispatched webhook_outbox rows whose dispatched_at is
// older than olderThan, and returns how many it deleted.
//
// Cancelled rows age out the same way, from their cancelled_at: they
// never made an event (webhook_outbox_cancelled_idx serves them).
//
// Only webhook_outbox is pruned, and only dispatched and cancelled rows (see
// docs/design/outbox-transport.md, Retention): a dispatched row is pure
// transport intent, its event and deliveries are the record. Pending rows are
// work still to do, failed rows wait for an operator, and webhook_events,
// webhook_deliveries and webhook_delivery_attempts are never pruned here.
func PruneOutbox(ctx context.Context, db DB, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("webhook: prune: retention must be positive, got %s", olderThan)
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, `DELETE FROM webhook_outbox WHERE id IN (
	SELECT id FROM webhook_outbox
	WHERE status = 'dispatched' AND dispatched_at < now() - $1::interval
	   OR status = 'cancelled' AND cancelled_at < now() - $1::interval
	LIMIT $2)`, olderThan, pruneChunk)
		if err != nil {
			return total, fmt.Errorf("webhook: prune outbox: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneChunk {
			return total, nil
		}
	}
}

// Prune runs PruneOutbox with Settings.OutboxRetention (default
// DefaultOutboxRetention). The leader-gated prune job calls it.
func (p *Dispatcher) Prune(ctx context.Context) (int64, error) {
	n, err := PruneOutbox(ctx, p.pool, p.cfg.OutboxRetention)
	p.metrics.pruned(n)
	if n > 0 || err != nil {
		p.logger.Info("webhook outbox pruned", "rows", n, "retention", p.cfg.OutboxRetention.String(), "error", errString(err))
	}
	return n, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
