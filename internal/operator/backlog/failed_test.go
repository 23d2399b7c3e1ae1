package backlog

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// `worker failed` lists what failed for good, per outbox, with what
// replay needs for a delivery; only failed rows, and an unknown outbox is
// refused by name.
func TestListFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	for _, sql := range []string{
		`INSERT INTO email_outbox (payload, status, attempts, last_error) VALUES
			('{"to":"ada@example.com","subject":"s","text":"t"}', 'failed', 5, '550 5.1.1 no such user'),
			('{"to":"bob@example.com","subject":"s","text":"t"}', 'pending', 1, 'timeout')`,
		`INSERT INTO webhook_outbox (event_type, payload, status, last_error) VALUES ('invoice.paid', '{}', 'failed', 'fan-out failed')`,
		`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://h.example.com/hook', 'whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz')`,
		`INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}')`,
		`INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, last_error)
			SELECT e.id, p.id, 'failed', 10, 'HTTP 500' FROM webhook_events e, webhook_endpoints p`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	email, err := ListFailed(ctx, db, "email", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(email) != 1 || email[0].Table != "email_outbox" || email[0].What != "raw to ada@example.com" ||
		email[0].Attempts != 5 || email[0].Error != "550 5.1.1 no such user" {
		t.Errorf("failed email rows: %+v", email)
	}
	hooks, err := ListFailed(ctx, db, "webhook", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hooks) != 2 || hooks[0].Table != "webhook_deliveries" || hooks[0].EventID == "" || hooks[0].EndpointID == "" ||
		hooks[0].What != "invoice.paid → https://h.example.com/hook" || hooks[1].Table != "webhook_outbox" {
		t.Errorf("failed webhook rows: %+v", hooks)
	}
	if _, err := ListFailed(ctx, db, "sms", 10); err == nil {
		t.Error(`ListFailed("sms") = nil error, want one naming the outbox`)
	}
}
