package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/leases"
)

// DB is what claims and marks need: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Table describes one outbox-shaped table. Names are constants of this
// module, never user input, so interpolating them into SQL is safe.
type Table struct {
	Name      string // e.g. "email_outbox"
	DueColumn string // e.g. "next_attempt_at"
	Returning string // columns the claim returns, e.g. "id, payload, attempts"

	// LegacyNullDue makes rows whose due column is NULL claimable too. Only
	// webhook_deliveries needs it: pre-P5 rows were written with NULL
	// next_retry_at (ADR-072 accepted residual), and would otherwise never
	// be delivered.
	LegacyNullDue bool
}

// ClaimSQL is the claim statement: $1 = batch size, $2 = lease.
//
// It is one statement, so it is its own short transaction and commits
// before the caller sends anything. SKIP LOCKED lets concurrent claimers
// take disjoint rows without waiting on each other; the lease stamp keeps a
// row out of every later claim until it expires; attempts is incremented
// here and nowhere else, so a claim-then-crash row still advances toward
// failed.
func (t Table) ClaimSQL() string {
	due, order := fmt.Sprintf("%s <= now()", t.DueColumn), t.DueColumn
	if t.LegacyNullDue {
		// The legacy branch; its table's claim index is built NULLS FIRST
		// to match. Elsewhere the due column is NOT NULL and the plain
		// ascending order is what lets the claim read its partial index
		// instead of sorting every due row per batch.
		due = fmt.Sprintf("(%s <= now() OR %s IS NULL)", t.DueColumn, t.DueColumn)
		order += " NULLS FIRST"
	}
	// id = ANY (ARRAY(…)) rather than id IN (…): the planner cannot turn
	// it into a join, so the update finds its rows by primary key however
	// large the batch. As a semi-join, a claim of a few hundred rows (one
	// for every free batch slot) was planned as a hash join over a
	// sequential scan of the whole table, whose dispatched rows are kept
	// forever.
	return fmt.Sprintf(`UPDATE %[1]s SET attempts = attempts + 1, %[2]s = now() + $2::interval
WHERE id = ANY (ARRAY(
	SELECT id FROM %[1]s
	WHERE status = 'pending' AND %[3]s
	ORDER BY %[5]s
	LIMIT $1
	FOR UPDATE SKIP LOCKED))
RETURNING %[4]s`, t.Name, t.DueColumn, due, t.Returning, order)
}

// Claim runs ClaimSQL and scans each returned row with scan.
func Claim[T any](ctx context.Context, db DB, t Table, n int, lease time.Duration, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := db.Query(ctx, t.ClaimSQL(), n, lease)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", t.Name, err)
	}
	claimed, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", t.Name, err)
	}
	return claimed, nil
}

// Release makes claimed-but-unstarted rows due again at once instead of
// letting them wait out their lease. Guarded like every mark: a row another
// worker already resolved is left alone. The claim's attempt increment
// stands; a released row spent no send, but undoing the increment would
// need a second write site for attempts.
func Release(ctx context.Context, db DB, t Table, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	ctx, cancel := MarkContext(ctx)
	defer cancel()
	tag, err := db.Exec(ctx, fmt.Sprintf(
		`UPDATE %s SET %s = now() WHERE id = ANY($1::uuid[]) AND status = 'pending'`,
		t.Name, t.DueColumn), ids)
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", t.Name, err)
	}
	return tag.RowsAffected(), nil
}

// MarkContext detaches a mark from its caller's cancellation and bounds it
// by leases.MarkTimeout (ADR-072 decision 3). A batch or row context that
// died after the send must not lose the record of the send: that is what
// re-sent delivered invoices before P5.
func MarkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), leases.MarkTimeout)
}
