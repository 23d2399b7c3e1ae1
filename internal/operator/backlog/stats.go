package backlog

import (
	"context"
	"fmt"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Table is one outbox-shaped table as the operator's figures read it.
type Table struct {
	Name  string // label: email, webhook_outbox, webhook_deliveries
	Table claim.Table
}

// Tables are the outbox tables, in the order they are reported.
var Tables = []Table{
	{"email", claim.Table{Name: "email_outbox", DueColumn: "next_attempt_at"}},
	{"webhook_outbox", claim.Table{Name: "webhook_outbox", DueColumn: "next_attempt_at"}},
	{"webhook_deliveries", claim.Table{Name: "webhook_deliveries", DueColumn: "next_retry_at", LegacyNullDue: true}},
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

// ReadStats is the full picture for an operator: exact counts of every
// status (a scan of the table; fine for a command, not for a scrape).
func ReadStats(ctx context.Context, db claim.DB, recent int) ([]Stats, error) {
	var out []Stats
	for _, t := range Tables {
		s := Stats{Outbox: t.Name, ByStatus: map[string]int64{}}
		rows, err := db.Query(ctx, fmt.Sprintf(`SELECT status, count(*) FROM %s GROUP BY status`, t.Table.Name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table.Name, err)
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
		if s.Due, s.OldestDueAge, err = t.Table.ReadDue(ctx, db); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table.Name, err)
		}
		s.OldestDueSecs = s.OldestDueAge.Seconds()
		rows, err = db.Query(ctx, fmt.Sprintf(`SELECT id::text, status, attempts, last_error FROM %s
			WHERE last_error IS NOT NULL ORDER BY created_at DESC LIMIT $1`, t.Table.Name), recent)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Table.Name, err)
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
	"email":              {"pending", "dispatched", "skipped", "failed", "cancelled"},
	"webhook_outbox":     {"pending", "dispatched", "failed", "cancelled"},
	"webhook_deliveries": {"pending", "succeeded", "failed"},
}
