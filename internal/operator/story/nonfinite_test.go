package story

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// worker show reads a row whose due time is 'infinity' or '-infinity' —
// plain SQL from before migration 00026, or where its CHECK was dropped by
// hand — instead of failing on it ("can't scan into dest[7]" made the
// command exit 1): each reads as the furthest instant Go holds.
func TestFind_NonFiniteDueTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	one := func(sql string) string {
		t.Helper()
		var id string
		if err := db.QueryRow(ctx, sql).Scan(&id); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return id
	}
	for _, sql := range []string{
		`ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_next_attempt_at_finite`,
		`ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_next_attempt_at_finite`,
		`ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_next_retry_at_finite`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ep := one(`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://h.example.com', 'whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz') RETURNING id`)
	event := one(`INSERT INTO webhook_events (event_type, payload) VALUES ('t', '{}') RETURNING id`)
	for _, tc := range []struct {
		name, insert string
		kind         Kind
	}{
		{"email due at infinity", `INSERT INTO email_outbox (payload, next_attempt_at) VALUES ('{"to":"a@example.com","subject":"s","text":"t"}', 'infinity') RETURNING id`, KindEmail},
		{"email due at -infinity", `INSERT INTO email_outbox (payload, next_attempt_at) VALUES ('{"to":"a@example.com","subject":"s","text":"t"}', '-infinity') RETURNING id`, KindEmail},
		{"webhook_outbox due at infinity", `INSERT INTO webhook_outbox (event_type, payload, next_attempt_at) VALUES ('t', '{}', 'infinity') RETURNING id`, KindWebhookOutbox},
		{"delivery due at infinity", `INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at) VALUES ('` + event + `', '` + ep + `', 'infinity') RETURNING id`, KindDelivery},
	} {
		id := one(tc.insert)
		s, err := Find(ctx, db, id, "")
		if err != nil || s.Kind != tc.kind {
			t.Errorf("%s: Find = %v (kind %q); want the row's story", tc.name, err, s.Kind)
		}
	}
}
