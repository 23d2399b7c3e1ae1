package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// One history pass does the three things retention needs: it makes the
// weeks ahead, drops the weeks past retention and deletes the webhook
// events past theirs; and its output says what it did.
func TestHistory_OnePassMakesDropsAndDeletes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	for _, sql := range []string{
		`SELECT postbox_history_partitions(t, now() - interval '20 weeks', now())
			FROM unnest(ARRAY['email_attempts', 'email_events', 'webhook_delivery_attempts']::regclass[]) t`,
		`INSERT INTO email_attempts (row_id, attempt, outcome, at) VALUES (gen_random_uuid(), 1, 'sent', now() - interval '19 weeks')`,
		`WITH ep AS (INSERT INTO webhook_endpoints (url, secret)
			VALUES ('https://example.com/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') RETURNING id),
		ev AS (INSERT INTO webhook_events (event_type, payload, created_at) VALUES ('invoice.paid', '{}', now() - interval '19 weeks') RETURNING id)
		INSERT INTO webhook_deliveries (event_id, endpoint_id, status, next_retry_at) SELECT ev.id, ep.id, 'succeeded', now() FROM ev, ep`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// As if the passes had stopped a week ago: the newest week is missing.
	weeks, err := history.Weeks(ctx, pool, history.EmailAttempts)
	if err != nil {
		t.Fatal(err)
	}
	newest := weeks[len(weeks)-1].Partition
	for _, sql := range []string{`ALTER TABLE email_attempts DETACH PARTITION ` + newest, `DROP TABLE ` + newest} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	h := NewHistory(pool, "replica-a", history.Retention{Email: 12 * 7 * 24 * time.Hour, Webhook: 90 * 24 * time.Hour}, discard)
	out, err := h.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.Made != 1 || len(out.Dropped) == 0 || out.WebhookEvents != 1 || out.Held != "" {
		t.Fatalf("pass output %+v; want 1 week made, the weeks past 12 weeks dropped, 1 webhook event deleted", out)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM email_attempts`); n != 0 {
		t.Errorf("email_attempts keeps %d rows of 19 weeks ago; want them dropped", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM webhook_events`); n != 0 {
		t.Errorf("webhook_events keeps %d events of 19 weeks ago; want them deleted", n)
	}
}
