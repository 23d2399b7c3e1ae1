package backlog

import (
	"context"
	"fmt"
	"time"

	"github.com/postbox/postbox/internal/claim"
)

// Table is one table the figures report on.
type Table struct {
	Name      string // label: email, webhook_outbox, webhook_deliveries
	Table     string
	DueColumn string
	Legacy    bool // NULL due column counts as due (webhook_deliveries)
}

// Tables are the outbox tables, in the order they are reported.
var Tables = []Table{
	{"email", "email_outbox", "next_attempt_at", false},
	{"webhook_outbox", "webhook_outbox", "next_attempt_at", false},
	{"webhook_deliveries", "webhook_deliveries", "next_retry_at", true},
}

// Stats is one table's state.
type Stats struct {
	Outbox        string           `json:"outbox"`
	ByStatus      map[string]int64 `json:"by_status"`
	Due           int64            `json:"due"`
	OldestDueAge  time.Duration    `json:"-"`
	OldestDueSecs float64          `json:"oldest_due_age_seconds"`
	RecentErrors  []RecentError    `json:"recent_errors"`
}

// RecentError is a row's last error, newest first.
type RecentError struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
}

// ReadDue reads the due count and the age of the oldest due row: how long
// the longest-waiting row has been due and not sent. It is served by the
// claim's partial index, so it is cheap enough for every scrape.
func ReadDue(ctx context.Context, db claim.DB, t Table) (due int64, oldest time.Duration, err error) {
	cond := t.DueColumn + " <= now()"
	if t.Legacy {
		cond = "(" + cond + " OR " + t.DueColumn + " IS NULL)"
	}
	var secs float64
	err = db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*),
		COALESCE(EXTRACT(EPOCH FROM now() - min(COALESCE(%s, created_at))), 0)::float8
		FROM %s WHERE status = 'pending' AND %s`, t.DueColumn, t.Table, cond)).Scan(&due, &secs)
	return due, time.Duration(secs * float64(time.Second)), err
}

// ReadStats is the full picture for an operator: exact counts of every
// status (a scan of the table; fine for a command, not for a scrape).
func ReadStats(ctx context.Context, db claim.DB, recent int) ([]Stats, error) {
	var out []Stats
	for _, t := range Tables {
		s := Stats{Outbox: t.Name, ByStatus: map[string]int64{}}
		rows, err := db.Query(ctx, fmt.Sprintf(`SELECT status, count(*) FROM %s GROUP BY status`, t.Table))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table, err)
		}
		for rows.Next() {
			var st string
			var n int64
			if err := rows.Scan(&st, &n); err != nil {
				rows.Close()
				return nil, err
			}
			s.ByStatus[st] = n
		}
		rows.Close()
		if s.Due, s.OldestDueAge, err = ReadDue(ctx, db, t); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table, err)
		}
		s.OldestDueSecs = s.OldestDueAge.Seconds()
		rows, err = db.Query(ctx, fmt.Sprintf(`SELECT id::text, status, attempts, last_error FROM %s
			WHERE last_error IS NOT NULL ORDER BY created_at DESC LIMIT $1`, t.Table), recent)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table, err)
		}
		for rows.Next() {
			var e RecentError
			if err := rows.Scan(&e.ID, &e.Status, &e.Attempts, &e.Error); err != nil {
				rows.Close()
				return nil, err
			}
			s.RecentErrors = append(s.RecentErrors, e)
		}
		rows.Close()
		out = append(out, s)
	}
	return out, nil
}

// StatusOrder is each outbox's statuses in the order a row moves through them.
var StatusOrder = map[string][]string{
	"email":              {"pending", "dispatched", "skipped", "failed"},
	"webhook_outbox":     {"pending", "dispatched", "failed"},
	"webhook_deliveries": {"pending", "succeeded", "failed"},
}
