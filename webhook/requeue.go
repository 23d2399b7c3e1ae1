package webhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RequeueOutbox puts a failed webhook_outbox row back to pending with a
// fresh attempt budget, due now (ADR-072 decision 5's operator UPDATE). A
// row fails only after outboxSchedule's fan-outs all failed — a database
// problem — so requeue it once that is fixed. Any other state is refused
// with an error saying why; an unknown id gives ErrNotFound.
func RequeueOutbox(ctx context.Context, db DB, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, `UPDATE webhook_outbox SET status = 'pending', attempts = 0, next_attempt_at = now()
WHERE id = $1 AND status = 'failed'`, id)
	if err != nil {
		return fmt.Errorf("webhook: requeue %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var status string
	err = db.QueryRow(ctx, `SELECT status FROM webhook_outbox WHERE id = $1`, id).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: webhook outbox row %s (dispatched rows are pruned after the retention)", ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("webhook: requeue %s: %w", id, err)
	case status == "dispatched":
		return fmt.Errorf("webhook: outbox row %s was already fanned out; to send its event again: worker replay event <event-id>", id)
	default:
		return fmt.Errorf("webhook: outbox row %s is %s: only a failed row can be requeued", id, status)
	}
}

// RequeueDelivery puts a failed delivery back to pending with a fresh
// attempt budget, due now: the retry lane sends it again, to its own
// endpoint only, under the same webhook-id — to the receiver it is one more
// retry of a message it never accepted, and the endpoint's rate limit and
// breaker still apply. (A replay, by contrast, makes a new event for every
// endpoint subscribed to its type.) Any other state is refused with the
// reason; an unknown id gives ErrNotFound.
func RequeueDelivery(ctx context.Context, db DB, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, `UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_retry_at = now(),
	leased_until = NULL, last_error = NULL
WHERE id = $1 AND status = 'failed'`, id)
	if err != nil {
		return fmt.Errorf("webhook: requeue delivery %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var status string
	err = db.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE id = $1`, id).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: delivery %s", ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("webhook: requeue delivery %s: %w", id, err)
	case status == "succeeded":
		return fmt.Errorf("webhook: delivery %s already succeeded; to send its event again: worker replay event <event-id>", id)
	default:
		return fmt.Errorf("webhook: delivery %s is %s: only a failed delivery can be requeued (a pending one is still being retried)", id, status)
	}
}
