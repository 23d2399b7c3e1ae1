package backlog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/claim"
)

// Failed is one row that failed for good and waits for an operator.
type Failed struct {
	Table     string    `json:"table"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Attempts  int       `json:"attempts"`
	What      string    `json:"what"` // recipient, or event type → endpoint
	Error     string    `json:"error"`
	// EventID and EndpointID are a failed delivery's, for replay.
	EventID    string `json:"event_id,omitempty"`
	EndpointID string `json:"endpoint_id,omitempty"`
}

// failedQueries read the newest failed rows of each outbox through the
// failed partial indexes; $1 is the limit.
var failedQueries = map[string][]string{
	"email": {`SELECT 'email_outbox', id::text, created_at, attempts,
		kind || ' to ' || COALESCE(payload->>'to', '?'), COALESCE(last_error, ''), '', ''
		FROM email_outbox WHERE status = 'failed' ORDER BY created_at DESC LIMIT $1`},
	"webhook": {
		`SELECT 'webhook_deliveries', d.id::text, d.created_at, d.attempts,
			e.event_type || ' → ' || p.url, COALESCE(d.last_error, ''), d.event_id::text, d.endpoint_id::text
			FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
			JOIN webhook_endpoints p ON p.id = d.endpoint_id
			WHERE d.status = 'failed' ORDER BY d.created_at DESC LIMIT $1`,
		`SELECT 'webhook_outbox', id::text, created_at, attempts, event_type, COALESCE(last_error, ''), '', ''
			FROM webhook_outbox WHERE status = 'failed' ORDER BY created_at DESC LIMIT $1`,
	},
}

// ListFailed reads the newest rows of one outbox ("email" or "webhook")
// that failed for good, at most limit per table.
func ListFailed(ctx context.Context, db claim.DB, outbox string, limit int) ([]Failed, error) {
	queries, ok := failedQueries[outbox]
	if !ok {
		return nil, fmt.Errorf("backlog: outbox %q: want email or webhook", outbox)
	}
	out := []Failed{}
	for _, q := range queries {
		rows, err := db.Query(ctx, q, limit)
		if err != nil {
			return nil, err
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Failed, error) {
			var f Failed
			err := r.Scan(&f.Table, &f.ID, &f.CreatedAt, &f.Attempts, &f.What, &f.Error, &f.EventID, &f.EndpointID)
			return f, err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}
