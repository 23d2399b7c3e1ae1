package story

import (
	"context"
	"fmt"
	"time"

	"github.com/postbox/postbox/internal/claim"
)

// Outbox is one outbox-shaped table as the operator's figures read it.
type Outbox struct {
	Name  string // label: email, webhook_outbox, webhook_deliveries
	Table claim.Table
}

// Outboxes are the tables whose due figures the console samples, in the
// order `worker stats` prints them.
var Outboxes = []Outbox{
	{"email", claim.Table{Name: "email_outbox", DueColumn: "next_attempt_at"}},
	{"webhook_outbox", claim.Table{Name: "webhook_outbox", DueColumn: "next_attempt_at"}},
	{"webhook_deliveries", claim.Table{Name: "webhook_deliveries", DueColumn: "next_retry_at", LegacyNullDue: true}},
}

// Figures are one outbox's figures at one moment.
type Figures struct {
	Outbox    string        `json:"outbox"`
	At        time.Time     `json:"at"`
	Pending   int64         `json:"pending"`
	Due       int64         `json:"due"`
	OldestDue time.Duration `json:"oldest_due_ns"`
	Failed    int64         `json:"failed"`
}

// ReadFigures reads every outbox's figures through the claim and failed
// partial indexes: cheap enough to sample every few seconds.
func ReadFigures(ctx context.Context, db DB) ([]Figures, error) {
	now := time.Now()
	out := make([]Figures, 0, len(Outboxes))
	for _, o := range Outboxes {
		f := Figures{Outbox: o.Name, At: now}
		// Names are constants of this package, never input.
		err := db.QueryRow(ctx, fmt.Sprintf(`SELECT
			(SELECT count(*) FROM %[1]s WHERE status = 'pending'),
			(SELECT count(*) FROM %[1]s WHERE status = 'failed')`, o.Table.Name)).Scan(&f.Pending, &f.Failed)
		if err != nil {
			return nil, fmt.Errorf("story: figures of %s: %w", o.Table.Name, err)
		}
		if f.Due, f.OldestDue, err = o.Table.ReadDue(ctx, db); err != nil {
			return nil, fmt.Errorf("story: figures of %s: %w", o.Table.Name, err)
		}
		out = append(out, f)
	}
	return out, nil
}
