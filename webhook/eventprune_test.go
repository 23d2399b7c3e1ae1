package webhook

import (
	"context"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Webhook events past their retention go with their deliveries, unless a
// delivery is still pending (work to do) or a kept replay points at them;
// younger events stay.
func TestPruneEvents_OnlyOldEventsWhoseDeliveriesAreFinal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var endpoint string
	if err := db.QueryRow(ctx, `INSERT INTO webhook_endpoints (url, secret)
		VALUES ('https://example.com/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') RETURNING id`).Scan(&endpoint); err != nil {
		t.Fatal(err)
	}
	event := func(name, age, status string, replayOf *string) string {
		t.Helper()
		var id string
		if err := db.QueryRow(ctx, `WITH ev AS (
			INSERT INTO webhook_events (event_type, payload, created_at, replay_of)
			VALUES ($1, '{}', now() - $2::interval, $4) RETURNING id, created_at)
		INSERT INTO webhook_deliveries (event_id, endpoint_id, status, next_retry_at, created_at)
		SELECT ev.id, $3, $5, now(), ev.created_at FROM ev RETURNING event_id`, name, age, endpoint, replayOf, status).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	succeeded := event("old.succeeded", "100 days", "succeeded", nil)
	failed := event("old.failed", "100 days", "failed", nil)
	pending := event("old.pending", "100 days", "pending", nil)
	replayed := event("old.replayed", "100 days", "succeeded", nil)
	event("young.replay", "1 day", "succeeded", &replayed)
	young := event("young", "89 days", "succeeded", nil)

	n, err := PruneEvents(ctx, db, 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("deleted %d events; want 2 (the old succeeded and the old failed)", n)
	}
	for id, want := range map[string]int{succeeded: 0, failed: 0, pending: 1, replayed: 1, young: 1} {
		if got := count(t, db, `SELECT count(*) FROM webhook_events WHERE id = $1`, id); got != want {
			t.Errorf("event %s: %d kept; want %d", id, got, want)
		}
		if got := count(t, db, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1`, id); got != want {
			t.Errorf("deliveries of event %s: %d kept; want %d", id, got, want)
		}
	}
	cutoffs, err := history.Dropped(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cutoffs[history.WebhookEvents]; !ok || c.Retention != 90*24*time.Hour {
		t.Errorf("recorded cutoff of webhook events: %+v (%v); want one with retention 90 days", c, ok)
	}
	if n, err := PruneEvents(ctx, db, 0); err != nil || n != 0 {
		t.Errorf("kept for ever: deleted %d, %v; want nothing", n, err)
	}
}
