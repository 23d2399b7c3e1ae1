package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/pgtext"
)

// MaxSendAhead is how far ahead Event.SendAt may be: a year, as for
// emails (outbox.MaxSendAhead). Further off is far more likely a unit
// mistake than an event anyone is waiting for.
const MaxSendAhead = 365 * 24 * time.Hour

// cancelSQL withdraws a pending webhook_outbox row with the same
// compare-and-set the fan-out's dispatched mark makes (outboxDispatchedSQL),
// which is the first statement of the fan-out's one transaction: the two
// take the row's lock in turn, and whichever commits first wins — the
// other matches nothing (a cancel refused as dispatched; a fan-out rolled
// back as stale, its event and deliveries never made). So unlike an
// email's, a row under a claim's lease can be cancelled: no event leaves
// before the dispatched mark commits.
//
// $2 is who asked; "" names the database role.
const cancelSQL = `UPDATE webhook_outbox
SET status = 'cancelled', cancelled_at = now(),
	cancelled_by = left(coalesce(nullif($2::text, ''), 'sql:' || session_user), 200)
WHERE id = $1 AND status = 'pending'`

// Cancel withdraws a pending webhook_outbox row — an event scheduled for
// later (Event.SendAt), or one waiting to retry its fan-out — before it is
// fanned out, recording when and who (the console's user, the CLI's --by;
// "" names the database role). No event or delivery is made from it, and
// the pruner deletes it after the retention like a dispatched row.
//
// An event already fanned out (its row dispatched) is refused: Cancel does
// not touch its deliveries. Any other status is refused too, naming it
// (errors.Is(err, ErrNotCancellable)); an unknown id gives ErrNotFound.
func Cancel(ctx context.Context, db DB, id, who string) error {
	if err := validateID(id); err != nil {
		return err
	}
	who = pgtext.Actor(who) // as the email side's cancel does: one rule for cancelled_by
	tag, err := db.Exec(ctx, cancelSQL, id, who)
	if err != nil {
		return fmt.Errorf("webhook: cancel webhook_outbox %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var status, by string
	var at *time.Time
	err = db.QueryRow(ctx, `SELECT status, cancelled_at, coalesce(cancelled_by, '') FROM webhook_outbox WHERE id = $1`, id).
		Scan(&status, &at, &by)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: webhook outbox row %s (dispatched and cancelled rows are pruned after the retention)", ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("webhook: cancel webhook_outbox %s: %w", id, err)
	}
	switch status {
	case "dispatched":
		return fmt.Errorf("%w: outbox row %s was already fanned out; its deliveries are not cancelled by this", ErrNotCancellable, id)
	case "cancelled":
		return fmt.Errorf("%w: outbox row %s was already cancelled at %s by %s", ErrNotCancellable, id, at.UTC().Format(time.RFC3339), by)
	case "pending":
		return fmt.Errorf("webhook: cancel webhook_outbox %s: the row changed while cancelling; check its status and retry", id)
	}
	return fmt.Errorf("%w: outbox row %s is %s", ErrNotCancellable, id, status)
}
