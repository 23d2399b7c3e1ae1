package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Waiting is who waits in email_outbox at one moment: the due rows of each
// priority, and the customers whose due rows have waited longest. With the
// fair claim, a customer's own backlog makes its own rows wait, not
// another's: a long wait at a priority shared by many customers means the
// relay (or EMAIL_RATE_LIMIT) is the bound; one customer alone at the top
// with the rest near zero is a bulk run taking its turns.
type Waiting struct {
	ByPriority []PriorityWait `json:"by_priority"`
	Customers  []CustomerWait `json:"customers"`
}

// PriorityWait is one priority's due rows, the customers they belong to,
// and how long the oldest has been due.
type PriorityWait struct {
	Priority  Priority      `json:"priority"`
	Due       int64         `json:"due"`
	Customers int64         `json:"customers"`
	OldestDue time.Duration `json:"oldest_due_ns"`
}

// CustomerWait is one customer's due rows, the most urgent priority among
// them, and how long the oldest has been due.
type CustomerWait struct {
	CustomerID string        `json:"customer_id"`
	Priority   Priority      `json:"priority"`
	Due        int64         `json:"due"`
	OldestDue  time.Duration `json:"oldest_due_ns"`
}

// dueSince is when a due row began to wait: its due time, or its creation
// for a due time that is not finite (a row written before due times were
// made finite; see claim.Table.ReadDueSQL).
const dueSince = `CASE WHEN isfinite(next_attempt_at) THEN next_attempt_at ELSE created_at END`

// The predicate is the claim index's, bounded by now: only due rows are read.
const (
	waitingByPrioritySQL = `SELECT priority, count(*), count(DISTINCT customer_id),
	EXTRACT(EPOCH FROM now() - min(` + dueSince + `))::float8
FROM email_outbox WHERE status = 'pending' AND next_attempt_at <= now()
GROUP BY priority ORDER BY priority`
	waitingCustomersSQL = `SELECT customer_id, min(priority), count(*), EXTRACT(EPOCH FROM now() - min(` + dueSince + `))::float8
FROM email_outbox WHERE status = 'pending' AND next_attempt_at <= now()
GROUP BY customer_id ORDER BY min(` + dueSince + `), customer_id LIMIT $1`
)

// ReadWaiting reads Waiting, with the top customers that have waited
// longest (none, and no second read, for top 0: a scrape's gauges). It
// reads every due row (through the claim index), as the due gauge does:
// cheap while little is due, a backlog's size when it is not.
func ReadWaiting(ctx context.Context, db claim.DB, top int) (Waiting, error) {
	var w Waiting
	rows, err := db.Query(ctx, waitingByPrioritySQL)
	if err != nil {
		return Waiting{}, fmt.Errorf("outbox: waiting by priority: %w", err)
	}
	var pw PriorityWait
	var secs float64
	if _, err := pgx.ForEachRow(rows, []any{&pw.Priority, &pw.Due, &pw.Customers, &secs}, func() error {
		pw.OldestDue = time.Duration(secs * float64(time.Second))
		w.ByPriority = append(w.ByPriority, pw)
		return nil
	}); err != nil {
		return Waiting{}, fmt.Errorf("outbox: waiting by priority: %w", err)
	}
	if top <= 0 {
		return w, nil
	}
	rows, err = db.Query(ctx, waitingCustomersSQL, top)
	if err != nil {
		return Waiting{}, fmt.Errorf("outbox: waiting customers: %w", err)
	}
	var cw CustomerWait
	if _, err := pgx.ForEachRow(rows, []any{&cw.CustomerID, &cw.Priority, &cw.Due, &secs}, func() error {
		cw.OldestDue = time.Duration(secs * float64(time.Second))
		w.Customers = append(w.Customers, cw)
		return nil
	}); err != nil {
		return Waiting{}, fmt.Errorf("outbox: waiting customers: %w", err)
	}
	return w, nil
}
