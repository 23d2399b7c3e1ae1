package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// webhookPruneTimeout bounds one prune. Deletes run in chunks of a few
// thousand rows, each a short statement, so a backlog of millions fits.
const webhookPruneTimeout = 5 * time.Minute

// WebhookPruneArgs is the periodic prune of dispatched webhook_outbox rows
// older than webhook.Config.OutboxRetention (ADR-072 amendment 2026-08-30).
// It runs on the maintenance queue; events, deliveries and attempts are
// never pruned.
type WebhookPruneArgs struct{}

// Kind is the River job kind.
func (WebhookPruneArgs) Kind() string { return "postbox_webhook_prune" }

// InsertOpts puts prunes on the maintenance queue, one waiting or running
// at a time.
func (WebhookPruneArgs) InsertOpts() river.InsertOpts { return triggerInsertOpts(QueueMaintenance) }

// WebhookPruneWorker works WebhookPruneArgs.
type WebhookPruneWorker struct {
	river.WorkerDefaults[WebhookPruneArgs]
	run *webhookRun
}

// Work prunes.
func (w *WebhookPruneWorker) Work(ctx context.Context, _ *river.Job[WebhookPruneArgs]) error {
	if _, err := w.run.pipeline.Prune(ctx); err != nil {
		return fmt.Errorf("webhook prune: %w", err)
	}
	return nil
}

// Timeout bounds one prune.
func (w *WebhookPruneWorker) Timeout(*river.Job[WebhookPruneArgs]) time.Duration {
	return webhookPruneTimeout
}
