package webhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/pgtext"
)

// The requeues' guarded UPDATEs: $1 = the row's id. A delivery's requeue
// also names its caller ($2, pgtext.Actor) in the transaction-local setting
// postbox.actor, as outbox.Requeue names it to email_outbox's requeue
// trigger, so what watches webhook_deliveries sees who put the row back.
// (The CTE holds a volatile call, so it is evaluated once, before the
// update reads it.)
const (
	requeueOutboxSQL = `UPDATE webhook_outbox SET status = 'pending', attempts = 0, next_attempt_at = now()
WHERE id = $1 AND status = 'failed'`
	requeueDeliverySQL = `WITH actor AS (SELECT set_config('postbox.actor', $2, true))
UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_retry_at = now(),
	leased_until = NULL, last_error = NULL, order_skipped_at = NULL
WHERE id = $1 AND status = 'failed'
	AND EXISTS (SELECT FROM actor)`
)

// RequeueOutbox puts a failed webhook_outbox row back to pending with a fresh
// attempt budget, due now: the operator UPDATE (see
// docs/design/outbox-transport.md, Redelivery semantics). A row fails only
// after outboxBackoff's fan-outs all failed — a database problem — so
// requeue it once that is fixed. Any other state is refused with an error
// saying why; an unknown id gives ErrNotFound.
func RequeueOutbox(ctx context.Context, db DB, id string) error {
	return updateFailed(ctx, db, id, requeueOutboxSQL, "webhook_outbox", "webhook outbox row %s (dispatched rows are pruned after the retention)",
		func(status string) error {
			if status == "dispatched" {
				return fmt.Errorf("webhook: outbox row %s was already fanned out; to send its event again: worker replay event <event-id>", id)
			}
			return fmt.Errorf("webhook: outbox row %s is %s: only a failed row can be requeued", id, status)
		})
}

// RequeueDelivery puts a failed delivery back to pending with a fresh
// attempt budget, due now: the retry lane sends it again, to its own
// endpoint only, under the same webhook-id — to the receiver it is one more
// retry of a message it never accepted, and the endpoint's rate limit and
// breaker still apply. (A replay, by contrast, makes a new event for every
// endpoint subscribed to its type.) who is the caller (the console's user,
// the CLI's --by; "" names the database role), as outbox.Requeue takes it.
// Any other state is refused with the reason; an unknown id gives
// ErrNotFound.
func RequeueDelivery(ctx context.Context, db DB, id, who string) error {
	return updateFailed(ctx, db, id, requeueDeliverySQL, "webhook_deliveries", "delivery %s",
		func(status string) error {
			if status == "succeeded" {
				return fmt.Errorf("webhook: delivery %s already succeeded; to send its event again: worker replay event <event-id>", id)
			}
			return fmt.Errorf("webhook: delivery %s is %s: only a failed delivery can be requeued (a pending one is still being retried)", id, status)
		}, pgtext.Actor(who))
}

// updateFailed runs a guarded UPDATE of a failed row (a requeue, a skip)
// on row id of table and, when it matched nothing, says why: notFound (a format taking the id) for
// an unknown row, refuse for a row in another status. args are update's
// parameters after the id.
func updateFailed(ctx context.Context, db DB, id, update, table, notFound string, refuse func(status string) error, args ...any) error {
	if err := validateID(id); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, update, append([]any{id}, args...)...)
	if err != nil {
		return fmt.Errorf("webhook: requeue %s %s: %w", table, id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var status string
	// table is one of this package's constants, never input.
	err = db.QueryRow(ctx, `SELECT status FROM `+table+` WHERE id = $1`, id).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: "+notFound, ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("webhook: requeue %s %s: %w", table, id, err)
	}
	return refuse(status)
}
