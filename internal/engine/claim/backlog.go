package claim

import (
	"context"
	"fmt"
	"time"
)

// Counts is what a table holds at one moment: its pending rows, those of
// them due and how long the oldest has been due, and its failed rows.
type Counts struct {
	Pending   int64
	Due       int64
	OldestDue time.Duration
	Failed    int64
}

// CountsSQL counts t's pending and failed rows. Each predicate is its
// partial index's in full (migration 00010): status = 'pending' alone
// would count a table of millions of sent rows by reading all of it.
func (t Table) CountsSQL() string {
	return fmt.Sprintf(`SELECT
	(SELECT count(*) FROM %[1]s WHERE %[2]s),
	(SELECT count(*) FROM %[1]s WHERE status = 'failed' AND created_at IS NOT NULL)`, t.Name, t.Pending())
}

// ReadCounts reads t's Counts through the claim and failed partial
// indexes (CountsSQL, ReadDue): cheap enough for every scrape and the
// console's sampler.
func (t Table) ReadCounts(ctx context.Context, db DB) (Counts, error) {
	var c Counts
	err := db.QueryRow(ctx, t.CountsSQL()).Scan(&c.Pending, &c.Failed)
	if err == nil {
		c.Due, c.OldestDue, err = t.ReadDue(ctx, db)
	}
	if err != nil {
		return Counts{}, fmt.Errorf("counts of %s: %w", t.Name, err)
	}
	return c, nil
}

// Statuses is the full picture of a table for an operator: the exact
// count of every status, the due rows, and the newest last errors.
type Statuses struct {
	ByStatus     map[string]int64
	Due          int64
	OldestDue    time.Duration
	RecentErrors []RecentError
}

// RecentError is a row's last error, newest first.
type RecentError struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
}

// ReadStatuses reads t's Statuses, with its recent newest last errors.
// It counts every status exactly, a scan of the table: fine for a
// command, not for a scrape (ReadCounts).
func (t Table) ReadStatuses(ctx context.Context, db DB, recent int) (Statuses, error) {
	s := Statuses{ByStatus: map[string]int64{}}
	fail := func(err error) (Statuses, error) { return Statuses{}, fmt.Errorf("%s: %w", t.Name, err) }
	rows, err := db.Query(ctx, fmt.Sprintf(`SELECT status, count(*) FROM %s GROUP BY status`, t.Name))
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return fail(err)
		}
		s.ByStatus[st] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if s.Due, s.OldestDue, err = t.ReadDue(ctx, db); err != nil {
		return fail(err)
	}
	rows, err = db.Query(ctx, fmt.Sprintf(`SELECT id::text, status, attempts, last_error FROM %s
			WHERE last_error IS NOT NULL ORDER BY created_at DESC LIMIT $1`, t.Name), recent)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var e RecentError
		if err := rows.Scan(&e.ID, &e.Status, &e.Attempts, &e.Error); err != nil {
			rows.Close()
			return fail(err)
		}
		s.RecentErrors = append(s.RecentErrors, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return s, nil
}
