package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/pgtext"
)

// CancelRefusedError is Cancel's refusal. Its message says why the row's
// state rules a cancel out and what to do instead.
type CancelRefusedError struct {
	ID           string
	Status       string    // pending (being sent now), dispatched, skipped, failed or cancelled
	ClaimedUntil time.Time // pending only: when the claim's lease ends
	DispatchedAt time.Time // dispatched only
	CancelledAt  time.Time // cancelled only
	CancelledBy  string    // cancelled only
}

func (e *CancelRefusedError) Error() string {
	switch e.Status {
	case "pending":
		return fmt.Sprintf("email %s is being sent now (claimed until %s); try again after it: "+
			"if it was not sent by then, the cancel goes through", e.ID, e.ClaimedUntil.UTC().Format(time.RFC3339))
	case "dispatched":
		return fmt.Sprintf("email %s was already sent at %s: it cannot be cancelled", e.ID, e.DispatchedAt.UTC().Format(time.RFC3339))
	case "skipped":
		return fmt.Sprintf("email %s was skipped by its renderer and will not be sent: there is nothing to cancel", e.ID)
	case "failed":
		return fmt.Sprintf("email %s failed for good and is not sent unless requeued: there is nothing to cancel", e.ID)
	case "cancelled":
		return fmt.Sprintf("email %s was already cancelled at %s by %s", e.ID, e.CancelledAt.UTC().Format(time.RFC3339), e.CancelledBy)
	}
	return fmt.Sprintf("email %s has status %q: only a pending email can be cancelled", e.ID, e.Status)
}

// Is makes errors.Is(err, ErrNotCancellable) true.
func (e *CancelRefusedError) Is(target error) bool { return target == ErrNotCancellable }

// leasedSQL is true of a pending row that a worker holds under a running
// lease. The claim's lease and a retry's back-off are both a due time in
// front of now (the due column is the lease), so they are told apart by
// the attempt log: every mark appends the attempt it records in the same
// statement as its UPDATE (withAttemptLog), so a row whose latest claimed
// attempt (prior_attempts + attempts) is not logged yet is one whose
// worker has not marked it — it may be sending it right now. A scheduled
// row has never been claimed (attempts 0); a requeued one starts again
// from 0 too, and the log numbers its attempts after the ones before the
// requeue, so an attempt logged before it never answers for the claim
// after it.
//
// The log is partitioned by week, and every week is looked in: created_at
// is the application's (an INSERT may set it, a clock may run ahead of the
// database's), so a bound by it would miss the attempt of a row made
// "later" than its mark and refuse the cancel of a row no one holds. A
// cancel is one operator's single-row statement; planning its weeks costs
// milliseconds.
const leasedSQL = `(email_outbox.attempts > 0 AND email_outbox.next_attempt_at > now() AND NOT EXISTS (
	SELECT 1 FROM email_attempts a
	WHERE a.row_id = email_outbox.id AND a.attempt = email_outbox.prior_attempts + email_outbox.attempts))`

// cancelSQL withdraws a pending row that no worker holds, with a
// compare-and-set like every mark, and removes its secret keys as the
// skipped mark does (scrubSet): a cancelled row is terminal and keeps its
// record, not its single-use links. Against a worker it is one of two
// guarded writes to the same row: whichever commits first wins, and the
// other matches nothing (a stale mark, or this refusal).
//
// $2 is who asked; "" names the database role, as the requeue log does.
var cancelSQL = `UPDATE email_outbox
SET status = 'cancelled', cancelled_at = now(),
	cancelled_by = left(coalesce(nullif($2::text, ''), 'sql:' || session_user), 200), ` + scrubSet + `
WHERE id = $1 AND status = 'pending' AND NOT ` + leasedSQL

const cancelStateSQL = `SELECT status, ` + leasedSQL + `, next_attempt_at, dispatched_at, cancelled_at, coalesce(cancelled_by, '')
FROM email_outbox WHERE id = $1`

// Cancel withdraws a pending email before it is sent — one scheduled for
// later, or waiting to retry — recording when and who (the console's user,
// the CLI's --by; "" names the database role). The row becomes cancelled:
// never claimed again, its secret payload keys removed, its record kept.
//
// A row a worker is sending now (its claim's lease running) is refused:
// the send may already be under way, and a cancel that said "cancelled"
// of an email that went out would be a lie. Any other state is refused
// too; both with a *CancelRefusedError saying why (errors.Is(err,
// ErrNotCancellable)). An unknown id gives ErrNotFound.
func Cancel(ctx context.Context, db DB, id, who string) error {
	if !IsRowID(id) {
		return fmt.Errorf("%w: %q is not an email id (a UUID)", ErrNotFound, id)
	}
	who = pgtext.Actor(who)
	tag, err := db.Exec(ctx, cancelSQL, id, who)
	if err != nil {
		return fmt.Errorf("outbox: cancel %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	e := &CancelRefusedError{ID: id}
	var leased bool
	var due time.Time
	var dispatchedAt, cancelledAt *time.Time
	err = db.QueryRow(ctx, cancelStateSQL, id).Scan(&e.Status, &leased, &due, &dispatchedAt, &cancelledAt, &e.CancelledBy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("outbox: cancel %s: %w", id, err)
	}
	if dispatchedAt != nil {
		e.DispatchedAt = *dispatchedAt
	}
	if cancelledAt != nil {
		e.CancelledAt = *cancelledAt
	}
	if e.Status == "pending" {
		if !leased {
			// Leased when we updated, not when we looked: its worker
			// marked it (a retry) in between. Say so rather than pretend.
			return fmt.Errorf("outbox: cancel %s: the row changed while cancelling; check its status and retry", id)
		}
		e.ClaimedUntil = due
	}
	return e
}
