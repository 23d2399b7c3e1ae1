package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Attempt is one recorded attempt at an email row: what its mark wrote,
// and when (email_attempts; every mark appends one in the same statement).
type Attempt struct {
	Attempt int       `json:"attempt"`
	Outcome Outcome   `json:"outcome"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// AttemptsFor returns a row's recorded attempts, oldest first. A row whose
// Attempts count is higher had attempts that never marked: the worker died,
// or its lease ran out, first.
func AttemptsFor(ctx context.Context, db DB, rowID string) ([]Attempt, error) {
	if !IsRowID(rowID) {
		return nil, invalid("row_id", "is not a row id")
	}
	rows, err := db.Query(ctx, `SELECT attempt, outcome, COALESCE(error, ''), at
		FROM email_attempts WHERE row_id = $1 ORDER BY attempt`, rowID)
	if err != nil {
		return nil, fmt.Errorf("outbox: attempts of %s: %w", rowID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var outcome string
		err := r.Scan(&a.Attempt, &outcome, &a.Error, &a.At)
		a.Outcome = Outcome(outcome)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: attempts of %s: %w", rowID, err)
	}
	return out, nil
}
