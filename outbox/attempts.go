package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Attempt is one entry of an email row's log: an attempt as its mark
// recorded it (email_attempts; every mark appends one in the same
// statement), or an operator's requeue (email_requeues, Outcome
// OutcomeRequeued). Attempts are numbered over the row's life: after a
// requeue of a row that failed at #16, the next attempt is #17, though the
// row's own attempts count (its retry budget) starts again at 1. A
// requeue carries the number of the last attempt before it.
type Attempt struct {
	Attempt int       `json:"attempt"`
	Outcome Outcome   `json:"outcome"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
	By      string    `json:"by,omitempty"`   // a requeue's operator
	From    Status    `json:"from,omitempty"` // a requeue's earlier status
}

// OutcomeRequeued marks a requeue in a row's log. No mark writes it.
const OutcomeRequeued Outcome = "requeued"

// AttemptsFor returns a row's log, oldest first. A row whose lifetime count
// (PriorAttempts + Attempts) is higher than its last logged number had
// attempts that never marked: the worker died, or its lease ran out, first.
func AttemptsFor(ctx context.Context, db DB, rowID string) ([]Attempt, error) {
	byRow, err := AttemptsForRows(ctx, db, []string{rowID})
	return byRow[rowID], err
}

// attemptLogSQL reads attempts and requeues as one log: by number, and a
// requeue after the attempt whose number it carries.
const attemptLogSQL = `SELECT row_id::text, attempt, outcome, coalesce(error, ''), at, '', '', 0 AS requeue
	FROM email_attempts WHERE row_id = ANY ($1::uuid[])
UNION ALL
SELECT row_id::text, attempt, 'requeued', '', at, actor, from_status, 1
	FROM email_requeues WHERE row_id = ANY ($1::uuid[])
ORDER BY 1, 2, 8, 5`

// AttemptsForRows is AttemptsFor for many rows in one query, keyed by row
// id.
func AttemptsForRows(ctx context.Context, db DB, rowIDs []string) (map[string][]Attempt, error) {
	for _, id := range rowIDs {
		if !IsRowID(id) {
			return nil, invalid("row_id", "is not a row id")
		}
	}
	rows, err := db.Query(ctx, attemptLogSQL, rowIDs)
	if err != nil {
		return nil, fmt.Errorf("outbox: attempts: %w", err)
	}
	byRow := make(map[string][]Attempt, len(rowIDs))
	var id, outcome, from string
	var requeue int
	var a Attempt
	_, err = pgx.ForEachRow(rows, []any{&id, &a.Attempt, &outcome, &a.Error, &a.At, &a.By, &from, &requeue}, func() error {
		a.Outcome, a.From = Outcome(outcome), Status(from)
		byRow[id] = append(byRow[id], a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: attempts: %w", err)
	}
	return byRow, nil
}
