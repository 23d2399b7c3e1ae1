package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// OPS_EMAIL's notice is one email_outbox row in the disabling transaction;
// a retried disable writes no second one. A 410's, with no failure run,
// says none; a tenant's endpoint is named with its tenant.
func TestOpsEmailNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if opsEmailNotice("", nil) != nil {
		t.Fatal("no OPS_EMAIL, yet a notice")
	}
	notify := opsEmailNotice("ops@example.com", nil)
	failing := webhook.EndpointDisabled{OpsSubject: webhook.OpsSubject{EndpointID: "0b7c6a52-8d0e-4d7e-9d51-6d1f0f9a1c11", URL: "https://example.com/in"},
		Reason: "failing", Cause: webhook.DisabledFailing, FailingSince: time.Now().Add(-120 * time.Hour), ConsecutiveFailures: 40, DisabledAt: time.Now()}
	gone := webhook.EndpointDisabled{OpsSubject: webhook.OpsSubject{Tenant: "acme", EndpointID: "0b7c6a52-8d0e-4d7e-9d51-6d1f0f9a1c12", URL: "https://example.com/gone"},
		Reason: "receiver answered 410 Gone", Cause: webhook.DisabledGone, DisabledAt: time.Now()}
	for _, d := range []webhook.EndpointDisabled{failing, failing, gone, gone} {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return notify(ctx, tx, d) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		d         webhook.EndpointDisabled
		says, not string
	}{
		{failing, "It had failed 40 times in a row since ", "tenant"},
		{gone, `(https://example.com/gone) of tenant "acme" was disabled`, "since"},
	} {
		var n int
		var to, text string
		if err := pool.QueryRow(ctx, `SELECT count(*), max(payload->>'to'), max(payload->>'text') FROM email_outbox WHERE payload->>'subject' LIKE '%' || $1 || '%'`,
			c.d.EndpointID).Scan(&n, &to, &text); err != nil {
			t.Fatal(err)
		}
		if n != 1 || to != "ops@example.com" || !strings.Contains(text, c.says) || strings.Contains(text, c.not) {
			t.Fatalf("%d notice rows to %q saying %q, want 1 to ops@example.com saying %q and not %q", n, to, text, c.says, c.not)
		}
	}
}
