package backlog

import (
	"context"
	"fmt"
	"time"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
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

// ListFailed reads the newest rows of one outbox ("email" or "webhook")
// that failed for good, at most limit per table, through the packages that
// own the tables: for webhooks, the failed deliveries and then the failed
// webhook_outbox rows.
func ListFailed(ctx context.Context, db outbox.DB, outboxName string, limit int) ([]Failed, error) {
	out := []Failed{}
	switch outboxName {
	case "email":
		recs, err := outbox.ListFailed(ctx, db, limit)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			to := r.To
			if to == "" {
				to = "?"
			}
			out = append(out, Failed{Table: "email_outbox", ID: r.ID, CreatedAt: r.CreatedAt, Attempts: r.Attempts,
				What: string(r.Kind) + " to " + to, Error: r.LastError})
		}
	case "webhook":
		ds, err := webhook.ListFailedDeliveries(ctx, db, limit)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			out = append(out, Failed{Table: "webhook_deliveries", ID: d.ID, CreatedAt: d.CreatedAt, Attempts: d.Attempts,
				What: d.EventType + " → " + d.EndpointURL, Error: d.LastError, EventID: d.EventID, EndpointID: d.EndpointID})
		}
		obs, err := webhook.ListFailedOutbox(ctx, db, limit)
		if err != nil {
			return nil, err
		}
		for _, o := range obs {
			out = append(out, Failed{Table: "webhook_outbox", ID: o.ID, CreatedAt: o.CreatedAt, Attempts: o.Attempts,
				What: o.EventType, Error: o.LastError})
		}
	default:
		return nil, fmt.Errorf("backlog: outbox %q: want email or webhook", outboxName)
	}
	return out, nil
}
