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
//
// A failed delivery is not requeued: it is replayed (ReplayFailedSince),
// which sends a new event id receivers will not dedupe away.
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
