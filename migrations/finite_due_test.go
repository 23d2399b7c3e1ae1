package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00026 on a database that already holds non-finite due times:
// up does not fail on them; a pending row due since '-infinity' is due
// now, one due at 'infinity' is failed with the reason (sent only if an
// operator requeues it), any other row's time becomes its created_at; the
// CHECKs are validated, so every row keeps them; down drops them and up
// again works.
func TestFiniteDueUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	exec := mustExec(t, pool)
	if err := downBelow(ctx, m, 26); err != nil {
		t.Fatal(err)
	}
	const payload = `'{"to":"ada@example.com","subject":"s","text":"t"}'`
	exec(`INSERT INTO email_outbox (payload, next_attempt_at, customer_id) VALUES
		(` + payload + `, '-infinity', 'early'), (` + payload + `, 'infinity', 'never'), (` + payload + `, now(), 'fine')`)
	exec(`INSERT INTO email_outbox (payload, next_attempt_at, customer_id, status, dispatched_at) VALUES (` + payload + `, 'infinity', 'sent', 'dispatched', now())`)
	exec(`INSERT INTO webhook_outbox (event_type, payload, next_attempt_at) VALUES ('early', '{}', '-infinity'), ('never', '{}', 'infinity')`)
	exec(`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://h.example.com', 'whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz')`)
	exec(`INSERT INTO webhook_events (event_type, payload) VALUES ('-infinity', '{}'), ('infinity', '{}')`)
	exec(`INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at, last_error)
		SELECT e.id, p.id, e.event_type::timestamptz, e.event_type FROM webhook_events e, webhook_endpoints p`)
	if err := m.Up(ctx); err != nil {
		t.Fatalf("up over non-finite due times: %v", err)
	}

	for _, tc := range []struct{ name, sql, status, lastError string }{
		{"email due since -infinity", `SELECT status, coalesce(last_error, ''), next_attempt_at <= now() FROM email_outbox WHERE customer_id = 'early'`, "pending", ""},
		{"email due at infinity", `SELECT status, coalesce(last_error, ''), next_attempt_at <= now() FROM email_outbox WHERE customer_id = 'never'`, "failed", "migration 00026"},
		{"sent email", `SELECT status, coalesce(last_error, ''), next_attempt_at = created_at FROM email_outbox WHERE customer_id = 'sent'`, "dispatched", ""},
		{"untouched email", `SELECT status, coalesce(last_error, ''), next_attempt_at <= now() FROM email_outbox WHERE customer_id = 'fine'`, "pending", ""},
		{"webhook_outbox due since -infinity", `SELECT status, coalesce(last_error, ''), next_attempt_at <= now() FROM webhook_outbox WHERE event_type = 'early'`, "pending", ""},
		{"webhook_outbox due at infinity", `SELECT status, coalesce(last_error, ''), next_attempt_at <= now() FROM webhook_outbox WHERE event_type = 'never'`, "failed", "migration 00026"},
		{"delivery due since -infinity", `SELECT status, last_error, next_retry_at <= now() FROM webhook_deliveries WHERE last_error = '-infinity'`, "pending", "-infinity"},
		{"delivery due at infinity", `SELECT status, last_error, next_retry_at <= now() FROM webhook_deliveries WHERE last_error LIKE '%00026%'`, "failed", "migration 00026"},
	} {
		var status, lastError string
		var finite bool
		if err := pool.QueryRow(ctx, tc.sql).Scan(&status, &lastError, &finite); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if status != tc.status || !strings.Contains(lastError, tc.lastError) || !finite {
			t.Errorf("%s after 00026: %s (%q), finite due %v; want %s with %q", tc.name, status, lastError, finite, tc.status, tc.lastError)
		}
	}
	var notValid int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conname LIKE '%\_finite' AND convalidated`).Scan(&notValid); err != nil || notValid != 3 {
		t.Errorf("validated finite-due CHECKs: %d (%v); want 3, every row kept to them", notValid, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (payload, next_attempt_at) VALUES (`+payload+`, '-infinity')`); !isCheck(err, "email_outbox_next_attempt_at_finite") {
		t.Errorf("after 00026, a due time of -infinity = %v; want email_outbox_next_attempt_at_finite", err)
	}

	if err := downBelow(ctx, m, 26); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO email_outbox (payload, next_attempt_at) VALUES (` + payload + `, 'infinity')`)
	if err := m.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
