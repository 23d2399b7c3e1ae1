package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

	// LeaseColumn, if set, is a column holding the lease alone (the due
	// column holds a retry's back-off too): Release clears it, so a
	// count of leased rows (webhook_deliveries.leased_until, what an
	// endpoint's max_in_flight counts) drops a released row at once.
	LeaseColumn string
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
	due, order := t.Due("")
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

// Due is the claim's "due" predicate and its order, for t's due column
// qualified by alias (none when ""): ClaimSQL's, and that of a claim that
// joins the table to another (webhook deliveries to their endpoints).
func (t Table) Due(alias string) (due, order string) {
	col := t.DueColumn
	if alias != "" {
		col = alias + "." + col
	}
	due, order = fmt.Sprintf("%s <= now()", col), col
	if t.LegacyNullDue {
		// The legacy branch; its table's claim index is built NULLS FIRST
		// to match. Elsewhere the due column is NOT NULL and the plain
		// ascending order is what lets the claim read its partial index
		// instead of sorting every due row per batch.
		due = fmt.Sprintf("(%s <= now() OR %s IS NULL)", col, col)
		order += " NULLS FIRST"
	}
	return due, order
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
// letting them wait out their lease, and logs it: the one release of every
// outbox. Guarded like every mark: a row another worker already resolved
// is left alone. The claim's attempt increment stands; a released row
// spent no send, but undoing the increment would need a second write site
// for attempts. A failed release is logged at error level; those rows wait
// out their lease.
func Release(ctx context.Context, db DB, t Table, ids []string, why string, logger *slog.Logger) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	ctx, cancel := MarkContext(ctx)
	defer cancel()
	set := t.DueColumn + " = now()"
	if t.LeaseColumn != "" {
		set += ", " + t.LeaseColumn + " = NULL"
	}
	tag, err := db.Exec(ctx, fmt.Sprintf(
		`UPDATE %s SET %s WHERE id = ANY($1::uuid[]) AND status = 'pending'`,
		t.Name, set), ids)
	if err != nil {
		logger.Error("releasing unstarted rows failed; they wait out their lease",
			"outbox", t.Name, "rows", ids, "reason", why, "error", err.Error())
		return 0, fmt.Errorf("release %s: %w", t.Name, err)
	}
	logger.Info("released unstarted rows", "outbox", t.Name, "rows", ids, "released", tag.RowsAffected(), "reason", why)
	return tag.RowsAffected(), nil
}

// MarkContext detaches a mark from its caller's cancellation and bounds it
// by leases.MarkTimeout (ADR-072 decision 3). A batch or row context that
// died after the send must not lose the record of the send: that is what
// re-sent delivered invoices before P5.
func MarkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), leases.MarkTimeout)
}

// Mark retries (ADR-072 decision 3, amended): a CAS mark is safe to run
// again — if an earlier try applied, the next matches nothing — so a mark
// that fails on the connection is retried instead of leaving a sent row
// to be re-sent after its lease. A Postgres restart of a few seconds then
// costs no duplicate.
const (
	retryFirstDelay = 100 * time.Millisecond
	retryMaxDelay   = 2 * time.Second
)

// RetryMark runs try, each time on MarkContext, until it succeeds, fails
// for a reason a retry cannot help (the server refused the statement, a
// stale mark), or until would pass before the next try. until is the last
// moment a mark is still worth making: the end of the row's lease, after
// which a sibling may already have claimed it.
//
// ambiguous reports that an earlier try failed on the connection, so a
// stale result of a later try may be that earlier try's own commit: the
// caller checks the row before calling it stale.
func RetryMark(ctx context.Context, until time.Time, try func(ctx context.Context) error) (ambiguous bool, err error) {
	delay := retryFirstDelay
	for {
		mctx, cancel := MarkContext(ctx)
		err = try(mctx)
		cancel()
		if err == nil || !Retriable(err) || time.Now().Add(delay).After(until) {
			return ambiguous, err
		}
		ambiguous = true
		time.Sleep(delay)
		delay = min(delay*2, retryMaxDelay)
	}
}

// IsCheckViolation reports whether err is Postgres's check_violation for
// the named constraint: a row a CHECK refused, which the enqueues turn into
// a validation error naming the field.
func IsCheckViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == constraint
}

// Retriable reports whether a statement that failed with err may succeed
// if run again unchanged: the connection broke or timed out, or the server
// was shutting down or starting up. A statement the server refused on its
// merits (a constraint, bad input) is not.
func Retriable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || // connection exception
			c == "57P01" || c == "57P02" || c == "57P03" || // admin shutdown, crash shutdown, cannot connect now
			c == "40001" || c == "40P01" // serialization failure, deadlock: safe to re-run
	}
	// Not the server's answer: the connection, a timeout, a pool that
	// could not connect. Only a stale mark is final.
	return !errors.Is(err, ErrStale)
}

// ErrStale is matched (errors.Is) by every outbox's stale-mark error: a CAS
// mark that matched no row because the row was no longer pending. The
// outboxes' own sentinels (outbox.ErrStaleMark, webhook.ErrStaleMark)
// match it too.
var ErrStale = errors.New("stale mark: the row is no longer pending")

// Landed reports whether row id of t already has status: after a mark
// whose answer was lost, a retry that finds the row stale may be finding
// its own earlier commit rather than a sibling's.
func Landed(ctx context.Context, db DB, t Table, id, status string) bool {
	ctx, cancel := MarkContext(ctx)
	defer cancel()
	var got string
	err := db.QueryRow(ctx, fmt.Sprintf(`SELECT status FROM %s WHERE id = $1`, t.Name), id).Scan(&got)
	return err == nil && got == status
}

// ReadDue reads how many pending rows of t are due now and how long the
// oldest of them has been due (zero when none is). The claim's partial
// index serves it, so it is cheap enough for every scrape and every
// console sample.
func (t Table) ReadDue(ctx context.Context, db DB) (due int64, oldest time.Duration, err error) {
	cond, _ := t.Due("")
	var secs float64
	err = db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*),
		COALESCE(EXTRACT(EPOCH FROM now() - min(COALESCE(%s, created_at))), 0)::float8
		FROM %s WHERE status = 'pending' AND %s`, t.DueColumn, t.Name, cond)).Scan(&due, &secs)
	return due, time.Duration(secs * float64(time.Second)), err
}
