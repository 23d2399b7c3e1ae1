package backlog

import (
	"context"
	"fmt"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Figures are one outbox's figures at one moment.
type Figures struct {
	Outbox    string        `json:"outbox"`
	At        time.Time     `json:"at"`
	Pending   int64         `json:"pending"`
	Due       int64         `json:"due"`
	OldestDue time.Duration `json:"oldest_due_ns"`
	Failed    int64         `json:"failed"`
}

// countsSQL counts t's pending and failed rows. Each predicate is its
// partial index's in full (migration 00010): status = 'pending' alone
// would count a table of millions of sent rows by reading all of it.
// Names are constants of this module, never input.
func countsSQL(t claim.Table) string {
	return fmt.Sprintf(`SELECT
	(SELECT count(*) FROM %[1]s WHERE %[2]s),
	(SELECT count(*) FROM %[1]s WHERE status = 'failed' AND created_at IS NOT NULL)`, t.Name, t.Pending())
}

// ReadFigures reads every outbox's figures through the claim and failed
// partial indexes: cheap enough for every scrape and the console's
// sampler.
func ReadFigures(ctx context.Context, db claim.DB) ([]Figures, error) {
	now := time.Now()
	out := make([]Figures, 0, len(Tables))
	for _, o := range Tables {
		f := Figures{Outbox: o.Name, At: now}
		err := db.QueryRow(ctx, countsSQL(o.Table)).Scan(&f.Pending, &f.Failed)
		if err != nil {
			return nil, fmt.Errorf("backlog: figures of %s: %w", o.Table.Name, err)
		}
		if f.Due, f.OldestDue, err = o.Table.ReadDue(ctx, db); err != nil {
			return nil, fmt.Errorf("backlog: figures of %s: %w", o.Table.Name, err)
		}
		out = append(out, f)
	}
	return out, nil
}
