package outbox

import (
	"context"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Counts are email_outbox's figures at one moment: pending rows, those
// due and how long the oldest has been due, failed rows.
type Counts = claim.Counts

// Statuses are email_outbox's exact count by status, its due rows and
// its newest last errors.
type Statuses = claim.Statuses

// ReadCounts reads Counts through the claim and failed partial indexes:
// cheap enough for every scrape (the postbox_outbox_* gauges) and the
// console's sampler.
func ReadCounts(ctx context.Context, db claim.DB) (Counts, error) {
	return table.ReadCounts(ctx, db)
}

// ReadStatuses reads Statuses with the recent newest last errors: a scan
// of the table, for `worker stats`, not for a scrape.
func ReadStatuses(ctx context.Context, db claim.DB, recent int) (Statuses, error) {
	return table.ReadStatuses(ctx, db, recent)
}
