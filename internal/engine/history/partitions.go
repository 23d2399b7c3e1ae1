package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Table is one history table.
type Table string

// The history tables, each partitioned by week.
const (
	EmailAttempts           Table = "email_attempts"
	EmailEvents             Table = "email_events"
	WebhookDeliveryAttempts Table = "webhook_delivery_attempts"
)

// WebhookEvents is the history name under which the deletion of old
// webhook events (webhook.PruneEvents) is recorded in
// postbox_history_dropped; the table is not partitioned.
const WebhookEvents Table = "webhook_events"

// Tables are every history table, in the order the pass works them.
var Tables = []Table{EmailAttempts, EmailEvents, WebhookDeliveryAttempts}

const (
	// WeeksAhead is how many weeks after the current one Ensure makes. A
	// mark whose week does not exist fails, so the weeks ahead are what a
	// pool may go without a pass (no leader, every replica down, the pass
	// failing) before the marks fail: four weeks, during which the
	// postbox_history_weeks_ahead gauge falls and an alert fires.
	WeeksAhead = 4

	// lockTimeout bounds each catalog change's wait for its locks. Attaching
	// a week and dropping one take a lock that a long transaction on the
	// same table (a report, pg_dump) holds against them, and that marks
	// queue behind while they wait: past this they give up, and the next
	// pass tries again.
	lockTimeout = time.Second

	// detachTimeout bounds DETACH ... CONCURRENTLY, which waits for every
	// transaction using the table to end. A detach cut short stays
	// pending: the next pass finishes it (FINALIZE).
	detachTimeout = time.Minute
)

// Retention is how long each history keeps its rows; zero keeps them for
// ever. A week is dropped once it ends before now minus its retention, so
// a history keeps between its retention and a week more.
type Retention struct {
	Email   time.Duration // email_attempts and email_events (EMAIL_HISTORY_RETENTION)
	Webhook time.Duration // webhook_delivery_attempts (WEBHOOK_HISTORY_RETENTION)
}

// Of is t's retention.
func (r Retention) Of(t Table) time.Duration {
	if t == WebhookDeliveryAttempts || t == WebhookEvents {
		return r.Webhook
	}
	return r.Email
}

// Ensure makes every history table's weeks from the current one through
// WeeksAhead after it that do not exist yet, and returns how many it made.
// It is cheap when they all exist, so every replica calls it at boot.
func Ensure(ctx context.Context, db *pgxpool.Pool) (int, error) {
	made := 0
	var errs []error
	for _, t := range Tables {
		n, err := ensure(ctx, db, t)
		made += n
		if err != nil {
			errs = append(errs, fmt.Errorf("history: make the weeks ahead of %s: %w", t, err))
		}
	}
	return made, errors.Join(errs...)
}

func ensure(ctx context.Context, db *pgxpool.Pool, t Table) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, lockTimeout.String()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT postbox_history_partitions($1::regclass, now(), now() + $2 * interval '1 week')`,
			string(t), WeeksAhead).Scan(&n)
	})
	return n, err
}

// Week is one partition of a history table.
type Week struct {
	Table     Table
	Partition string
	End       time.Time // its upper bound: every row in it is older
	Pending   bool      // a detach begun and not finished

	// Took and Locked, for a week Drop dropped: how long its detach and
	// drop took in all, and how long the drop held the week's exclusive
	// lock (the detach holds none that the marks wait for).
	Took, Locked time.Duration
}

// weeksSQL lists a table's partitions with their upper bounds, read from
// the bound's own text (FOR VALUES FROM (...) TO ('...')), which Postgres
// prints in the session's style and reads back the same way. A week a
// pass dropped after the statement's snapshot was taken is still in the
// pg_inherits it reads, but pg_get_expr finds no table for it and gives
// NULL: it is no week any more, and is left out (a /metrics scrape beside
// a history pass's drops failed on it, and lost every history gauge).
const weeksSQL = `SELECT relname, week_end, pending FROM (
	SELECT c.relname,
		substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')::timestamptz AS week_end,
		i.inhdetachpending AS pending
	FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	WHERE i.inhparent = $1::regclass) w
WHERE week_end IS NOT NULL
ORDER BY week_end`

// Weeks lists t's partitions, oldest first.
func Weeks(ctx context.Context, db claim.DB, t Table) ([]Week, error) {
	rows, err := db.Query(ctx, weeksSQL, string(t))
	if err != nil {
		return nil, fmt.Errorf("history: list the weeks of %s: %w", t, err)
	}
	weeks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Week, error) {
		w := Week{Table: t}
		return w, r.Scan(&w.Partition, &w.End, &w.Pending)
	})
	if err != nil {
		return nil, fmt.Errorf("history: list the weeks of %s: %w", t, err)
	}
	return weeks, nil
}

// AheadOf is how far the newest week of t reaches past now: the time the
// marks can go on without a pass.
func AheadOf(weeks []Week, now time.Time) time.Duration {
	if len(weeks) == 0 {
		return 0
	}
	return max(weeks[len(weeks)-1].End.Sub(now), 0)
}

// Drop detaches and drops every week of every history table that ends
// before now minus its retention, and records each in
// postbox_history_dropped. It returns what it dropped, and every failure
// joined: one week that cannot be dropped now (its locks are held) does
// not keep the others.
func Drop(ctx context.Context, db *pgxpool.Pool, r Retention) ([]Week, error) {
	var dropped []Week
	var errs []error
	for _, t := range Tables {
		keep := r.Of(t)
		if keep <= 0 {
			continue
		}
		weeks, err := Weeks(ctx, db, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var now time.Time
		if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			errs = append(errs, fmt.Errorf("history: %w", err))
			continue
		}
		for _, w := range weeks {
			if !w.End.Before(now.Add(-keep)) {
				break
			}
			began := time.Now()
			locked, err := drop(ctx, db, w, keep)
			if err != nil {
				// A table detaches one week at a time: the next waits
				// for the next pass.
				errs = append(errs, fmt.Errorf("history: drop %s of %s: %w", w.Partition, t, err))
				break
			}
			w.Took, w.Locked = time.Since(began), locked
			dropped = append(dropped, w)
		}
	}
	return dropped, errors.Join(errs...)
}

// drop takes one week out. DETACH ... CONCURRENTLY locks the parent only
// against schema changes, so the marks writing the current week go on
// while it waits for the transactions that were using the table when it
// began (marks end in milliseconds; a report or pg_dump holding the table
// keeps it waiting up to detachTimeout, after which the week stays
// pending and the next pass finishes it). DROP TABLE of the detached week
// then locks that week alone: the logs hold no foreign key (migration
// 00018). The record is written before the drop: a reader then says
// "dropped" a moment early, never shows dropped history as never made.
func drop(ctx context.Context, db *pgxpool.Pool, w Week, keep time.Duration) (locked time.Duration, err error) {
	parent, part := pgx.Identifier{string(w.Table)}.Sanitize(), pgx.Identifier{w.Partition}.Sanitize()
	dctx, cancel := context.WithTimeout(ctx, detachTimeout)
	defer cancel()
	detach := `ALTER TABLE ` + parent + ` DETACH PARTITION ` + part + ` CONCURRENTLY`
	if w.Pending {
		detach = `ALTER TABLE ` + parent + ` DETACH PARTITION ` + part + ` FINALIZE`
	}
	if _, err := db.Exec(dctx, detach); err != nil {
		return 0, err
	}
	if err := RecordDropped(ctx, db, w.Table, &w.End, keep); err != nil {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, lockTimeout.String()); err != nil {
			return err
		}
		began := time.Now()
		defer func() { locked = time.Since(began) }() // the commit that releases it follows at once
		_, err := tx.Exec(ctx, `DROP TABLE `+part)
		return err
	})
	return locked, err
}

// RecordDropped records that every row of history t older than before
// (nil: now minus keep, by the database's clock) is gone; the newest
// cutoff wins. Drop records the weeks it drops; a history that is not
// partitioned records its own deletions (webhook.PruneEvents).
func RecordDropped(ctx context.Context, db claim.DB, t Table, before *time.Time, keep time.Duration) error {
	_, err := db.Exec(ctx, `INSERT INTO postbox_history_dropped (history, dropped_before, retention)
VALUES ($1, coalesce($2::timestamptz, now() - $3::interval), $3::interval)
ON CONFLICT (history) DO UPDATE SET dropped_before = greatest(postbox_history_dropped.dropped_before, EXCLUDED.dropped_before),
	retention = EXCLUDED.retention, dropped_at = now()`, string(t), before, keep)
	return err
}

// Cutoff is what retention dropped of one history: every row older than
// Before is gone.
type Cutoff struct {
	Before    time.Time
	Retention time.Duration
}

// Dropped reads what retention has dropped, by history; a history with
// nothing dropped is absent.
func Dropped(ctx context.Context, db claim.DB) (map[Table]Cutoff, error) {
	rows, err := db.Query(ctx, `SELECT history, dropped_before, extract(epoch FROM retention)::float8 FROM postbox_history_dropped`)
	if err != nil {
		return nil, fmt.Errorf("history: read what retention dropped: %w", err)
	}
	out := map[Table]Cutoff{}
	for rows.Next() {
		var t string
		var c Cutoff
		var secs float64
		if err := rows.Scan(&t, &c.Before, &secs); err != nil {
			return nil, fmt.Errorf("history: read what retention dropped: %w", err)
		}
		c.Retention = time.Duration(secs * float64(time.Second))
		out[Table(t)] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history: read what retention dropped: %w", err)
	}
	return out, nil
}
