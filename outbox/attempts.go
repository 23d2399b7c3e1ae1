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
	byRow, err := AttemptsForRows(ctx, db, []string{rowID})
	return byRow[rowID], err
}

// AttemptsForRows is AttemptsFor for many rows in one query, keyed by row
// id.
func AttemptsForRows(ctx context.Context, db DB, rowIDs []string) (map[string][]Attempt, error) {
	for _, id := range rowIDs {
		if !IsRowID(id) {
			return nil, invalid("row_id", "is not a row id")
		}
	}
	rows, err := db.Query(ctx, `SELECT row_id::text, attempt, outcome, COALESCE(error, ''), at
		FROM email_attempts WHERE row_id = ANY ($1::uuid[]) ORDER BY row_id, attempt`, rowIDs)
	if err != nil {
		return nil, fmt.Errorf("outbox: attempts: %w", err)
	}
	byRow := make(map[string][]Attempt, len(rowIDs))
	var id, outcome string
	var a Attempt
	_, err = pgx.ForEachRow(rows, []any{&id, &a.Attempt, &outcome, &a.Error, &a.At}, func() error {
		a.Outcome = Outcome(outcome)
		byRow[id] = append(byRow[id], a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: attempts: %w", err)
	}
	return byRow, nil
}
