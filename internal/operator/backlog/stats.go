package backlog

import (
	"context"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// Table is one outbox-shaped table as the operator's figures read it,
// through the package that owns it.
type Table struct {
	Name     string // label: email, webhook_outbox, webhook_deliveries
	counts   func(ctx context.Context, db claim.DB) (claim.Counts, error)
	statuses func(ctx context.Context, db claim.DB, recent int) (claim.Statuses, error)
}

// Tables are the outbox tables, in the order they are reported.
var Tables = []Table{
	{"email", outbox.ReadCounts, outbox.ReadStatuses},
	{"webhook_outbox", webhook.ReadOutboxCounts, webhook.ReadOutboxStatuses},
	{"webhook_deliveries", webhook.ReadDeliveryCounts, webhook.ReadDeliveryStatuses},
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
type RecentError = claim.RecentError

// ReadStats is the full picture for an operator: exact counts of every
// status (a scan of the table; fine for a command, not for a scrape).
func ReadStats(ctx context.Context, db claim.DB, recent int) ([]Stats, error) {
	var out []Stats
	for _, t := range Tables {
		st, err := t.statuses(ctx, db, recent)
		if err != nil {
			return nil, err
		}
		out = append(out, Stats{Outbox: t.Name, ByStatus: st.ByStatus, Due: st.Due, OldestDueAge: st.OldestDue,
			OldestDueSecs: st.OldestDue.Seconds(), RecentErrors: st.RecentErrors})
	}
	return out, nil
}

// StatusOrder is each outbox's statuses in the order a row moves through them.
var StatusOrder = map[string][]string{
	"email":              {"pending", "dispatched", "skipped", "failed", "cancelled"},
	"webhook_outbox":     {"pending", "dispatched", "failed", "cancelled"},
	"webhook_deliveries": {"pending", "succeeded", "failed"},
}
