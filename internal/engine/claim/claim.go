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

// DB is what postbox needs of Postgres for claims, marks and every other
// statement it runs, in every package: a pool (*pgxpool.Pool), a
// connection (*pgx.Conn, *pgxpool.Conn) or a transaction (pgx.Tx), all of
// which have every method. Claims and mark groups send batches; the
// webhook fan-out, replays and the operator's reads begin transactions
// (in a transaction, a savepoint).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Table describes one outbox-shaped table. Names are constants of this
// module, never user input, so interpolating them into SQL is safe.
//
// Its claim index is built on the due column WHERE status = 'pending' AND
// the due column IS NOT NULL (migration 00010). The second condition
// holds for every row a claim can take, and only a statement that bounds
// the due column implies it: one that names a row by id and status =
// 'pending' — every mark, release and requeue — cannot, so the planner
// cannot choose to read the whole claim index for that one row. It did,
// whenever the statistics said nothing was pending (ANALYZE ran between
// two backlogs): every mark then read every pending row.
type Table struct {
	Name      string // e.g. "email_outbox"
	DueColumn string // e.g. "next_attempt_at"
	Returning string // columns the claim returns, e.g. "id, payload, attempts"

	// LegacyNullDue makes the sweep move rows whose due column is NULL into
	// the claim window too. Only webhook_deliveries needs it: rows written
	// before deliveries were born leased have NULL next_retry_at (see
	// docs/design/outbox-transport.md, Deliveries written before leases), and
	// would otherwise never be delivered.
	LegacyNullDue bool

	// Claimable, if set, is a condition a pending, due row must also meet
	// to be claimed at all (webhook deliveries: their endpoint is enabled),
	// on the table by its name. The window waits
	// for, and the sweep moves, only such rows: a disabled endpoint's
	// deliveries wait behind the window without holding it back, and come
	// back into it with the sweep once the endpoint is enabled.
	Claimable string

	// LeaseColumn, if set, is a column holding the lease alone (the due
	// column holds a retry's back-off too): Release clears it, so a
	// count of leased rows (webhook_deliveries.leased_until, what an
	// endpoint's max_in_flight counts) drops a released row at once.
	LeaseColumn string

	// Fair, if set, names the columns of its fair claim (ClaimFair):
	// whose rows they are and how urgent.
	Fair *Share
}

// ClaimSQL is the claim statement: $1 = batch size, $2 = lease, $3 = the
// window's edge (Window.Low).
//
// It is one statement, so it is its own short transaction and commits
// before the caller sends anything. SKIP LOCKED lets concurrent claimers
// take disjoint rows without waiting on each other; the lease stamp keeps a
// row out of every later claim until it expires; attempts is incremented
// here and nowhere else, so a claim-then-crash row still advances toward
// failed. Its SET list is Set's, as every claim's.
func (t Table) ClaimSQL() string {
	return fmt.Sprintf(`UPDATE %[1]s SET %[2]s
WHERE id = ANY (ARRAY(%[3]s))
RETURNING %[4]s`, t.Name, t.set(), t.ClaimIDsSQL("$1", "$3"), t.Returning)
}

// set is the SET list of t's claims (Set): attempts counted, the due
// column leased for $2.
func (t Table) set() string {
	return Set("", "now() + $2::interval", t.DueColumn)
}

// ClaimIDsSQL is the claim's choice of rows, a query of their ids: at most
// limit pending, due, claimable rows from the window's edge low (SQL
// parameters), oldest due first, locked FOR UPDATE SKIP LOCKED. A
// statement that claims rows and does more with them in the same
// transaction (the webhook fan-out) takes its rows here, as ClaimSQL does.
func (t Table) ClaimIDsSQL(limit, low string) string {
	due, order := t.Due("", low)
	// Take them as id = ANY (ARRAY(…)) rather than id IN (…): the planner
	// cannot turn it into a join, so the update finds its rows by primary
	// key however large the batch. As a semi-join, a claim of a few
	// hundred rows (one for every free batch slot) was planned as a hash
	// join over a sequential scan of the whole table, whose dispatched
	// rows are kept forever.
	return fmt.Sprintf(`
	SELECT id FROM %[1]s
	WHERE status = 'pending' AND %[2]s%[5]s
	ORDER BY %[3]s
	LIMIT %[4]s
	FOR UPDATE SKIP LOCKED`, t.Name, due, order, limit, t.claimable())
}

// NextSQL reads, after a claim in the same transaction, the database's
// now() and the due time of the first row in the window from edge $1 that
// is still claimable and due (NULL when there is none): one the claim left
// for want of room in its batch, one another transaction held locked, one
// webhook admission held back. The window's edge stops there (Advance).
func (t Table) NextSQL() string {
	due, order := t.Due("", "$1")
	return fmt.Sprintf(`SELECT now(), (SELECT %[2]s FROM %[1]s
	WHERE status = 'pending' AND %[3]s%[5]s
	ORDER BY %[4]s LIMIT 1)`, t.Name, t.DueColumn, due, order, t.claimable())
}

// claimable is Claimable as an extra condition.
func (t Table) claimable() string {
	if t.Claimable == "" {
		return ""
	}
	return " AND " + t.Claimable
}

// Due is the claim's "due" predicate and its order, for t's due column
// qualified by alias (none when ""), from the window edge in parameter
// low (none when ""): ClaimSQL's, and that of a claim that joins the table
// to another (webhook deliveries to their endpoints). It bounds the due
// column, so it implies the claim index's predicate (see Table), and it
// reads the index in order from the edge.
func (t Table) Due(alias, low string) (due, order string) {
	col := t.DueColumn
	if alias != "" {
		col = alias + "." + col
	}
	due = col + " <= now()"
	if low != "" {
		due = fmt.Sprintf("%s >= %s::timestamptz AND %s", col, low, due)
	}
	return due, col
}

// IndexOnlySQL makes the rest of its transaction read tables through their
// indexes: the statements of the claims and the sweep, which run thousands
// of times on one connection, are planned once for all (a generic plan),
// and a plan made while a table was new and small — a sequential scan of
// "ten pages" looks cheaper than the primary key for a list of ids — would
// read the whole table for every claim once it had grown: under a held
// snapshot, every dead tuple of it. With sequential scans off the planner
// takes the index whatever it thinks the table's size is. It is local
// (set_config's third argument), so it ends with the transaction, also the
// implicit one of a batch.
//
// It turns JIT compilation off as well. A sequential scan the planner
// cannot avoid (the endpoints a fan-out matches an event's type against)
// costs the planner's "disabled" penalty, which lifts the whole plan past
// jit_above_cost: JIT then compiled the webhook fan-out's plan on every
// execution, 2 s a claim on an empty table.
const IndexOnlySQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// Claim runs ClaimSQL from w's edge (the table's start when w is nil) and
// scans each returned row with scan, then moves w's edge to what NextSQL
// found. All run in one implicit transaction (a batch), so NextSQL sees
// the claim's own leases and shares its now().
func Claim[T any](ctx context.Context, db DB, t Table, w *Window, n int, lease time.Duration, scan pgx.RowToFunc[T]) ([]T, error) {
	claimed, _, err := claimRows(ctx, db, t, w, t.memoized("claim", t.ClaimSQL), n, lease, scan)
	return claimed, err
}

// ClaimWith is Claim with a statement of the caller's in place of
// ClaimSQL: one that takes its rows with ClaimIDsSQL("$1", "$3") and does
// more with them in the same transaction (the webhook fan-out makes their
// events and deliveries), with the same parameters — $1 the most rows, $2
// a lease, $3 the window's edge — and in the same batch as the window's
// read of where to start next; args are its parameters from $4 on. scan
// reads each row the statement returns.
func ClaimWith[T any](ctx context.Context, db DB, t Table, w *Window, sql string, n int, lease time.Duration, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	claimed, _, err := claimRows(ctx, db, t, w, sql, n, lease, scan, args...)
	return claimed, err
}

// claimRows is Claim with its statement claimSQL; left reports that
// NextSQL found a row still due in the window (always false when w is
// nil).
func claimRows[T any](ctx context.Context, db DB, t Table, w *Window, claimSQL string, n int, lease time.Duration, scan pgx.RowToFunc[T], args ...any) (claimed []T, left bool, err error) {
	// A claim commits before its rows reach the caller. Cancelled in
	// between — a shift's window closing, a stop — it would leave them
	// under a lease no one works until the lease ran out (minutes). So,
	// like a mark, a claim once begun is detached from its caller's
	// cancellation and bounded on its own; its rows are the caller's to
	// start or release.
	ctx, cancel := MarkContext(ctx)
	defer cancel()
	edge, token := w.Start()
	fail := func(err error) ([]T, bool, error) { return nil, false, fmt.Errorf("claim %s: %w", t.Name, err) }
	b := &pgx.Batch{}
	b.Queue(IndexOnlySQL)
	b.Queue(claimSQL, append([]any{n, lease, edge}, args...)...)
	if w != nil {
		b.Queue(t.memoized("next", t.NextSQL), edge)
	}
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return fail(err)
	}
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	if claimed, err = pgx.CollectRows(rows, scan); err != nil {
		return fail(err)
	}
	var now, next time.Time
	var due *time.Time
	if w != nil {
		if err := br.QueryRow().Scan(&now, &due); err != nil {
			return fail(err)
		}
	}
	if err := br.Close(); err != nil {
		return fail(err)
	}
	if w != nil {
		if due != nil {
			next = *due
		}
		w.Advance(token, now, next)
	}
	return claimed, due != nil, nil
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
	tag, err := db.Exec(ctx, t.ReleaseSQL(), ids)
	if err != nil {
		logger.Error("releasing unstarted rows failed; they wait out their lease",
			"outbox", t.Name, "rows", ids, "reason", why, "error", err.Error())
		return 0, fmt.Errorf("release %s: %w", t.Name, err)
	}
	logger.Info("released unstarted rows", "outbox", t.Name, "rows", ids, "released", tag.RowsAffected(), "reason", why)
	return tag.RowsAffected(), nil
}

// ReleaseSQL is Release's statement: $1 = the rows' ids.
func (t Table) ReleaseSQL() string {
	set := t.DueColumn + " = now()"
	if t.LeaseColumn != "" {
		set += ", " + t.LeaseColumn + " = NULL"
	}
	return fmt.Sprintf(`UPDATE %s SET %s WHERE id = ANY($1::uuid[]) AND status = 'pending'`, t.Name, set)
}

// LandedSQL is Landed's statement: $1 = the row's id.
func (t Table) LandedSQL() string {
	return fmt.Sprintf(`SELECT status FROM %s WHERE id = $1`, t.Name)
}

// MarkContext detaches a mark from its caller's cancellation and bounds it by
// leases.MarkTimeout (see docs/design/outbox-transport.md, Detached marks). A
// batch or row context that died after the send must not lose the record of
// the send: a mark cancelled with its batch leaves a sent row pending, and
// the next claim sends it again.
func MarkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), leases.MarkTimeout)
}

// Mark retries (see docs/design/outbox-transport.md, Detached marks): a CAS
// mark is safe to run again — if an earlier try applied, the next matches
// nothing — so a mark that fails on the connection is retried instead of
// leaving a sent row to be re-sent after its lease. A Postgres restart of a
// few seconds then costs no duplicate.
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
	err := db.QueryRow(ctx, t.LandedSQL(), id).Scan(&got)
	return err == nil && got == status
}

// Pending is the predicate of every pending row of t, phrased so that the
// planner reads the claim index (and the legacy rows' own) rather than the
// whole table: status = 'pending' alone implies neither index's predicate.
func (t Table) Pending() string {
	p := fmt.Sprintf("status = 'pending' AND %s IS NOT NULL", t.DueColumn)
	if t.LegacyNullDue {
		p = fmt.Sprintf("status = 'pending' AND (%[1]s IS NOT NULL OR %[1]s IS NULL)", t.DueColumn)
	}
	return p
}

// ReadDue reads how many pending rows of t are due now and how long the
// oldest of them has been due (zero when none is). The claim's partial
// index serves it (and, for the legacy rows with no due time, theirs), so
// it is cheap enough for every scrape and every console sample.
func (t Table) ReadDue(ctx context.Context, db DB) (due int64, oldest time.Duration, err error) {
	var secs float64
	err = db.QueryRow(ctx, t.ReadDueSQL()).Scan(&due, &secs)
	return due, time.Duration(secs * float64(time.Second)), err
}

// ReadDueSQL is ReadDue's statement. A row due since '-infinity' counts
// as waiting since it was created, as one with no due time does: now()
// minus an infinite time is an error, and one such row (plain SQL from
// before migration 00026) would fail every scrape and blind the gauges of
// every outbox.
func (t Table) ReadDueSQL() string {
	cond := t.DueColumn + " <= now()"
	if t.LegacyNullDue {
		cond = fmt.Sprintf("(%s OR %s IS NULL)", cond, t.DueColumn)
	}
	return fmt.Sprintf(`SELECT count(*),
		COALESCE(EXTRACT(EPOCH FROM now() - min(COALESCE(CASE WHEN isfinite(%[1]s) THEN %[1]s END, created_at))), 0)::float8
		FROM %[2]s WHERE status = 'pending' AND %[3]s`, t.DueColumn, t.Name, cond)
}
