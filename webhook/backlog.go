package webhook

import (
	"context"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Counts are a webhook table's figures at one moment: pending rows, those
// due and how long the oldest has been due, failed rows.
type Counts = claim.Counts

// Statuses are a webhook table's exact count by status, its due rows and
// its newest last errors.
type Statuses = claim.Statuses

// ReadOutboxCounts reads webhook_outbox's Counts through its claim and
// failed partial indexes: cheap enough for every scrape and the console's
// sampler.
func ReadOutboxCounts(ctx context.Context, db DB) (Counts, error) {
	return outboxTable.ReadCounts(ctx, db)
}

// ReadDeliveryCounts reads webhook_deliveries' Counts, as
// ReadOutboxCounts does webhook_outbox's; legacy deliveries with no due
// time count as due.
func ReadDeliveryCounts(ctx context.Context, db DB) (Counts, error) {
	return deliveriesTable.ReadCounts(ctx, db)
}

// ReadOutboxStatuses reads webhook_outbox's Statuses with the recent
// newest last errors: a scan of the table, for `worker stats`.
func ReadOutboxStatuses(ctx context.Context, db DB, recent int) (Statuses, error) {
	return outboxTable.ReadStatuses(ctx, db, recent)
}

// ReadDeliveryStatuses reads webhook_deliveries' Statuses, as
// ReadOutboxStatuses does webhook_outbox's.
func ReadDeliveryStatuses(ctx context.Context, db DB, recent int) (Statuses, error) {
	return deliveriesTable.ReadStatuses(ctx, db, recent)
}
