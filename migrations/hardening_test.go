package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestHardening_ExistingViolatorsNeverBlockAClaim locks how migration 00006
// treats rows written before it: its constraints are NOT VALID (the
// migration does not fail on them), and each pending violator is failed —
// an endpoint disabled — in the same migration, with the reason, because a
// NOT VALID constraint still checks every UPDATE, and one violator in a
// claim's UPDATE would fail the whole claim: delivery would stall. Rows
// that keep the rules are untouched.
func TestHardening_ExistingViolatorsNeverBlockAClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	if err := downBelow(ctx, m, 6); err != nil { // undo 00006 and every migration after it
		t.Fatal(err)
	}
	exec := mustExec(t, pool)
	exec(`INSERT INTO webhook_endpoints (url, secret) VALUES ('https://u:p@bad.example.com/in', 'whsec_dGVzdA=='), ('https://ok.example.com/in', 'whsec_dGVzdA==')`)
	exec(`INSERT INTO webhook_outbox (event_type, payload) VALUES (E'invoice\tpaid', '{}'), ('ok.event', '{}')`)
	exec(`INSERT INTO webhook_outbox (event_type, payload) VALUES ('big.event', jsonb_build_object('b', repeat('x', 300000)))`)
	exec(`INSERT INTO email_outbox (payload) VALUES (jsonb_build_object('to', 'a@example.com', 'subject', 's', 'text', repeat('x', 11000000)))`)
	exec(`INSERT INTO email_outbox (payload) VALUES ('{"to":"a@example.com","subject":"ok","text":"t"}')`)
	if err := m.Up(ctx); err != nil {
		t.Fatalf("Up over rows that break the new rules: %v", err)
	}

	var enabledBad, enabledOK bool
	var reason string
	if err := pool.QueryRow(ctx, `SELECT enabled, coalesce(disabled_reason, '') FROM webhook_endpoints WHERE url LIKE '%bad.example.com%'`).Scan(&enabledBad, &reason); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT enabled FROM webhook_endpoints WHERE url = 'https://ok.example.com/in'`).Scan(&enabledOK); err != nil {
		t.Fatal(err)
	}
	if enabledBad || !strings.Contains(reason, "credentials") || !enabledOK {
		t.Errorf("endpoints after 00006: bad enabled=%v (%q), ok enabled=%v; want bad disabled with the reason, ok untouched", enabledBad, reason, enabledOK)
	}
	// Updating the disabled endpoint is refused until its url is fixed.
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET enabled = true WHERE url LIKE '%bad.example.com%'`); err == nil {
		t.Error("re-enabling the endpoint with credentials in its url was accepted")
	}
	exec(`UPDATE webhook_endpoints SET enabled = true, url = 'https://bad.example.com/in' WHERE url LIKE '%bad.example.com%'`)
	for _, tc := range []struct{ table, where, status string }{
		{"webhook_outbox", `event_type = E'invoice\tpaid'`, "failed"},
		{"webhook_outbox", `event_type = 'big.event'`, "failed"},
		{"webhook_outbox", `event_type = 'ok.event'`, "pending"},
		{"email_outbox", `payload->>'subject' = 's'`, "failed"},
		{"email_outbox", `payload->>'subject' = 'ok'`, "pending"},
	} {
		var status, lastErr string
		if err := pool.QueryRow(ctx, `SELECT status, coalesce(last_error, '') FROM `+tc.table+` WHERE `+tc.where).Scan(&status, &lastErr); err != nil {
			t.Fatal(err)
		}
		if status != tc.status || (status == "failed" && !strings.Contains(lastErr, "00006")) {
			t.Errorf("%s %s: %s (%q); want %s", tc.table, tc.where, status, lastErr, tc.status)
		}
	}
	// A claim-shaped UPDATE over every pending row succeeds.
	exec(`UPDATE email_outbox SET attempts = attempts + 1 WHERE status = 'pending'`)
	exec(`UPDATE webhook_outbox SET attempts = attempts + 1 WHERE status = 'pending'`)
}
