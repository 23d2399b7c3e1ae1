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

// ReadFigures reads every outbox's figures through the claim and failed
// partial indexes, each through the package that owns the table: cheap
// enough for every scrape and the console's sampler.
func ReadFigures(ctx context.Context, db claim.DB) ([]Figures, error) {
	now := time.Now()
	out := make([]Figures, 0, len(Tables))
	for _, o := range Tables {
		c, err := o.counts(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("backlog: figures of %s: %w", o.Name, err)
		}
		out = append(out, Figures{Outbox: o.Name, At: now, Pending: c.Pending, Due: c.Due, OldestDue: c.OldestDue, Failed: c.Failed})
	}
	return out, nil
}
