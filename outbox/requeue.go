package outbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/pgtext"
)

// NotFailedError is Requeue's refusal. Its message says why the row's
// state rules a requeue out and what to do instead.
type NotFailedError struct {
	ID            string
	Status        string // pending, dispatched or skipped
	Attempts      int
	NextAttemptAt time.Time
	DispatchedAt  time.Time // zero unless dispatched
}

func (e *NotFailedError) Error() string {
	switch e.Status {
	case "dispatched":
		return fmt.Sprintf("email %s was sent at %s; its links and PDF were removed from the stored payload when it was sent, "+
			"so it cannot be sent again: send a new email instead", e.ID, e.DispatchedAt.UTC().Format(time.RFC3339))
	case "skipped":
		return fmt.Sprintf("email %s was skipped by its renderer; its links and PDF were removed from the stored payload, "+
			"so it cannot be sent: send a new email instead", e.ID)
	case "cancelled":
		return fmt.Sprintf("email %s was cancelled; its links and PDF were removed from the stored payload, "+
			"so it cannot be sent: send a new email instead", e.ID)
	case "pending":
		return fmt.Sprintf("email %s is still pending (attempt %d so far, next attempt at %s): it is sent or retried "+
			"without a requeue", e.ID, e.Attempts, e.NextAttemptAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("email %s has status %q: only a failed email can be requeued", e.ID, e.Status)
}

// Is makes errors.Is(err, ErrNotFailed) true.
func (e *NotFailedError) Is(target error) bool { return target == ErrNotFailed }

// requeueSQL is the operator UPDATE (see docs/design/outbox-transport.md,
// Redelivery semantics): a failed row becomes pending with a fresh attempt
// budget, due now. Only failed rows qualify: a dispatched or skipped row's
// payload has been scrubbed, and a pending row is already on its way. The
// operator UPDATE run as plain SQL is logged the same way, by email_outbox's
// requeue trigger (migration 00012); this one only names its caller to the
// trigger first, in a setting that lasts until the statement's transaction
// ends. (The CTE holds a volatile call, so it is evaluated once, before the
// join hands the row to the update.)
const requeueSQL = `WITH actor AS (SELECT set_config('postbox.actor', $2, true))
UPDATE email_outbox SET status = 'pending', attempts = 0, next_attempt_at = now()
FROM actor WHERE id = $1 AND status = 'failed'`

var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// IsRowID reports whether s has the shape of an email_outbox id (a UUID):
// the one check every id that arrives from outside goes through.
func IsRowID(s string) bool { return uuidPattern.MatchString(s) }

// Requeue sends a failed email again: the next tick claims it as if new,
// with a fresh attempt budget. email_requeues records it with who (the
// console's user, the CLI's --by; "" names the database role), and the
// row's attempt log goes on numbering from its last attempt. Any other
// state is refused with a *NotFailedError saying why; an unknown id gives
// ErrNotFound.
func Requeue(ctx context.Context, db DB, id, who string) error {
	if !IsRowID(id) {
		return fmt.Errorf("%w: %q is not an email id (a UUID)", ErrNotFound, id)
	}
	who = pgtext.Actor(who)
	tag, err := db.Exec(ctx, requeueSQL, id, who)
	if err != nil {
		return fmt.Errorf("outbox: requeue %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	e := &NotFailedError{ID: id}
	var dispatchedAt *time.Time
	err = db.QueryRow(ctx, `SELECT status, attempts, next_attempt_at, dispatched_at FROM email_outbox WHERE id = $1`, id).
		Scan(&e.Status, &e.Attempts, &e.NextAttemptAt, &dispatchedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("outbox: requeue %s: %w", id, err)
	}
	if dispatchedAt != nil {
		e.DispatchedAt = *dispatchedAt
	}
	if e.Status == "failed" {
		// Failed when we looked, not when we updated: a concurrent requeue
		// (or one just now) won. Say so rather than pretend.
		return fmt.Errorf("outbox: requeue %s: the row changed while requeueing; check its status and retry", id)
	}
	return e
}
