package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// defaultExplainRows is the table size the plans are taken on.
const defaultExplainRows = 10_000

// recorder is an outbox.DB that remembers every statement it ran, so the
// plans below are of the statements the dispatcher really sends, not of a
// copy that could drift from them.
type recorder struct {
	outbox.DB
	mu    sync.Mutex
	stmts []statement
}

type statement struct {
	sql  string
	args []any
}

func (r *recorder) note(sql string, args []any) {
	r.mu.Lock()
	r.stmts = append(r.stmts, statement{sql, args})
	r.mu.Unlock()
}

func (r *recorder) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.note(sql, args)
	return r.DB.Exec(ctx, sql, args...)
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.note(sql, args)
	return r.DB.Query(ctx, sql, args...)
}

func (r *recorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r.note(sql, args)
	return r.DB.QueryRow(ctx, sql, args...)
}

// Begin records what the transaction queries too: a dispatcher sends some
// statements (the webhook fan-out of one row) inside one.
func (r *recorder) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := r.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return recordingTx{Tx: tx, r: r}, nil
}

// recordingTx is a transaction whose queries its recorder notes.
type recordingTx struct {
	pgx.Tx
	r *recorder
}

func (t recordingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.r.note(sql, args)
	return t.Tx.Query(ctx, sql, args...)
}

func (r *recorder) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		r.note(q.SQL, q.Arguments)
	}
	return r.DB.SendBatch(ctx, b)
}

func (r *recorder) find(substr string) (statement, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.stmts {
		if strings.Contains(s.sql, substr) {
			return s, true
		}
	}
	return statement{}, false
}

// explain fills email_outbox with 10,000 pending rows (by default), runs one batch
// through a recording DB to capture the claim and the dispatched mark as
// the dispatcher sends them, and takes EXPLAIN (ANALYZE, BUFFERS) of each
// (and of the claim as Drain sends it for all its batch slots) inside a
// transaction that is rolled back.
func (r *runner) explain(ctx context.Context) error {
	explainRows := cmp.Or(r.opts.explainRows, defaultExplainRows)
	pool, err := r.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	r.logf("explain: %d pending rows", explainRows)
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
SELECT 'raw', 'cus_bench', jsonb_build_object('to', 'customer' || i || '@example.com', 'subject', $2::text, 'text', $3::text)
FROM generate_series(1, $1::int) AS i`, explainRows, subject, r.body); err != nil {
		return fmt.Errorf("explain: fill: %w", err)
	}
	if err := r.settle(ctx, pool, "email_outbox"); err != nil {
		return err
	}

	rec := &recorder{DB: pool}
	d, err := outbox.NewDispatcher(rec, outbox.Config{
		Sender: outbox.SenderFunc(func(context.Context, smtp.Message) error { return nil }),
		Logger: discard,
	})
	if err != nil {
		return err
	}
	// A window of a millisecond: the lane's first claim, and the batch it
	// starts, run to their end. On a loaded machine the window can close
	// before the first claim is sent; a window that claimed nothing is
	// opened again, a bounded number of times.
	claimStmt, ok := statement{}, false
	for range 100 {
		if _, err := d.Run(ctx, time.Millisecond); err != nil {
			return fmt.Errorf("explain: batch: %w", err)
		}
		if claimStmt, ok = rec.find("FOR UPDATE SKIP LOCKED"); ok {
			break
		}
	}
	if !ok {
		return errors.New("explain: 100 one-millisecond windows sent no claim")
	}
	markStmt, ok := rec.find("status = 'dispatched'")
	if !ok {
		return errors.New("explain: the batch sent no dispatched mark")
	}
	var pending string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM email_outbox WHERE status = 'pending' ORDER BY next_attempt_at LIMIT 1`).Scan(&pending); err != nil {
		return err
	}
	markArgs := append([]any{pending}, markStmt.args[1:]...)
	// The claim's first argument is its LIMIT, whatever else it takes (the
	// fair claim: the served and known keys).
	drainArgs := append([]any{r.opts.Concurrency * d.Leases().BatchSize}, claimStmt.args[1:]...)

	for _, e := range []struct {
		name string
		stmt statement
		args []any
	}{
		{fmt.Sprintf("claim (%d pending rows, batch of %v)", explainRows, claimStmt.args[0]), claimStmt, claimStmt.args},
		// Drain claims for every free batch slot in one statement: the
		// same SQL with a larger LIMIT, the case a semi-join plans badly.
		{fmt.Sprintf("claim (%d pending rows, Drain with %d free batch slots)", explainRows, r.opts.Concurrency),
			claimStmt, drainArgs},
		{"dispatched mark (CAS on one pending row)", markStmt, markArgs},
	} {
		plan, err := explainRolledBack(ctx, pool, e.stmt.sql, e.args)
		if err != nil {
			return fmt.Errorf("explain %s: %w", e.name, err)
		}
		r.rep.Explains = append(r.rep.Explains, Explain{Name: e.name, SQL: e.stmt.sql, Plan: plan})
	}
	return nil
}

func explainRolledBack(ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, sql string, args []any) (string, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}
